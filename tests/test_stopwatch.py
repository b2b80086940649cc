"""Ground truth for the stopwatch: a model whose forward passes take known times, driven by the real generate()
through llmbench's timing path (the in-process backend's measure, its stop check included, + TokenStamper).

Tolerance: 1 ms + 2%. A loaded 2-core CI machine can preempt any single token, so these checks hold for the
median and for 80-90% of tokens; benchmarks/stopwatch_accuracy.py checks every token, on a quiet machine.
"""

import statistics

import pytest

from llmbench.backends import Request
from llmbench.process import Stop
from tests.delayed_model import delayed_backend

P_MS, D_MS, TOKENS = 40.0, 15.0, 12


def tol(ms: float) -> float:
    return 1.0 + 0.02 * ms


@pytest.fixture(scope="module")
def delayed(qwen_tokenizer):
    return delayed_backend(qwen_tokenizer, P_MS, D_MS, TOKENS)


def _request(model, bench):
    model.starts_ns.clear(), model.ends_ns.clear(), model.kinds.clear()
    r = bench.measure_now(Request("某化工厂夜间偷排未经处理的工业废水", 0, 0), Stop())
    raw = bench.raw[(0, 0)]
    start, stamper = raw.start_ns, raw
    assert model.kinds == ["prefill"] + ["decode"] * (TOKENS - 1)
    return r, start, stamper


def test_every_stamp_follows_its_token_within_1ms(delayed):
    model, bench = delayed
    lags = []
    for _ in range(3):
        _r, _start, stamper = _request(model, bench)
        assert len(stamper.stamps_ns) == len(model.ends_ns) == TOKENS
        lags += [(s - e) / 1e6 for s, e in zip(stamper.stamps_ns, model.ends_ns, strict=True)]
    assert min(lags) >= 0  # a stamp never comes before the forward pass that produced the token
    assert statistics.median(lags) <= 1.0
    assert sum(lag <= 1.0 for lag in lags) >= 0.9 * len(lags), lags


def test_ttft_and_itl_match_the_known_delays(delayed):
    model, bench = delayed
    ttft_ok, itls = 0, []
    for _ in range(3):
        r, start, _stamper = _request(model, bench)
        truth_ttft = (model.ends_ns[0] - start) / 1e6  # the request's start to the end of the prefill pass
        assert r.ttft_ms >= r.tokenize_ms + P_MS
        ttft_ok += abs(r.ttft_ms - truth_ttft) <= tol(truth_ttft)
        itls += [b - a for a, b in zip(r.token_times_ms, r.token_times_ms[1:], strict=False)]
        assert r.tpot_ms == pytest.approx((r.token_times_ms[-1] - r.ttft_ms) / (TOKENS - 1), abs=1e-3)
    assert ttft_ok >= 2
    assert abs(statistics.median(itls) - D_MS) <= tol(D_MS), itls
    assert sum(abs(x - D_MS) <= tol(D_MS) for x in itls) >= 0.8 * len(itls), itls
