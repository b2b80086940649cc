"""llmbench sweep and the knobs it turns (attention, static cache, torch.compile, int8), on a tiny real Qwen2.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_sweep.py."""

import json

import pytest

import llmbench
from llmbench.results.storage import load_run
from tests.helpers import cli_process, wait_for_requests


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
