"""Paired log ratios, clustered by worker process: their median's interval, where their noise is (between
processes, or between pairs within a process), and the level compare's verdicts are spoken at.

With ``ab --processes N`` each pair j of process p gives a per-pair log ratio ``d_pj = ln(new_pj / base_pj)``
(TTFT's, or TPOT's mean gap's). A one-way random-effects model splits their spread in two:

    d_pj = mu + a_p + e_pj,    a_p ~ (0, s_b^2): the process's own offset (placement, clocks, its warm-up)
                               e_pj ~ (0, s_w^2): pair to pair, within one process

estimated by the ANOVA (method of moments) for groups of unequal sizes n_p (P processes, n = sum n_p pairs):

    MS_within  = sum_p sum_j (d_pj - mean_p)^2 / (n - P)          s_w^2 = MS_within
    MS_between = sum_p n_p (mean_p - mean)^2 / (P - 1)            s_b^2 = max(0, (MS_between - MS_within) / n0)
    n0 = (n - sum_p n_p^2 / n) / (P - 1)                          (n0 = m when every process has m pairs)

The change's estimate averages N processes of m pairs each, so its variance is (s_b^2 + s_w^2 / m) / N, and the
minimum detectable change (half a 95% interval, Student t over the processes) of an allocation is

    MDC(N, m) = expm1(t_{0.975, N-1} * sqrt((s_b^2 + s_w^2 / m) / N))        (in %: times 100)

More processes shrink both terms; more pairs per process only the second: when s_b^2 is comparable to s_w^2 / m,
buy processes. ``ab --budget`` plans with :func:`components` and :func:`projected_mdc_pct`; :func:`noise` says it
for compare, from the log ratios :func:`winsorized` to median +- 3 robust sd (a stalled pair would set s_w^2,
while the rows, medians, ignore it), with the MDC and its projections scaled to the row's own half-interval.

compare's verdict words (:func:`widen`): a speaking row's 95% interval stretched about its point by
r = q(1 - 0.05 / 6) / q(0.975) (q: Student t's with N - 1 df over N processes, else the normal's), so that the
words of its three speaking metrics hold together at 95% (Bonferroni). :func:`median_change` is compare's paired
p50 and gaps estimator (formulas in :mod:`llmbench.analysis.compare`). numpy only: scipy comes with t's quantile.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np

CONFIDENCE = 0.95
# compare's verdict words hold together at 95% over the metrics that speak (TTFT; TPOT with its gaps and decode
# tok/s, one test; E2E): Bonferroni, each at 1 - 0.05 / 3 = 98.3%. See :func:`widen`.
VERDICT_METRICS = 3
VERDICT_CONFIDENCE = 1 - (1 - CONFIDENCE) / VERDICT_METRICS


@lru_cache(maxsize=256)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Student t's two-sided ``confidence`` quantile with ``df`` degrees of freedom (t_{0.975, df} at 95%)."""
    from scipy import stats as st

    return float(st.t.ppf((1 + confidence) / 2, df))


def widen(
    point: float, low: float, high: float, processes: int, in_logs: bool, confidence: float = VERDICT_CONFIDENCE
) -> tuple[float, float]:
    """The (low %, high %) interval at ``confidence`` from a 95% one around ``point``: each side stretched about
    the point by r = q(confidence) / q(95%), ``in_logs`` (ln(1 + x/100): the paired medians' intervals are built
    there) or in %. q: Student t's with N - 1 df for an interval over N ``processes`` (then exact), else the
    normal's (a percentile bootstrap's interval, close to normal at the sizes where a verdict is possible)."""
    if not (math.isfinite(low) and math.isfinite(high)):
        return low, high
    if processes > 1:
        r = t_quantile(processes - 1, confidence) / t_quantile(processes - 1, CONFIDENCE)
    else:
        r = NormalDist().inv_cdf((1 + confidence) / 2) / NormalDist().inv_cdf((1 + CONFIDENCE) / 2)
    if in_logs and min(point, low, high) > -100:
        p, lo, hi = (math.log1p(x / 100) for x in (point, low, high))
        return 100 * math.expm1(p - r * (p - lo)), 100 * math.expm1(p + r * (hi - p))
    return point - r * (point - low), point + r * (high - point)


