"""llmbench sweep and the knobs it turns (attention, static cache, torch.compile, int8), on a tiny real Qwen2."""

import json

import pytest
import torch

import llmbench
from llmbench.core.errors import UserError
from llmbench.drivers.sweep import Setup, best_of, expand, pareto, split_list
from llmbench.engines.hf import models
from llmbench.options import ModelOptions
from llmbench.results.storage import load_run
from tests.helpers import cli_process, wait_for_requests


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
    assert split_list("a, b", "--x") == ["a", "b"]
    for bad in ("a,,b", "a,a", ","):
        with pytest.raises(UserError):
            split_list(bad, "--x")


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


@pytest.mark.slow
def test_sweep_writes_a_run_per_setup_and_ranks_them(cli, tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "sweep"
    r = cli(
        "sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32,bfloat16", "--threads", "1,2",
        "--max-new-tokens", "4", "--ignore-eos", "--rounds", "2", "-o", out, "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert record["complete"] is True and record["rounds"] == 2
    rows = record["results"]
    assert {(x["dtype"], x["threads"]) for x in rows} == {(d, t) for d in ("float32", "bfloat16") for t in (1, 2)}
    runs = {}
    for row in rows:
        run = load_run(out / row["run_file"])
        runs[row["label"]] = run
        assert run.complete and len(run.requests) == 2 * 3
        assert (run.config.dtype, run.config.threads) == (row["dtype"], row["threads"])
        assert row["tpot_ms_mean"] == pytest.approx(run.summary.tpot_ms.mean)
        assert row["ttft_ms_mean"] == pytest.approx(run.summary.ttft_ms.mean)
        assert row["tpot_efficiency"] is not None and run.machine.probe_before.threads == row["threads"]
    for metric in ("tpot_ms", "ttft_ms"):
        best = min(rows, key=lambda x: x[f"{metric}_mean"])
        assert record["best"][metric]["label"] == best["label"]
        assert record["best_margin"][metric]["runner_up"] != best["label"]
    assert record["pareto"] and record["best"]["tpot_ms"]["label"] in record["pareto"]
    # interleaved: every setup finished round 0 before any started round 1
    first_round_end = max(q.started_s for run in runs.values() for q in run.requests if q.repeat == 0)
    second_round_start = min(q.started_s for run in runs.values() for q in run.requests if q.repeat == 1)
    assert first_round_end < second_round_start
    assert "best TPOT:" in r.stdout and "sweep by TTFT" in r.stdout
    # the runs are ordinary runs: compare tells which setting differs
    a, b = (out / rows[0]["run_file"]), (out / rows[-1]["run_file"])
    c = cli("compare", a, b)
    assert c.returncode == 0 and "setup differs: dtype" in c.stdout and "setup differs: threads" in c.stdout
    assert record["varied"] == ["dtype", "threads"]  # from the schema's list of what compare checks
    # a finished sweep is never overwritten
    again = cli("sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "-o", out, "-q")
    assert again.returncode == 2 and "already holds a sweep" in again.stderr


@pytest.mark.parametrize(
    "args, message",
    [
        (("--dtype", "float32,auto"), "--dtype auto"),
        (("--dtype", "float32,float32"), "twice"),
        (("--threads", "1,x"), "not a whole number"),
        (("--threads", "0"), "--threads must be 1 to 4096"),
        (("--attn", "magic"), "unknown --attn"),
        (("--cache", "paged"), "unknown --cache"),
        (("--quantize", "int4"), "unknown --quantize"),
        (("--dtype", "bfloat16", "--quantize", "int8-dynamic"), "no setup to sweep"),
        (("--rounds", "0"), "--rounds"),
        (("--rank-by", "p99"), "--rank-by"),
        # was: accepted and silently ignored (a bare list is for the engines other than transformers: none here)
        (("--precision", "q8_0"), "--precision q8_0: a weight format of --engine"),
        (("--max-kld", "nan"), "--max-kld must be a KL divergence"),
        # was: a plan of a million requests built, then measured for days
        (("--rounds", "333334"), "--rounds x setups x prompts 2000004: more than"),
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


@pytest.mark.slow
def test_static_cache_and_eager_attention_give_the_same_tokens(tiny_model_dir, prompt_file, tmp_path):
    runs = {}
    for attn, cache in ((None, "dynamic"), ("eager", "static"), ("sdpa", "dynamic")):
        lm = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1, attn=attn)
        runs[(attn, cache)] = run = llmbench.measure(prompt_file, model=lm, max_new_tokens=6, ignore_eos=True,
                                                     warmup=0, cache=cache)  # fmt: skip
        assert run.config.cache_implementation == cache
        assert run.config.attn_implementation == (attn or lm.model.config._attn_implementation)
    hashes = {k: [r.output_token_ids_sha256 for r in v.requests] for k, v in runs.items()}
    assert len({tuple(h) for h in hashes.values()}) == 1  # same greedy tokens whatever the kernel and cache


@pytest.mark.slow
@pytest.mark.parametrize("quantize, dtype", [("int8", "bfloat16"), ("int8", "float32"), ("int8-dynamic", "float32")])
def test_int8_quantization_reads_fewer_bytes_and_still_generates(tiny_model_dir, prompt_file, quantize, dtype):
    full = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    q = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype=dtype, threads=1, quantize=quantize)
    assert q.quantization == quantize and q.dtype == dtype and q.load.quantize_s is not None
    # the tied 151936x64 head dominates: int8 stores it in a quarter of float32's bytes
    assert q.load.decode_weight_bytes < 0.4 * full.load.decode_weight_bytes
    run = llmbench.measure(prompt_file, model=q, max_new_tokens=5, ignore_eos=True, warmup=0)
    assert run.config.quantization == quantize and all(r.output_tokens == 5 for r in run.requests)


def test_int8_dynamic_needs_float32_and_every_int8_the_cpu(tiny_model_dir):
    with pytest.raises(UserError, match="float32"):
        models.validate(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="bfloat16",
                                     quantize="int8-dynamic"))  # fmt: skip
    models.validate(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="bfloat16", quantize="int8"))
    with pytest.raises(UserError, match="unknown --quantize"):
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


@pytest.mark.compile
def test_compile_time_is_reported_apart_from_the_requests(cli, tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "c.json"
    r = cli(
        "run", prompt_file, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1",
        "--compile", "--max-new-tokens", "6", "--ignore-eos", "--warmup", "0", "-o", out,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.config.compile is True and run.config.cache_implementation == "static"
    assert run.load.compile_s > 0.5  # tracing and code generation: seconds, even for a tiny model
    # no request paid for it: not even the first, with no warm-up at all
    assert max(q.e2e_ms for q in run.requests) < 0.25 * run.load.compile_s * 1000
    assert not any("compiled" in w for w in run.warnings)
    assert "compiled in" in r.stderr  # said before the first request (a status note: not with -q)


@pytest.mark.subprocess
def test_an_interrupted_sweep_keeps_what_it_finished(tiny_model_dir, many_prompts, tmp_path):
    import signal

    out = tmp_path / "sw"
    proc = cli_process("sweep", many_prompts, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32",
                       "--threads", "1,2", "--max-new-tokens", "24", "--ignore-eos", "--warmup", "0",
                       "-o", out, "-q")  # fmt: skip
    wait_for_requests(out / "float32-1t.json", 3, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted by SIGINT" in err and "Traceback" not in err
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert record["complete"] is False
    first = load_run(out / "float32-1t.json")
    assert not first.complete and len(first.requests) >= 3 and first.sessions[-1].interrupted_by == "SIGINT"
    assert sum(r["requests"] for r in record["results"]) >= 3


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
