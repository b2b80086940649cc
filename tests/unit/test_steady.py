"""The steady-state window (llmbench.analysis.steady) on stamp series whose ramps are known, and the bounds a load
test prints (llmbench.analysis.tails) against their definitions and their coverage."""

from __future__ import annotations

import math

import numpy as np
import pytest

from llmbench.analysis import steady, tails

N, RATE, LIFE = 600, 10.0, 2.0  # a rate's requests, sent at 10/s, each ~2 s long: ~20 in flight on the plateau
UP, DOWN = 90, 60  # the ramps' true lengths, in requests (15% and 10% of the run)


def _series(rng, kind: str):
    """Poisson sends and, per request, a life (E2E) and a TTFT on a plateau of LIFE s, with ramps of known length at
    both ends: ``step`` (a cache cold for the first 90 requests, a lighter drain for the last 60), ``linear`` (a
    queue filling, then draining), ``flat`` (none)."""
    send = np.cumsum(rng.exponential(1 / RATE, N))
    level = np.full(N, LIFE)
    if kind == "step":
        level[:UP], level[N - DOWN :] = 1.0, 1.2
    elif kind == "linear":
        level[:UP] = np.linspace(0.4, LIFE, UP, endpoint=False)
        level[N - DOWN :] = np.linspace(LIFE, 0.6, DOWN)
    e2e = level * rng.lognormal(0, 0.15, N)
    ttft = 0.1 * level * rng.lognormal(0, 0.2, N)
    return send, send + e2e, {"ttft_ms": ttft * 1000, "e2e_ms": e2e * 1000}


@pytest.mark.parametrize("kind", ["step", "linear"])
def test_the_window_of_a_known_ramp_is_found_within_a_few_percent_of_the_truth(kind):
    rng = np.random.default_rng(11)
    found = []
    for _ in range(20):
        send, end, series = _series(rng, kind)
        w = steady.steady_window(send, end, series)
        assert w.method == "edges+mser5" and not w.whole
        found.append((w.first, N - 1 - w.last))
    first, cut_end = np.median(np.array(found), axis=0)
    assert abs(first - UP) <= 0.03 * N and abs(cut_end - DOWN) <= 0.03 * N, found  # within 3% of the run
    # one window's record: bounds on the run's clock, shares, and the plateau's concurrency above the edges'
    rec = w.record()
    assert rec["start_s"] == pytest.approx(send[w.first], abs=1e-4) and rec["end_s"] == pytest.approx(
        send[w.last], abs=1e-4)  # fmt: skip
    assert rec["share"] == pytest.approx((w.last - w.first + 1) / N, abs=1e-4) and 0 < rec["time_share"] < 1
    assert rec["concurrency"]["inside"] > rec["concurrency"]["outside"]


def test_a_stationary_run_loses_only_its_arrival_edges_where_plain_mser5_cuts_by_chance():
    """A plateau from the first request to the last: the window is the run less one median life at each edge (the
    first requests had fewer companions, the last ones drained); plain MSER-5 would cut a fifth of a 100-request
    plateau by chance, the significance test almost never."""
    rng = np.random.default_rng(5)
    edge = RATE * LIFE  # requests sent within one life of an edge
    for _ in range(10):
        send, end, series = _series(rng, "flat")
        w = steady.steady_window(send, end, series)
        assert w.cuts["edges"][0] == pytest.approx(edge, rel=0.5) and w.cuts["edges"][1] == pytest.approx(edge, rel=0.5)
        assert w.cuts["ttft_ms"] == [0, 0] or sum(w.cuts["ttft_ms"]) <= 0.05 * N
    plain = [steady.mser_truncation(rng.lognormal(0, 0.3, 100)) for _ in range(400)]
    settled = [steady.settled_cut(rng.lognormal(0, 0.3, 100)) for _ in range(400)]
    assert np.mean(plain) > 5 and np.mean(np.array(settled) > 0) < 0.1


