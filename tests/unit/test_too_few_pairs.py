"""Every printed interval earns its name: no "95% CI" (and no verdict, no failed gate) from too few pairs.

The percentile bootstrap of a paired median over n pairs is [min, max] of the pair ratios, which covers 1 - 2 / 2^n:
50% at 2 pairs. compare now takes the exact order-statistic interval, which exists from 6 pairs, and below a
kind's smallest honest n (variance.MIN_N) a row says "too few pairs" instead.
"""

import json
import math

import numpy as np
import pytest

from llmbench.analysis import variance
from llmbench.analysis.compare import compare_runs
from llmbench.analysis.gate import gate
from llmbench.analysis.variance import mean_ratio_interval
from llmbench.results.metrics import ids_sha256, request_result, summarize
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run


def _run(tpots: list[float]):
    """A run whose prompt i decodes at tpots[i] ms per token (TTFT 50 ms): the pairs' ratios are what we choose."""
    ms = 1_000_000
    run = synthetic_run(n=len(tpots))
    reqs = []
    for i, tpot in enumerate(tpots):
        stamps = [int((50 + k * tpot) * ms) for k in range(16)]
        reqs.append(request_result(prompt_index=i, repeat=0, start_ns=0, tokenized_ns=ms, stamps_ns=stamps,
                                   prompt_tokens=30, output_sha256=ids_sha256([1]), output_text="x"))  # fmt: skip
    run.requests, run.summary = reqs, summarize(reqs)
    return run


def _pairs(ratios: list[float]):
    base = [20.0 + i for i in range(len(ratios))]
    return _run(base), _run([b * r for b, r in zip(base, ratios, strict=True)])


def test_two_pairs_of_plus_1_and_plus_30_percent_print_no_interval_and_fail_no_gate():
    base, new = _pairs([1.01, 1.30])
    comp = compare_runs(base, new)
    for stat in ("p50", "gaps"):
        row = comp.row("tpot_ms", stat)
        assert row is not None and row.too_few == "too few pairs: n = 2; at least 6 needed"
        assert math.isnan(row.ci_low_pct) and math.isnan(row.ci_high_pct) and not row.significant
        assert row.verdict == row.too_few
    assert comp.changed() == []  # nothing "slower" from two pairs
    verdict = gate([comp], fail_on=["tpot_ms=0.5"], stat="gaps")
    assert not verdict.regression and verdict.exit_code == 0
    assert any("too few pairs: n = 2" in line and line.startswith("BLIND") for line in verdict.blind)
    # and --require-mdc, which asks to show the run could see a change, fails: it could see none
    assert gate([comp], fail_on=["tpot_ms=0.5"], stat="gaps", require_mdc=5).exit_code == 1


