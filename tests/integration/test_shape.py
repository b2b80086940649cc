"""The shape of the wait on a real run: every request of a tiny model records where each token's text ends and
what a reader went through; the summary aggregates it (issue 46, first step)."""

from __future__ import annotations

import llmbench


def test_an_in_process_run_records_each_tokens_text_and_the_readers_wait(tiny_model_dir, prompt_file):
    lm = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    run = llmbench.measure(prompt_file, model=lm, max_new_tokens=8, ignore_eos=True, warmup=0)
    for r in run.requests:
        assert r.text_offsets is not None and len(r.text_offsets) == len(r.token_times_ms)
        assert r.text_offsets == sorted(r.text_offsets) and r.text_offsets[-1] == len(r.output_text)
        assert r.reader_stall_ms is not None and r.reader_stall_ms >= 0 and r.reader_stalls is not None
        assert r.andes_qoe is not None and 0 <= r.andes_qoe <= 1
        assert r.fluidity is not None and 0 <= r.fluidity <= 1
    s = run.summary
    assert s.reader_stall_ms is not None and s.reader_stall_ms.n == len(run.requests)
    assert s.andes_qoe is not None and s.fluidity is not None
    assert "reader_stall_ms" in run.metrics and "andes_qoe" in run.metrics  # the formulas go with the numbers


BURST_PROMPTS = [f"Question {i}: why is the sky blue over the sea at noon?" for i in range(8)]


def _paced_run(qwen_tokenizer, burst_ms: float | None):
    """8 answers of 20 tokens from a model whose decode step takes 40 ms (25 tokens/s), read at 400 characters a
    second (faster than they come): steady, every wait is one step less a token's reading (< 100 ms); in bursts of
    300 ms (benchmarks/inject's BURST_MS, the same computation), the reader catches up and waits between bursts."""
    import importlib.util

    from tests.delayed_model import delayed_loaded
    from tests.unit.test_inject import INJECT

    spec = importlib.util.spec_from_file_location("llmbench_inject_burst", INJECT / "sitecustomize.py")
    inject = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(inject)
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=60.0, decode_ms=40.0)
    if burst_ms is not None:
        inject.install_burst(burst_ms)
    try:
        return llmbench.measure(BURST_PROMPTS, model=lm, max_new_tokens=20, ignore_eos=True, warmup=0,
                                reading_cps=400.0)  # fmt: skip
    finally:
        inject.uninstall_burst()


def test_bursts_at_the_same_pace_pass_the_tpot_gate_and_fail_the_stall_gate(qwen_tokenizer, tmp_path):
    from llmbench.analysis.compare import compare_runs
    from llmbench.results.storage import save_run
    from tests.helpers import cli

    steady, bursty = _paced_run(qwen_tokenizer, None), _paced_run(qwen_tokenizer, 300.0)
    assert steady.config.reader == {"words_per_minute": 238.0, "chars_per_s": 400.0}
    assert all(r.reader_stalls == 0 for r in steady.requests)  # every wait under 100 ms
    assert all(r.reader_stalls >= 2 for r in bursty.requests)  # 20 tokens x 40 ms: 2-3 bursts after the first
    # the same computation: each request's E2E and TPOT within a few ms of the steady one's
    for s, b in zip(steady.requests, bursty.requests, strict=True):
        assert abs(b.tpot_ms - s.tpot_ms) < 0.1 * s.tpot_ms and abs(b.e2e_ms - s.e2e_ms) < 0.1 * s.e2e_ms
        assert len(set(b.token_times_ms)) < len(b.token_times_ms)  # tokens shared a stamp: bursts
    comp = compare_runs(steady, bursty)
    assert not comp.gate(fail_on_regression=10, stat="p50")  # TTFT, TPOT, E2E: nothing past 10%
    stalls = next(r for r in comp.shape if r.metric == "reader_stalls")
    assert stalls.base == 0 and stalls.difference >= 2 and stalls.ci_low > 1  # from a base of 0
    [check] = comp.gate(fail_on={"reader_stalls": 1})
    assert check.regression and check.unit == "stalls" and check.threshold == 1
    # the same through the command line: exit 1 (CI reads a failed gate), one gate line per metric
    save_run(steady, base := tmp_path / "steady.json")
    save_run(bursty, head := tmp_path / "bursty.json")
    r = cli("compare", base, head, "--fail-on-regression", "10", "--gate-stat", "p50")
    assert r.returncode == 0, r.stderr
    r = cli("compare", base, head, "--fail-on", "reader_stalls=1", "--fail-on", "fluidity=0.05")
    assert r.returncode == 1 and "gate reader_stalls (mean a request): +" in r.stdout and "REGRESSION" in r.stdout
