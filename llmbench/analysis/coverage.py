"""Does each interval llmbench prints cover what its name says? A simulation, with the real interval functions.

For every kind of interval (:data:`KINDS`), at a number of pairs n, under a scenario (:data:`SCENARIOS`: normal,
right-skewed or heavy-tailed noise of 3% on every request, around no change or a +3% change), draw ``reps`` data
sets, compute the interval exactly as compare (or the history) does, and count how often it holds the true
value. A nominal 95% interval that covers under 93% at some n is not shown there
(:data:`llmbench.analysis.variance.MIN_N`); ``tests/integration/test_interval_coverage.py`` holds the table to
it and benchmarks/interval_coverage.py prints it for benchmarks/README.md.

The model of a run (one pair per prompt and repeat): prompt i's own time p_i = 100 exp(0.5 z_i) (prompts differ
by ~50%), and each request its own noise e, the same law on both sides:

    base b_i = p_i exp(e_bi),   head h_i = p_i exp(shift + e_hi)     (with processes: + a_p in the head's exponent)
    normal   e = 0.03 z
    skewed   e = 0.03 (E - 1),  E ~ Exponential(1): most requests a little fast, a few slow (pair ratios h/b skewed)
    heavy    e = 0.03 T / sqrt 3,  T ~ Student t, 3 df: rare requests far out (pair ratios heavy-tailed)

So the head's times are the base's scaled by exp(shift) in law, and every paired statistic's true change is exactly
the shift: the median of ln(h/b), E[h] / E[b], p90(h) / p90(b), a process's cold start. With processes
(``ab --processes``), each process p holds 2 pairs and adds its own offset a_p ~ N(0, 0.01), symmetric about 0. A
run's own p50 and p90 (the history's points) are the head's, from 2,000,000 draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

SD = 0.03
SHIFTS = {"null": 0.0, "+3%": math.log(1.03)}
NOISES = ("normal", "skewed", "heavy")
SCENARIOS = [(noise, shift) for noise in NOISES for shift in SHIFTS]
PROCESS_SD = 0.01
PAIRS_PER_PROCESS = 2
_TRUTH_DRAWS = 2_000_000


def _noise(kind: str, rng: np.random.Generator, size: int) -> np.ndarray:
    if kind == "normal":
        z = rng.standard_normal(size)
    elif kind == "skewed":
        z = rng.exponential(1.0, size) - 1.0
    else:
        z = rng.standard_t(3, size) / math.sqrt(3)
    return SD * z


@dataclass(frozen=True)
class Data:
    """One simulated comparison: base and head times, pair ratios' logs, each pair's process (or None)."""

    base: np.ndarray
    head: np.ndarray
    logs: np.ndarray
    clusters: np.ndarray | None


def draw(noise: str, shift: str, n: int, rng: np.random.Generator, processes: bool = False) -> Data:
    """One data set of ``n`` pairs (with ``processes``: ``n`` processes of 2 pairs each)."""
    pairs = n * PAIRS_PER_PROCESS if processes else n
    prompt = 100 * np.exp(0.5 * rng.standard_normal(pairs))
    base = prompt * np.exp(_noise(noise, rng, pairs))
    up = SHIFTS[shift] + _noise(noise, rng, pairs)
    clusters = None
    if processes:
        clusters = np.repeat(np.arange(n), PAIRS_PER_PROCESS)
        up = up + PROCESS_SD * rng.standard_normal(n)[clusters]
    head = prompt * np.exp(up)
    return Data(base, head, np.log(head / base), clusters)


@lru_cache(maxsize=64)
def truth(kind: str, noise: str, shift: str) -> float:
    """The true value of what ``kind``'s interval estimates: the shift (%) for a change; a run's own quantile
    (the head's, in ms) from 2,000,000 draws."""
    if not kind.startswith("run_"):
        return 100 * math.expm1(SHIFTS[shift])
    head = draw(noise, shift, _TRUTH_DRAWS, np.random.default_rng(12345)).head
    return float(head.mean()) if kind == "run_mean" else float(np.percentile(head, int(kind[5:])))


def _compare(stat: str, paired: bool) -> Callable[[Data], tuple[float, float]]:
    def interval(d: Data) -> tuple[float, float]:
        from llmbench.analysis.compare import change_interval

        # unpaired: the head's requests are of other prompts than the base's (reversed: no pair shares a prompt)
        return change_interval(d.base, d.head if paired else d.head[::-1], stat, paired)[1:]

    return interval


def _median(d: Data) -> tuple[float, float]:
    from llmbench.analysis.variance import median_change

    return median_change(d.logs, d.clusters, 0)[1:]


def _cold_start(d: Data) -> tuple[float, float]:
    from llmbench.analysis.startup import log_mean_change

    return log_mean_change(d.logs)[1:]


def _run_stat(stat: str) -> Callable[[Data], tuple[float, float]]:
    def interval(d: Data) -> tuple[float, float]:
        from llmbench.analysis.variance import stats_with_intervals

        row = next(r for r in stats_with_intervals(list(d.head), "ttft_ms") if r["stat"] == stat)
        low, high = row["ci_low"], row["ci_high"]
        return (float("nan"), float("nan")) if low is None or high is None else (low, high)

    return interval


@dataclass(frozen=True)
class Kind:
    """An interval llmbench prints: where, its function on one data set, and whether n counts processes."""

    shown: str
    interval: Callable[[Data], tuple[float, float]]
    processes: bool = False  # the data are n processes of 2 pairs each (a process's own offset included)
    unit: str = "pairs"  # what n counts
    bound: str = ""  # its entry of variance.MIN_N (default: the kind's own name)

    def need(self, name: str) -> int:
        """The smallest n compare (or the history) shows this kind's interval at."""
        from llmbench.analysis.variance import MIN_N

        return MIN_N.get(self.bound or name, 1)


KINDS: dict[str, Kind] = {
    "median": Kind("compare's paired p50 and TPOT gaps rows (exact order statistics)", _median),
    "processes": Kind(
        "the same rows over ab --processes (Student t over processes' medians)", _median, True, "processes"
    ),
    "mean": Kind("compare's paired mean rows (Student t, the jackknife's standard error)", _compare("mean", True)),
    "p90": Kind("compare's paired p90 rows (percentile bootstrap)", _compare("p90", True)),
    "p50": Kind(
        "sweep's best-vs-runner-up margin by p50 (percentile bootstrap of a ratio of medians)", _compare("p50", True)
    ),
    "unpaired": Kind("compare's unpaired p50 rows (percentile bootstrap, each run resampled)", _compare("p50", False)),
    "unpaired_p90": Kind(
        "compare's unpaired p90 rows (percentile bootstrap, each run resampled)",
        _compare("p90", False),
        bound="unpaired",
    ),
    "unpaired_mean": Kind(
        "compare's unpaired mean rows (Welch t on the ratio's linearisation)", _compare("mean", False), bound="unpaired"
    ),
    "cold_start": Kind(
        "ab's load_s and ready_s rows (Student t over processes, one sample each)", _cold_start, unit="processes"
    ),
    "run_mean": Kind("a run's mean in the history and trend (Student t)", _run_stat("mean"), unit="requests"),
    "run_p50": Kind(
        "a run's p50 in the history and trend (exact order statistics)",
        _run_stat("p50"),
        unit="requests",
        bound="median",
    ),
    "run_p90": Kind(
        "a run's p90 in the history and trend (exact order statistics, from 36 requests)",
        _run_stat("p90"),
        unit="requests",
        bound="run_p90",
    ),
}


def coverage(kind: str, noise: str, shift: str, n: int, reps: int, seed: int = 0) -> tuple[float, int]:
    """(share of the shown intervals that hold the truth, how many were shown) over ``reps`` data sets of ``n``
    pairs (processes, for the process kinds). An interval not shown (nan: too few) is not counted."""
    k, t = KINDS[kind], truth(kind, noise, shift)
    rng = np.random.default_rng([seed, n, NOISES.index(noise), list(SHIFTS).index(shift)])
    held = shown = 0
    for _ in range(reps):
        low, high = k.interval(draw(noise, shift, n, rng, processes=k.processes))
        if math.isfinite(low) and math.isfinite(high):
            shown += 1
            held += low <= t <= high
    return (held / shown if shown else float("nan")), shown


def worst(kind: str, n: int, reps: int, seed: int = 0) -> float:
    """The lowest coverage over :data:`SCENARIOS` at ``n`` (nan where no interval is shown)."""
    got = [coverage(kind, noise, shift, n, reps, seed)[0] for noise, shift in SCENARIOS]
    return float("nan") if any(math.isnan(c) for c in got) else min(got)
