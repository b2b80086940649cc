"""Every printed interval earns its name: the simulation of llmbench.analysis.coverage, with compare's (and the
history's) own interval functions, holds each kind of interval to 93% wherever llmbench shows it, and shows none
where it can't (variance.MIN_N). benchmarks/interval_coverage.py prints the full table (1,000 data sets a cell)
for benchmarks/README.md; here fewer data sets, so the bar is 93% less three standard errors of the estimate.

Integration, not unit: ~1 min of arithmetic (the bootstrap kinds at a few n; the others at every n from 2 to 40).
"""

import math

import pytest

from llmbench.analysis import coverage, variance

REPS = 300  # every data set is seeded by (kind, n, scenario): the same figures on every run, never flaky
BOOTSTRAP = ("p90", "p50", "unpaired", "unpaired_p90")  # ~2 ms an interval: a few n, fewer data sets
BAR = 0.93


def _bar(reps: int) -> float:
    return BAR - 3 * math.sqrt(0.95 * 0.05 / reps)


@pytest.mark.parametrize("kind", [k for k in coverage.KINDS if k not in BOOTSTRAP])
def test_every_shown_interval_covers_at_every_n_from_2_to_40(kind):
    k = coverage.KINDS[kind]
    need = k.need(kind)
    short = []
    for n in range(2, 41):
        for noise, shift in coverage.SCENARIOS:
            held, shown = coverage.coverage(kind, noise, shift, n, REPS)
            if n < need:
                continue  # the rows below need print none (test_too_few_pairs.py shows the rows)
            assert shown == REPS, (kind, n, noise, shift, shown)
            if held < _bar(REPS):
                short.append((n, noise, shift, round(held, 3)))
    assert not short, f"{kind}: covers under {BAR:.0%} where it is shown: {short}"


@pytest.mark.parametrize("kind", BOOTSTRAP)
def test_bootstrap_intervals_cover_from_where_they_are_shown(kind):
    need = coverage.KINDS[kind].need(kind)
    for n in sorted({need, need + 1, 20, 40}):
        got = min(coverage.coverage(kind, noise, shift, n, 150)[0] for noise, shift in coverage.SCENARIOS)
        assert got >= _bar(150), (kind, n, got)


def test_the_median_needs_6_pairs_because_the_bootstrap_covered_less():
    """What the exact interval replaced: the percentile bootstrap's [min, max] at 2 and 5 pairs covers 1 - 2/2^n
    (50%, 94%), below 95%; no pair of order statistics does better below 6."""
    assert variance.MIN_N["median"] == 6
    for n in (2, 3, 4, 5):
        assert 1 - 2 / 2**n < 0.95 and variance.order_ranks(n) is None
    assert coverage.coverage("median", "normal", "null", 5, 50)[1] == 0  # shown in none of 50 data sets
    assert variance.order_ranks(6)[2] == pytest.approx(1 - 2 / 64)
