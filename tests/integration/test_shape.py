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
