"""llmbench sweep and the knobs it turns (attention, static cache, torch.compile, int8), on a tiny real Qwen2."""

import pytest
import torch

import llmbench
from llmbench.core.errors import UserError
from llmbench.drivers.sweep import Setup, best_of, expand, pareto
from llmbench.engines.hf import models
from llmbench.options import ModelOptions
from llmbench.spec import comma_list


def test_expand_makes_every_valid_combination_and_says_what_it_left_out():
    setups, skipped = expand(["float32", "bfloat16"], [1, 2], [None], ["dynamic", "static"], [False, True], [None])
    # compiled implies static: (dynamic, compiled) and (static, compiled) are one setup
    assert len(setups) == 2 * 2 * 3 and len(set(setups)) == len(setups)
    assert all(s.cache == "static" for s in setups if s.compile)
    quantizes = [None, "int8", "int8-dynamic"]
    setups, skipped = expand(["float32", "bfloat16"], [2], [None], ["dynamic"], [False, True], quantizes)
    assert Setup("float32", 2, quantize="int8-dynamic") in setups
    assert Setup("bfloat16", 2, quantize="int8") in setups and Setup("bfloat16", 2, quantize="int8", compile=True,
                                                                      cache="static") in setups  # fmt: skip
    assert not any(s.quantize == "int8-dynamic" and (s.dtype != "float32" or s.compile) for s in setups)
    assert any("int8-dynamic with bfloat16" in w for w in skipped) and any("compile" in w for w in skipped)
    assert Setup("bfloat16", 2, quantize="int8").label() == "bfloat16+int8 2t"
    assert Setup("float32", 2, quantize="int8-dynamic").label() == "int8-dynamic 2t"


def test_lists_are_checked():
    assert comma_list("a, b", "--x") == ["a", "b"]
    for bad in ("a,,b", "a,a", ","):
        with pytest.raises(UserError, match="^--x '"):
            comma_list(bad, "--x")


def test_pareto_keeps_the_setups_nothing_beats_on_both():
    rows = [
        {"label": "fast-first", "ttft_ms_mean": 10.0, "tpot_ms_mean": 9.0},
        {"label": "fast-decode", "ttft_ms_mean": 30.0, "tpot_ms_mean": 5.0},
        {"label": "dominated", "ttft_ms_mean": 31.0, "tpot_ms_mean": 9.5},
        {"label": "tie-on-ttft", "ttft_ms_mean": 10.0, "tpot_ms_mean": 9.1},
        {"label": "no-tpot", "ttft_ms_mean": 1.0, "tpot_ms_mean": None},
    ]
    assert [r["label"] for r in pareto(rows)] == ["fast-decode", "fast-first"]
    medians = [{"label": r["label"], "ttft_ms_p50": r["tpot_ms_mean"], "tpot_ms_p50": r["ttft_ms_mean"]} for r in rows]
    assert [r["label"] for r in pareto(medians, "p50")] == ["fast-first", "fast-decode"]
    assert best_of(rows, "tpot_ms_mean")["label"] == "fast-decode"
    assert best_of(rows, "ttft_ms_mean")["label"] == "no-tpot"


@pytest.mark.parametrize(
    "args, message",
    [
        (("--dtype", "float32,auto"), "--dtype auto"),
        (("--dtype", "float32,float32"), "twice"),
        (("--threads", "1,x"), "--threads: expected an integer, not 'x' (in '1,x')"),
        (("--threads", "0"), "--threads must be at least 1, not 0"),
        (("--threads", "2,5000"), "--threads must be at most 4,096, not 5000"),
        (("--threads", "1,,2"), "--threads '1,,2' has an empty item"),
        (("--threads", "2,2"), "--threads '2,2' lists a value twice"),
        (
            ("--dtype", "float32,float64"),
            "--dtype: input should be 'auto', 'float32', 'bfloat16' or 'float16', not 'float64' (in 'float32,float64')",
        ),
        (("--attn", "magic"), "--attn: input should be 'eager'"),
        (("--cache", "paged"), "--cache: input should be 'dynamic' or 'static'"),
        (("--quantize", "int4"), "--quantize: input should be 'none', 'int8' or 'int8-dynamic', not 'int4'"),
        (("--dtype", "bfloat16", "--quantize", "int8-dynamic"), "no setup to sweep"),
        (("--rounds", "0"), "--rounds"),
        (("--rank-by", "p99"), "--rank-by"),
        # was: accepted and silently ignored (a bare list is for the engines other than transformers: none here)
        (("--precision", "q8_0"), "--precision q8_0: a weight format of --engine"),
        # was: the grid's comma list of caches taken as the base options' one cache, refused (past that, the plan)
        (("--cache", "dynamic,static", "--precision", "q8_0"), "--precision q8_0: a weight format of --engine"),
        (("--max-kld", "nan"), "--max-kld must be a KL divergence"),
        # was: a plan of a million requests built, then measured for days
        (("--rounds", "1000000", "--threads", "1,2"), "--rounds 1,000,000 x 4 setups x 3 prompts: 12,000,000 requests"),
    ],
)
def test_bad_sweep_options_are_one_line(cli, tiny_model_dir, prompt_file, tmp_path, args, message):
    r = cli("sweep", prompt_file, "-m", tiny_model_dir, *args, "-o", tmp_path / "s", "-q")
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "s" / "sweep.json").exists()