def units(clusters: np.ndarray | None) -> int:
    """The processes an interval over ``clusters`` (each pair's process) is over: 2 or more, else 0 (a bootstrap)."""
    k = 0 if clusters is None else int(np.unique(clusters).size)
    return k if k > 1 else 0


def t_interval(point: float, per: np.ndarray, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A Student t interval (N - 1 degrees of freedom) around ``point`` from the N processes' own changes ``per``:
    point +- t_{0.975,N-1} sd(per) / sqrt(N)."""
    half = t_quantile(per.size - 1, confidence) * float(per.std(ddof=1) / np.sqrt(per.size))
    return point - half, point + half


def median_change(
    logs: np.ndarray, clusters: np.ndarray | None, resamples: int, confidence: float = CONFIDENCE
) -> tuple[float, float, float]:
    """(change %, low %, high %) of the paired median, compare's p50 and gaps rows: 100 expm1(median of ``logs``,
    each pair's ln(new / base)), with a percentile bootstrap of the pairs (``resamples`` of them, seed 0), or (2 or
    more ``clusters``: ``ab --processes``) Student t in logs over the processes' own medians m_p,
    expm1(median +- t_{0.975,N-1} sd(m_p) / sqrt(N)). Logs throughout, so base and head swap exactly."""
    point = float(np.median(logs))
    if logs.size < 2:
        low = high = float("nan")
    elif clusters is not None and len(np.unique(clusters)) > 1:
        per = np.array([np.median(logs[clusters == c]) for c in np.unique(clusters)])
        low, high = t_interval(point, per, confidence)
    elif np.ptp(logs) == 0:
        low = high = point
    else:
        idx = np.random.default_rng(0).integers(0, logs.size, (resamples, logs.size))
        alpha = (1 - confidence) / 2
        low, high = (float(x) for x in np.quantile(np.median(logs[idx], axis=-1), [alpha, 1 - alpha]))
    return 100.0 * math.expm1(point), 100.0 * math.expm1(low), 100.0 * math.expm1(high)


def components(logs: np.ndarray, clusters: np.ndarray) -> tuple[float, float, float]:
    """(s_b^2, s_w^2, n0) of the per-pair log ratios ``logs`` grouped by ``clusters`` (each pair's process), by the
    one-way random-effects ANOVA above. ValueError with fewer than 2 processes, or without a process of 2 or more
    pairs (no spread within a process to measure). The ANOVA is as sensitive to outliers as any mean: pass
    :func:`winsorized` logs for a heavy-tailed metric (compare does)."""
    d, g = np.asarray(logs, dtype=float), np.asarray(clusters)
    if d.shape != g.shape or d.ndim != 1:
        raise ValueError("logs and clusters must be 1-D arrays of the same length")
    labels, index, sizes = np.unique(g, return_inverse=True, return_counts=True)
    p, n = labels.size, d.size
    if p < 2 or n - p < 1:
        raise ValueError(f"variance components need 2 or more processes and a process of 2 or more pairs, not "
                         f"{p} processes of {n} pairs")  # fmt: skip
    means = np.bincount(index, weights=d) / sizes
    ms_within = float(np.sum((d - means[index]) ** 2) / (n - p))
    ms_between = float(np.sum(sizes * (means - d.mean()) ** 2) / (p - 1))
    n0 = float((n - np.sum(sizes.astype(float) ** 2) / n) / (p - 1))
    return max(0.0, (ms_between - ms_within) / n0), ms_within, n0


def projected_mdc_pct(s_b2: float, s_w2: float, processes: int, pairs_per_process: float) -> float:
    """The minimum detectable change (%) of ``processes`` x ``pairs_per_process`` pairs given the components:
    100 expm1(t_{0.975, N-1} sqrt((s_b^2 + s_w^2 / m) / N)). Infinite for a single process (no interval)."""
    if processes < 2:
        return math.inf
    if pairs_per_process <= 0:
        raise ValueError(f"pairs_per_process must be above 0, not {pairs_per_process}")
    se = math.sqrt((s_b2 + s_w2 / pairs_per_process) / processes)
    return 100.0 * math.expm1(t_quantile(processes - 1) * se)


def _sd_pct(var: float) -> float:
    return 100.0 * math.expm1(math.sqrt(var))


def winsorized(logs: np.ndarray, k: float = 3.0) -> np.ndarray:
    """``logs`` clipped to median +- k robust sd (1.4826 x their median absolute deviation): a pair a stall hit
    (a log ratio of ln 5, where pairs spread by 0.05) counts as a pair 3 sd out, not as 30. compare's speaking rows
    are medians, which such a pair does not move: unclipped, a few stalls would set s_w^2 and the advice."""
    d = np.asarray(logs, dtype=float)
    center = float(np.median(d))
    spread = 1.4826 * float(np.median(np.abs(d - center)))
    return d if spread == 0 else np.clip(d, center - k * spread, center + k * spread)


def advice(s_b2: float, s_w2: float, m: float, excess: float = 1.0) -> str:
    """What buys the narrower interval, in words: the share of the estimate's variance that is between processes
    (s_b^2 against s_w^2 / m) decides. Twice the processes always halve the variance; twice the pairs per
    process halve only its within part. ``excess``: the row's interval over the components' (above 2: a few
    processes' medians were thrown by their outlying pairs, which more pairs per process steady)."""
    if excess > 2:
        return f"the interval is {excess:.1f}x the pairs' spread (outliers threw processes' medians): more pairs each"
    share = s_b2 / (s_b2 + s_w2 / m) if s_b2 + s_w2 > 0 else 0.0
    if share >= 0.5:
        return "the processes disagree: more processes shrink the interval, more pairs each barely"
    if share >= 0.1:
        return "more processes shrink the interval most"
    return "pair-to-pair noise: more pairs shrink the interval, on more processes or on these"


def noise(logs: np.ndarray, clusters: np.ndarray | None, mdc_pct: float | None = None) -> dict[str, Any] | None:
    """The variance summary compare shows for one row: processes, pairs per process (their mean), both sd's (%) of
    the :func:`winsorized` log ratios' :func:`components`, the minimum detectable change, projections for twice
    the processes or twice the pairs per process, and :func:`advice`.

    ``mdc_pct``: the row's own measured half-interval; the projections are then scaled from it by the ratio of
    :func:`projected_mdc_pct` (the components model a mean of the log ratios, the row takes medians: the ratio
    carries over, the level is the row's). Without it the model's own MDC is used. None when the components
    can't be estimated (see :func:`components`), or without 2 or more ``clusters``."""
    if clusters is None or not units(clusters):
        return None
    try:
        s_b2, s_w2, _n0 = components(winsorized(logs), clusters)
    except ValueError:
        return None
    procs = int(np.unique(clusters).size)
    m = float(np.asarray(logs).size) / procs
    model = projected_mdc_pct(s_b2, s_w2, procs, m)
    scale = mdc_pct / model if mdc_pct is not None and model > 0 and math.isfinite(mdc_pct) else 1.0
    return {
        "processes": procs,
        "pairs_per_process": round(m, 2),
        "sd_between_processes_pct": _sd_pct(s_b2),
        "sd_within_process_pct": _sd_pct(s_w2),
        "mdc_pct": model * scale if model > 0 else (mdc_pct if mdc_pct is not None else model),
        "mdc_2x_processes_pct": projected_mdc_pct(s_b2, s_w2, 2 * procs, m) * scale,
        "mdc_2x_pairs_pct": projected_mdc_pct(s_b2, s_w2, procs, 2 * m) * scale,
        "advice": advice(s_b2, s_w2, m, scale),
    }