@pytest.mark.parametrize("n", [2, 3, 5])
def test_compare_of_few_pairs_says_how_many_are_needed(n, tmp_path, cli):
    base, new = _pairs([1.0 + 0.2 * (i % 2) + 0.01 * i for i in range(n)])
    save_run(base, tmp_path / "b.json")
    save_run(new, tmp_path / "n.json")
    r = cli("compare", str(tmp_path / "b.json"), str(tmp_path / "n.json"), "--fail-on", "tpot_ms=0.5",
            "--gate-stat", "gaps", "--format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "NaN" not in r.stdout  # JSON has no NaN: a missing interval is null
    rows = {(x["metric"], x["stat"]): x for x in json.loads(r.stdout)[0]["rows"]}
    for key in (("tpot_ms", "p50"), ("tpot_ms", "gaps"), ("ttft_ms", "p50")):
        assert rows[key]["too_few"] == f"too few pairs: n = {n}; at least 6 needed"
        assert rows[key]["ci_low_pct"] is None and rows[key]["ci_high_pct"] is None
    text = cli("compare", str(tmp_path / "b.json"), str(tmp_path / "n.json"))
    assert f"too few pairs: n = {n}; at least 6 needed" in text.stdout and "slower" not in text.stdout


@pytest.mark.parametrize("zero_in", ["both", "base"])
def test_a_change_relative_to_zero_is_no_number_and_its_gate_is_blind(zero_in, tmp_path, cli):
    """A model that wrote only whitespace decodes 0 visible chars/s: 0 -> 0 or 0 -> 5 has no relative change."""
    import warnings

    base, new = _pairs([1.01, 1.02, 1.03, 1.0, 1.05, 1.02, 1.01, 1.03])
    for run in (base, new) if zero_in == "both" else (base,):
        for r in run.requests:
            r.decode_chars_per_s = 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no 0/0 under numpy's breath
        comp = compare_runs(base, new)
    for stat in ("mean", "p50", "p90"):
        row = comp.row("decode_chars_per_s", stat)
        assert row is not None and row.too_few == "no relative change: a base value is 0" == row.verdict
        assert math.isnan(row.change_pct) and math.isnan(row.ci_low_pct) and not row.significant
    assert comp.row("tpot_ms", "p50").too_few is None  # the other metrics keep their intervals
    verdict = gate([comp], fail_on=["decode_chars_per_s=1"])
    assert verdict.exit_code == 0 and verdict.blind == [
        "BLIND: this run could not have seen a 1% regression of decode_chars_per_s mean: no relative change: a base "
        "value is 0, so no interval and no verdict"]  # fmt: skip
    assert gate([comp], fail_on=["decode_chars_per_s=1"], require_mdc=5).exit_code == 1
    save_run(base, tmp_path / "b.json")
    save_run(new, tmp_path / "n.json")
    r = cli("compare", str(tmp_path / "b.json"), str(tmp_path / "n.json"), "--format", "json")
    assert r.returncode == 0, r.stderr
    rows = {(x["metric"], x["stat"]): x for x in json.loads(r.stdout)[0]["rows"]}
    assert rows[("decode_chars_per_s", "p50")]["change_pct"] is None  # null, not NaN nor Infinity
    text = cli("compare", str(tmp_path / "b.json"), str(tmp_path / "n.json"))
    assert "no relative change: a base value is 0" in text.stdout
    assert "nan" not in text.stdout.lower() and "inf%" not in text.stdout


def test_six_pairs_give_the_exact_interval_of_the_median():
    ratios = [1.10, 1.12, 1.11, 1.13, 1.09, 1.14]
    comp = compare_runs(*_pairs(ratios))
    row = comp.row("tpot_ms", "p50")
    assert row is not None and row.too_few is None
    # [d_(1), d_(6)]: coverage 1 - 2/64, the only pair of order statistics at 95% for 6 values
    assert row.ci_low_pct == pytest.approx(9.0, abs=0.05) and row.ci_high_pct == pytest.approx(14.0, abs=0.05)
    assert row.significant


@pytest.mark.parametrize("n", range(1, 60))
def test_the_order_statistic_interval_is_exact_and_the_narrowest_at_95(n):
    got = variance.order_ranks(n)
    if n < 6:
        assert got is None  # no pair of order statistics covers 95%: 1 - 2 / 2^5 = 93.75%
        return
    j, k, cover = got
    assert cover >= 0.95 and j == n - 1 - k  # symmetric for the median
    tail = sum(math.comb(n, i) for i in range(j + 1)) / 2**n
    assert cover == pytest.approx(1 - 2 * tail)
    if j + 1 < k - 1:  # one rank narrower on each side falls under 95%
        inner = sum(math.comb(n, i) for i in range(j + 2)) / 2**n
        assert 1 - 2 * inner < 0.95


def test_a_quantiles_exact_interval_needs_enough_requests():
    assert variance.order_ranks(35, 0.9) is None and variance.order_ranks(36, 0.9) is not None
    assert variance.order_ranks(367, 0.99) is None and variance.order_ranks(368, 0.99) is not None
    x = np.arange(1000.0)
    low, high = variance.order_interval(x, 0.9)
    assert low < 900 < high and high - low < 60


def test_the_median_interval_swaps_exactly():
    rng = np.random.default_rng(3)
    logs = rng.normal(0.02, 0.05, 25)
    a, b = variance.median_change(logs, None, 0), variance.median_change(-logs, None, 0)
    assert (1 + a[0] / 100) * (1 + b[0] / 100) == pytest.approx(1)
    assert (1 + a[1] / 100) * (1 + b[2] / 100) == pytest.approx(1)


def test_the_mean_interval_is_students_t_with_the_jackknifes_error():
    base = np.array([10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0, 80.0])
    new = base * np.array([1.05, 1.04, 1.06, 1.05, 1.03, 1.07, 1.05, 1.05])
    low, high = mean_ratio_interval(base, new, paired=True)
    r = new.mean() / base.mean()
    loo = np.array([np.delete(new, i).sum() / np.delete(base, i).sum() for i in range(8)])
    half = variance.t_quantile(7) * math.sqrt(7 / 8 * np.sum((loo - loo.mean()) ** 2))
    assert low == pytest.approx(100 * (r - half - 1)) and high == pytest.approx(100 * (r + half - 1))
    assert low < 100 * (r - 1) < high and low > 3.0  # a steady +5% is seen
    ul, uh = mean_ratio_interval(base, new, paired=False)
    assert uh - ul > 10 * (high - low)  # unpaired, the prompts' spread is noise


@pytest.mark.parametrize("processes", [1, 2])
def test_too_few_processes_say_processes(processes):
    assert variance.too_few(processes, "processes", "processes") == (
        None if processes >= variance.MIN_N["processes"] else
        f"too few processes: n = {processes}; at least {variance.MIN_N['processes']} needed")  # fmt: skip


def test_a_runs_own_intervals_in_the_history_hold_only_where_they_exist():
    from llmbench.history.records import stats_with_intervals

    few = {r["stat"]: r for r in stats_with_intervals([10.0], "ttft_ms")}
    assert all(few[s]["ci_low"] is None for s in ("mean", "p50", "p90", "p99"))  # one request: nothing to say
    three = {r["stat"]: r for r in stats_with_intervals([10.0, 11.0, 12.0], "ttft_ms")}
    assert three["mean"]["ci_low"] is None and three["p50"]["ci_low"] is None
    many = {r["stat"]: r for r in stats_with_intervals([float(v) for v in range(1, 101)], "ttft_ms")}
    assert many["p50"]["ci_low"] < 50.5 < many["p50"]["ci_high"]
    assert many["p90"]["ci_low"] < 90.1 < many["p90"]["ci_high"]
    assert many["p99"]["ci_low"] is None  # 368 requests for an exact p99 interval
    assert many["mean"]["ci_low"] < 50.5 < many["mean"]["ci_high"]


@pytest.mark.parametrize("confidence", [0.5, 0.95, 1 - 0.05 / 3, 0.999])
def test_students_t_quantile_without_scipy_matches_scipy(confidence):
    from scipy import stats

    variance.t_quantile.cache_clear()
    for df in [*range(1, 60), 100, 1000, 100_000]:
        want = float(stats.t.ppf((1 + confidence) / 2, df))
        assert variance.t_quantile(df, confidence) == pytest.approx(want, rel=1e-9), df
    with pytest.raises(ValueError):
        variance.t_quantile(0)


@pytest.mark.parametrize(("command", "code"), [("bisect", 2), ("bisect-step", 128)])
def test_a_bisect_whose_looks_could_never_decide_is_refused_first(command, code, tmp_path, cli, monkeypatch):
    """--processes 1 and 2 prompts once: a look's median of 2 pairs has no interval, so no look could decide."""
    prompts = tmp_path / "two.txt"
    prompts.write_text("one\ntwo\n", encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # no repository here: refused before git is asked anything
    r = cli(command, "v0", "--prompts", str(prompts), "--processes", "1", "--repeats", "1", "--abba")
    assert r.returncode == code, r.stderr
    assert "gating tpot_ms on its gaps: 2 pairs (prompts x --repeats) give no 95% interval; at least 6" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