def test_mser5_is_the_published_statistic():
    """MSER(d) = sum_{j > d} (b_j - mean)^2 / (m - d)^2 over batch means of 5, d up to m / 2: brute force agrees."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        x = np.concatenate([rng.normal(0, 1, rng.integers(0, 60)), rng.normal(3, 1, 200)])
        b = x[: x.size // 5 * 5].reshape(-1, 5).mean(axis=1)
        m = b.size
        brute = [((b[d:] - b[d:].mean()) ** 2).sum() / (m - d) ** 2 for d in range(m // 2 + 1)]
        assert steady.mser_truncation(x) == 5 * int(np.argmin(brute))
    assert steady.mser_truncation(np.arange(19.0)) == 0  # under 4 batches: no judgement


def test_life_concurrency_is_the_in_flight_count_averaged_over_each_life():
    # A: 0-4 s, B: 1-3 s, C: 2-2 s (zero length), D: 5-6 s
    c = steady.life_concurrency([0, 1, 2, 5], [4, 3, 2, 6])
    # A: 1 for 1 s, 2 for 2 s (B), 1 for 1 s -> 6/4; B: 2 for its 2 s; C: at its send A, B, C -> 3; D alone
    assert c.tolist() == pytest.approx([1.5, 2.0, 3.0, 1.0])


def test_short_or_broken_runs_fall_back_to_the_whole_run_and_say_why():
    empty = steady.steady_window([], [], {})
    assert empty.whole and "no finished request" in empty.method and empty.share == 0
    few = steady.steady_window(np.arange(10.0), np.arange(10.0) + 1, {})
    assert few.whole and "fewer than 20" in few.method and (few.first, few.last, few.share) == (0, 9, 1.0)
    # lives as long as the run: the edges leave nothing, and the window is the whole run, saying so
    send = np.arange(40.0)
    long = steady.steady_window(send, send + 100.0, {})
    assert long.whole and "under 10%" in long.method and long.cuts["edges"][0] > 0
    # a latency series with a NaN or the wrong length is not used; constant values cut nothing
    send = np.arange(100.0) / 10
    w = steady.steady_window(send, send + 0.5, {"ttft_ms": [math.nan] * 100, "e2e_ms": [7.0] * 100})
    assert "ttft_ms" not in w.cuts and w.cuts["e2e_ms"] == [0, 0] and not w.whole
    # the order of the requests does not matter
    rng = np.random.default_rng(1)
    s, e, series = _series(rng, "step")
    perm = rng.permutation(N)
    a = steady.steady_window(s, e, series)
    b = steady.steady_window(s[perm], e[perm], {k: v[perm] for k, v in series.items()})
    assert (a.first, a.last, a.start_s, a.end_s) == (b.first, b.last, b.start_s, b.end_s)


# -- bounds -----------------------------------------------------------------------------------------------


def test_a_percentile_is_bounded_only_from_the_requests_that_can_bound_it():
    assert [tails.requests_to_bound(q) for q in (0.5, 0.9, 0.99, 0.999)] == [5, 29, 299, 2995]
    assert tails.bound_rank(298, 0.99) is None and tails.bound_rank(299, 0.99) == 299
    assert tails.bound_rank(28, 0.9) is None and tails.bound_rank(29, 0.9) == 29
    from scipy import stats

    for n, q in ((1000, 0.99), (300, 0.9), (50, 0.5), (5000, 0.999)):
        k = tails.bound_rank(n, q)
        # the least rank whose order statistic bounds the quantile at 95%
        assert stats.binom.cdf(k - 1, n, q) >= 0.95 > stats.binom.cdf(k - 2, n, q)
    values = np.arange(1.0, 1001.0)
    assert tails.quantile_upper_bound(values, 0.99) == float(tails.bound_rank(1000, 0.99))
    assert tails.quantile_upper_bound(values[:100], 0.99) is None
    with pytest.raises(ValueError):
        tails.bound_rank(100, 1.0)


def test_the_percentile_bound_covers_the_true_quantile_at_least_95_percent_of_the_time():
    rng = np.random.default_rng(0)
    truth = math.log(100)  # the exponential's 99th percentile
    covered = [tails.quantile_upper_bound(rng.exponential(1, 400), 0.99) >= truth for _ in range(2000)]
    assert np.mean(covered) >= 0.95 - 0.015  # 2,000 draws: the share's sd is 0.005


def test_share_bounds_are_wilsons_one_sided_95_percent_bounds():
    low, high = tails.share_bounds(60, 60)
    assert high == 1.0 and 0.95 < low < 0.96  # 60 of 60 only proves ~95.7%
    low, high = tails.share_bounds(54, 60)
    assert low < 0.9 < high  # 90% observed: neither proven nor refuted
    z = 1.6448536  # one-sided 95%
    p, n = 54 / 60, 60
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z / (1 + z * z / n) * math.sqrt(
        p * (1 - p) / n + z * z / (4 * n * n))  # fmt: skip
    assert (low, high) == pytest.approx((centre - half, centre + half), abs=1e-6)
    assert tails.share_bounds(0, 0) is None
    with pytest.raises(ValueError):
        tails.share_bounds(5, 4)
