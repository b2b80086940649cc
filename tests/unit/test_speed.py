"""Big runs stay instant: counted work, not seconds (the seconds are in benchmarks/big_runs.py). What a reader
imports, whether the token stamps are decoded, how often the bootstrap draws its resamples."""

from __future__ import annotations

import pytest

from llmbench.analysis import compare
from llmbench.results.storage import load_run, save_run
from tests.helpers import synthetic_run

HEAVY = ("torch", "transformers", "scipy", "pandas", "matplotlib", "sqlalchemy")


@pytest.fixture
def two_runs(tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    save_run(synthetic_run(n=40, tokens=16, noise=0.1, seed=1), a)
    save_run(synthetic_run(n=40, tokens=16, noise=0.1, seed=2, tpot_ms=22.0), b)
    return a, b


def test_a_scalar_read_never_decodes_a_stamp(two_runs):
    run = load_run(two_runs[0], scalars_only=True)
    assert len(run.requests) == 40 and run.summary.tpot_ms is not None
    row = run.requests[0]
    assert not hasattr(row, "token_times_ms") and not hasattr(row, "output_text")  # skipped, not parsed
    full = load_run(two_runs[0])
    assert [(r.prompt_index, r.ttft_ms, r.tpot_ms, r.e2e_ms) for r in run.requests] == [
        (r.prompt_index, r.ttft_ms, r.tpot_ms, r.e2e_ms) for r in full.requests]  # fmt: skip
    extra = load_run(two_runs[0], scalars_only=True, request_fields=("output_text",))
    assert extra.requests[3].output_text == full.requests[3].output_text


def test_compare_draws_each_metrics_resamples_once(two_runs, monkeypatch):
    calls = []
    real = compare._resampled

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "_resampled", counted)
    a, b = (load_run(p, scalars_only=True) for p in two_runs)
    comp = compare.compare_runs(a, b)
    with_spread = {r.metric for r in comp.rows if r.ci_low_pct != r.change_pct}
    assert len(calls) == len(with_spread) <= 5  # once per metric, shared by its mean, p50 and p90
