"""A duet's TPOT change is balanced over the two CPUs: a CPU slowed for a process's while (a neighbour on its
core) weighs alike on both sides, where a process's plain median took it whole. Ground truth from simulated duets:
the pairs' placements alternate over the plan as ``ab``'s do, and in some processes one CPU runs slower."""

from __future__ import annotations

import math

import numpy as np

from llmbench.analysis import variance
from llmbench.analysis.compare import compare_runs
from tests.helpers import synthetic_run
from tests.unit.test_honest_rows import _request

CPUS = (2, 5)  # a duet's two CPUs, as sched_getaffinity gives them


def duet(seed: int, processes: int = 10, per: int = 3, slower: float = 0.0, slowed_cpu: float = 0.04,
         pinned: bool = True):  # fmt: skip
    """(base, head): ``processes`` x ``per`` pairs, the processes one after another and each one's pairs in turn,
    base on CPUS[0] for the plan's even pairs and on CPUS[1] for the odd ones (``llmbench.drivers.ab.plan``). In
    every other process CPUS[1] runs ``slowed_cpu`` slower throughout; per token and per TTFT 0.5% noise.
    ``slower``: the head's every token (and TTFT) that much slower. ``pinned``: the requests record their CPU."""
    rng = np.random.default_rng(seed)
    sides: tuple[list, list] = ([], [])
    for k in range(processes * per):
        p = k // per
        base_cpu = CPUS[k % 2]
        for side, cpu in ((0, base_cpu), (1, CPUS[1] if base_cpu == CPUS[0] else CPUS[0])):
            factor = (1 + slowed_cpu if p % 2 and cpu == CPUS[1] else 1.0) * (1 + slower * side)
            gaps = 20 * factor * np.exp(rng.normal(0, 0.005, 15))
            r = _request(k, 0, 100.0 * factor * np.exp(rng.normal(0, 0.005)), gaps, p)
            r.pinned_cpu = cpu if pinned else None
            sides[side].append(r)
    return tuple(synthetic_run(n=1).model_copy(update={"requests": reqs}) for reqs in sides)


def _gaps(base, head):
    row = compare_runs(base, head).row("tpot_ms", "gaps")
    assert row is not None
    return row


def test_balanced_median_averages_the_placements_medians():
    logs = np.array([0.04, 0.05, -0.04, 0.06, -0.03])
    assert variance.balanced_median(logs, np.array([0, 0, 1, 0, 1])) == np.mean([0.05, -0.035])
    assert variance.balanced_median(logs, np.zeros(5)) == np.median(logs)  # one placement: the plain median


def test_a_cpu_slowed_for_a_while_no_longer_widens_a_duets_interval():
    """An A/A duet: each process of 3 pairs holds 2 of one placement, so its plain median is +-4% in the slowed
    processes; balanced, every process reads ~0 and the interval is the tokens' own noise."""
    plain, balanced = _gaps(*duet(1, pinned=False)), _gaps(*duet(1))
    assert plain.ci_high_pct - plain.ci_low_pct > 2.0  # the slowed CPU, taken for the processes' spread
    assert balanced.ci_high_pct - balanced.ci_low_pct < 0.5
    assert abs(balanced.change_pct) < 0.25 and not balanced.significant


def test_ttfts_median_is_balanced_too():
    plain = compare_runs(*duet(5, pinned=False)).row("ttft_ms", "p50")
    balanced = compare_runs(*duet(5)).row("ttft_ms", "p50")
    assert plain.ci_high_pct - plain.ci_low_pct > 2.0 > 1.0 > balanced.ci_high_pct - balanced.ci_low_pct


def test_a_lone_outlier_pair_of_one_placement_is_clipped_before_it_is_balanced():
    """A 1-2 s episode hits one pair, the lone one of its placement, in every other process (the Xeon of
    2026-12-06): unclipped, balancing passed half of it to the process; clipped to 3 robust sd, a bounded share."""
    rng = np.random.default_rng(6)
    processes, per = 12, 3
    clusters = np.repeat(np.arange(processes), per)
    places = np.arange(processes * per) % 2
    logs = rng.normal(0, 0.001, processes * per)
    for p in range(0, processes, 2):  # the process's lone placement: the pair in the middle
        logs[p * per + 1] -= 0.04
    _, low, high = variance.median_change(logs, clusters, 0, variance.CONFIDENCE, places)
    unclipped = np.array([variance.balanced_median(logs[clusters == p], places[clusters == p])
                          for p in range(processes)])  # fmt: skip
    _, u_low, u_high = (100 * np.expm1(x) for x in (0, *variance.t_interval(unclipped.mean(), unclipped)))
    assert high - low < (u_high - u_low) / 3
    assert -0.5 < low < high < 0.5


def test_a_real_slowdown_still_reads_its_size_balanced():
    row = _gaps(*duet(2, slower=0.03))
    assert 2.5 < row.ci_low_pct <= row.change_pct <= row.ci_high_pct < 3.5


def test_balanced_changes_swap_exactly():
    base, head = duet(3, slower=0.02)
    forward, backward = _gaps(base, head), _gaps(head, base)
    assert math.isclose((1 + forward.change_pct / 100) * (1 + backward.change_pct / 100), 1.0, rel_tol=1e-9)


def test_runs_that_do_not_record_both_cpus_keep_the_plain_median():
    """An older run (no ``pinned_cpu``) against a new one, or pairs pinned to one CPU: nothing to balance."""
    base, head = duet(4)
    old_base, _ = duet(4, pinned=False)
    plain = _gaps(old_base, head)
    assert plain.ci_high_pct - plain.ci_low_pct > 2.0
    for r in head.requests:
        r.pinned_cpu = CPUS[0]
    for r in base.requests:
        r.pinned_cpu = CPUS[0]
    assert _gaps(base, head).ci_high_pct - _gaps(base, head).ci_low_pct > 2.0