def test_a_bad_gate_is_refused_before_the_sweep_starts(cli, tiny_model_dir, prompt_file, tmp_path):
    # was: the output folder made and the sweep's status line printed, then the refusal (two lines)
    r = cli("sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "--max-kld", "nan", "-o", tmp_path / "s")
    assert r.returncode == 2 and "--max-kld must be a KL divergence" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_a_dataset_is_not_read_as_a_prompt_list(cli, tiny_model_dir, tmp_path):
    data = tmp_path / "sg.json"
    data.write_text('[{"conversations": [{"from": "human", "value": "hello"}]}]', encoding="utf-8")
    # was: each line of the JSON file a prompt ('[{"conversations": ...')
    r = cli("sweep", data, "-m", tiny_model_dir, "--dtype", "float32", "-o", tmp_path / "s", "-q")
    assert r.returncode == 2 and "is a dataset (.json), not a prompt list" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "s").exists()


def test_int8_dynamic_needs_float32_and_every_int8_the_cpu(tiny_model_dir):
    with pytest.raises(UserError, match="float32"):
        models.validate(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="bfloat16",
                                     quantize="int8-dynamic"))  # fmt: skip
    models.validate(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="bfloat16", quantize="int8"))
    with pytest.raises(UserError, match="--quantize: input should be 'none', 'int8' or 'int8-dynamic', not 'int4'"):
        models.validate(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="float32", quantize="int4"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_int8_weight_only_linear_is_the_dequantized_matmul(dtype):
    """The kernel against the formula it stands for: y = x @ (q * s).T + b, q = round(w / s), s = absmax / 127."""
    from llmbench.engines.hf.quantize import Int8WeightLinear

    torch.manual_seed(0)
    linear = torch.nn.Linear(96, 40, bias=True)
    linear.weight.data[3] *= 50  # one loud output channel must not cost the others their resolution
    layer = Int8WeightLinear(linear, dtype)
    w = linear.weight.detach().double()
    s = w.abs().amax(dim=1) / 127
    q = torch.round(w / s[:, None]).clamp(-127, 127)
    assert torch.equal(layer.weight_int8.double(), q)
    x = torch.randn(2, 5, 96)
    expected = x.double() @ (q * s.to(dtype).double()[:, None]).T + linear.bias.detach().to(dtype).double()
    got = layer(x.to(dtype)).double()
    assert got.shape == (2, 5, 40)
    tol = 1e-4 if dtype == torch.float32 else 0.05 * expected.abs().max().item()
    assert (got - expected).abs().max().item() < tol
    # and per-channel scales keep quiet channels close to float: far closer than one scale for the whole matrix
    err = (got - x.double() @ w.T - linear.bias.detach().double()).abs()
    assert err[..., :3].max() < 0.05 * (x.double() @ w.T)[..., :3].abs().max()


def test_graphs_compiled_by_another_setup_are_not_blamed_on_this_one(tiny_model_dir):
    """torch's compile counter is process-wide; a sweep interleaves setups, so a graph another setup (or any
    other code) compiles between this backend's requests must not appear in this run's recompile warning."""
    from llmbench.backends import Request
    from llmbench.backends.inprocess import InProcessBackend
    from llmbench.engines.hf.generation import compiled_graphs
    from llmbench.workloads.prompts import PromptSet

    lm = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    backend = InProcessBackend(None, llmbench.RunOptions(max_new_tokens=2, ignore_eos=True), loaded=lm)
    prompts = PromptSet.from_list(["one", "two"])
    lm.call(lambda: backend.start_now(prompts))
    twice = torch.compile(lambda x: x * 2 + 1, backend="eager")  # dynamo traces it: the counter moves
    before = compiled_graphs()
    for i, p in enumerate(prompts.prompts):
        lm.call(lambda p=p, i=i: backend.measure_now(Request(p, i, 0)))
        twice(torch.ones(i + 2))  # between requests, as another setup's warm-up would
    assert compiled_graphs() > before and backend.warnings() == []


def test_a_setup_whose_engine_failed_is_never_best(tmp_path):
    """A crashed setup keeps the requests it finished, the fastest of a round perhaps: it measured part of its
    rounds, so it can't be named best (an engine crash in tests/e2e/test_engines.py once made it best)."""
    from llmbench.drivers.sweep import Setup, Sweep, SweepEntry
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.results.schema import FailedRequest
    from llmbench.workloads.prompts import PromptSet
    from tests.helpers import synthetic_run

    crashed, whole = synthetic_run(n=2, ttft_ms=50.0, tpot_ms=5.0), synthetic_run(n=2, ttft_ms=80.0, tpot_ms=9.0)
    crashed.complete = False
    crashed.failed_requests = [FailedRequest(prompt_index=0, repeat=1, error="worker died (SIGSEGV)")]
    sweep = Sweep([Setup("float32", 1), Setup("float32", 2)], ModelOptions(), RunOptions(), tmp_path)
    for setup, run in zip(sweep.setups, (crashed, whole), strict=True):
        entry = SweepEntry(setup, None, tmp_path / f"{setup.slug()}.json")
        entry.track = type("T", (), {"run": run})()
        sweep.entries.append(entry)
    record = sweep.record(PromptSet("p.txt", "0" * 64, ("a", "b"), (1, 2)), complete=True)
    assert [r["failed"] for r in record["results"]] == [True, False]
    assert record["best"]["tpot_ms"]["label"] == record["best"]["ttft_ms"]["label"] == "float32 2t"
    assert record["pareto"] == ["float32 2t"]
