"""The in-process run through the one loop and the public API, on a tiny real Qwen2."""

import json

import pytest

import llmbench
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.results.schema import METRIC_FORMULAS
from llmbench.results.storage import load_run
from llmbench.workloads.prompts import load_prompts
from tests.helpers import Recorder


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)


def test_run_json_meets_the_schema_invariants(tiny, prompt_file, tmp_path, probe_on):
    out = tmp_path / "run.json"
    prompts = load_prompts(prompt_file)
    rec = Recorder()
    run = llmbench.measure(prompt_file, model=tiny, max_new_tokens=6, ignore_eos=True, warmup=2, repeats=2,
                           output=out, reporter=rec)  # fmt: skip
    assert [(done, total) for _r, done, total in rec.requests] == [(i, 6) for i in range(1, 7)]
    assert rec.warmups == [(1, 2), (2, 2)]
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["schema_version"] == 1 and data["complete"] is True
    assert data["metrics"] == METRIC_FORMULAS
    for key in (
        "model",
        "weights",
        "device",
        "dtype",
        "threads",
        "max_new_tokens",
        "ignore_eos",
        "warmup",
        "repeats",
        "prompt_file",
        "prompt_sha256",
    ):
        assert key in data["config"]
    assert data["config"]["prompt_sha256"] == prompts.sha256 and data["config"]["threads"] == 1
    for key in ("python", "torch", "transformers", "platform", "cpu_model", "cpu_count", "ram_total_bytes", "gpu"):
        assert key in data["environment"]
    assert data["load"]["offload"] == {"disk": [], "cpu": [], "meta": [], "missing_bytes": 0}
    reqs = data["requests"]
    # repeats go round the whole list: (0,0) (1,0) (2,0) (0,1) ...
    assert [(r["prompt_index"], r["repeat"]) for r in reqs] == [(i % 3, i // 3) for i in range(6)]
    for r in reqs:
        assert r["output_tokens"] == 6 == len(r["token_times_ms"])
        assert r["token_times_ms"][0] == r["ttft_ms"]
        assert r["token_times_ms"] == sorted(r["token_times_ms"])
        assert r["e2e_ms"] == r["token_times_ms"][-1]
        assert r["tpot_ms"] == pytest.approx((r["e2e_ms"] - r["ttft_ms"]) / 5, abs=1e-3)
        assert 0 < r["tokenize_ms"] < r["ttft_ms"]
        assert r["prompt_tokens"] > 10  # the chat template was applied
    assert len(data["warmup_requests"]) == 2  # kept, but not in the statistics
    assert data["summary"]["requests"] == 6
    assert data["summary"]["ttft_ms"]["mean"] == pytest.approx(sum(r["ttft_ms"] for r in reqs) / 6)
    for block in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens", "decode_tokens_per_s"):
        assert set(data["summary"][block]) >= {"mean", "p50", "p90", "p99", "min", "max", "std"}
    assert load_run(out).requests[0].ttft_ms == reqs[0]["ttft_ms"]
    assert run.complete
    # roofline and prefill speed
    summ, machine = data["summary"], data["machine"]
    gbps = max(machine["probe_before"]["mem_read_gbps"], machine["probe_after"]["mem_read_gbps"])
    assert summ["roofline_mem_read_gbps"] == gbps
    assert summ["tpot_bound_ms"] == pytest.approx(data["load"]["decode_weight_bytes"] / (gbps * 1e9) * 1e3, rel=1e-3)
    assert summ["tpot_efficiency"] == pytest.approx(summ["tpot_bound_ms"] / summ["tpot_ms"]["mean"], rel=1e-3)
    r0 = reqs[0]
    prefill = [r["prompt_tokens"] / ((r["ttft_ms"] - r["tokenize_ms"]) / 1000) for r in reqs]
    assert summ["prefill_tokens_per_s"]["mean"] == pytest.approx(sum(prefill) / len(prefill))
    assert r0["prompt_tokens"] > 0


@pytest.mark.slow
def test_greedy_is_deterministic_and_repeats_match(tiny, prompt_file):
    run = llmbench.measure(prompt_file, model=tiny, max_new_tokens=5, ignore_eos=True, warmup=0, repeats=2)
    by_key = {(r.prompt_index, r.repeat): r.output_token_ids_sha256 for r in run.requests}
    for i in range(3):
        assert by_key[(i, 0)] == by_key[(i, 1)]
    assert len({r.prompt_tokens for r in run.requests}) == 3  # three different prompts were sent


@pytest.mark.slow
def test_eos_ends_a_request_early_and_ignore_eos_does_not(tiny_model_dir, tmp_path):
    """A model whose most likely token after the prompt is EOS: it stops after one token, unless --ignore-eos."""
    lm = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    eos = lm.tokenizer.eos_token_id
    lm.model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: out.index_fill_(-1, _ids(eos), 1e4))
    stopped = llmbench.measure(["hi"], model=lm, max_new_tokens=4, ignore_eos=False, warmup=0)
    assert stopped.requests[0].output_tokens == 1 and stopped.requests[0].tpot_ms is None
    forced = llmbench.measure(["hi"], model=lm, max_new_tokens=4, ignore_eos=True, warmup=0)
    assert forced.requests[0].output_tokens == 4


def _ids(*ids):
    import torch

    return torch.tensor(ids)


def test_a_stop_keeps_finished_requests(tiny, prompt_file, tmp_path):
    out = tmp_path / "r.json"
    stop = llmbench.Stop()
    with pytest.raises(RunInterrupted) as e:
        llmbench.measure(prompt_file, model=tiny, max_new_tokens=3, warmup=0, output=out, stop=stop,
                         reporter=Recorder(stop=stop, stop_after=2))  # fmt: skip
    assert len(e.value.run.requests) == 2 and e.value.signal_name == "test"
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["complete"] is False and len(data["requests"]) == 2
    assert data["sessions"][0]["interrupted_by"] == "test"


def test_without_output_nothing_is_written(tiny, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = llmbench.measure(["one", "two"], model=tiny, max_new_tokens=2, warmup=0)
    assert len(run.requests) == 2 and run.summary.requests == 2 and run.complete
    assert run.config.prompt_file == "<list>" and list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_sampling_is_recorded_and_seeded(tiny, prompt_file):
    kw = {"max_new_tokens": 5, "ignore_eos": True, "warmup": 0, "sample": True, "seed": 7, "temperature": 1.5}
    a = llmbench.measure(prompt_file, model=tiny, **kw)
    b = llmbench.measure(prompt_file, model=tiny, **kw)
    assert a.config.sampling.do_sample and a.config.sampling.seed == 7
    assert [r.output_token_ids_sha256 for r in a.requests] == [r.output_token_ids_sha256 for r in b.requests]
    c = llmbench.measure(prompt_file, model=tiny, **{**kw, "seed": 8})
    assert [r.output_token_ids_sha256 for r in a.requests] != [r.output_token_ids_sha256 for r in c.requests]


def test_prompt_longer_than_context_is_named_before_anything_is_written(tiny, tmp_path):
    p = tmp_path / "long.txt"
    p.write_text("short\n" + "word " * 600 + "\n", encoding="utf-8")
    out = tmp_path / "r.json"
    with pytest.raises(UserError, match=r"long.txt:2: the prompt has \d+ tokens.*context of 512.*--truncate"):
        llmbench.measure(p, model=tiny, max_new_tokens=4, warmup=0, output=out)
    assert not out.exists()
    run = llmbench.measure(p, model=tiny, max_new_tokens=4, warmup=0, truncate=True, output=out)
    long = run.requests[1]
    assert long.prompt_tokens == 512 - 4 and long.truncated_tokens > 0 and run.requests[0].truncated_tokens == 0
    assert run.config.truncate and run.complete
