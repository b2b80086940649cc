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

The paired median's interval without processes is exact and distribution-free (:func:`order_interval`): with the
n log ratios sorted, d_(1) <= ... <= d_(n), and B ~ Binomial(n, 1/2) the number of them below the median,

    [d_(k), d_(n-k+1)],   k the largest with P(B <= k - 1) <= (1 - confidence) / 2,  coverage 1 - 2 P(B <= k - 1)

It exists from 6 pairs at 95% (1 - 2 / 2^6 = 96.9%); below that no interval of the median reaches 95% (the
percentile bootstrap's [min, max] covers 1 - 2 / 2^n: 50% at 2 pairs, 94% at 5), so the row says "too few
pairs" and gives no verdict. The same construction with Binomial(n, q) bounds any quantile q of one sample
(a run's p90 in the history). Each other interval's smallest honest n is :data:`MIN_N`, found by simulation
(:mod:`llmbench.analysis.coverage`, benchmarks/README.md "Interval coverage").

compare's verdict words (:func:`widen`): a speaking row's 95% interval stretched about its point by
r = q(1 - 0.05 / 6) / q(0.975) (q: Student t's with N - 1 df over N processes, else the normal's), so that the
words of its three speaking metrics hold together at 95% (Bonferroni). :func:`median_change` is compare's paired
p50 and gaps estimator (formulas in :mod:`llmbench.analysis.compare`). numpy only (Student t's quantile in
Python: :func:`t_quantile`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from statistics import NormalDist
from typing import Any

import numpy as np

CONFIDENCE = 0.95
# compare's verdict words hold together at 95% over the metrics that speak (TTFT; TPOT with its gaps and decode
# tok/s, one test; E2E): Bonferroni, each at 1 - 0.05 / 3 = 98.3%. See :func:`widen`.
VERDICT_METRICS = 3
VERDICT_CONFIDENCE = 1 - (1 - CONFIDENCE) / VERDICT_METRICS
RUN_STATS = ("mean", "p50", "p90", "p99")  # a run's own statistics in the history (:func:`stats_with_intervals`)
# The smallest n from which each kind of interval llmbench prints covers 93% or more (nominal 95%) in the
# simulation of :mod:`llmbench.analysis.coverage` (normal, skewed and heavy-tailed pair ratios, under the null and
# a +3% shift, n from 2 to 40; the worst of the 6 at each n, 1,000 data sets each, so +-1.5 points of noise:
# benchmarks/README.md "Interval coverage"). Below it a row prints no interval and no verdict, never fails a gate.
INFORMATION = "(information)"  # the verdict of a compare row that does not speak
NO_CHANGE = "no significant change"
MIN_N: dict[str, int] = {
    "difference": 7,  # a shape row's mean difference, Student t (:mod:`.shape`): see its docstring
    "median": 6,  # the paired p50 and gaps rows: the exact order-statistic interval exists from 6 (96.9%)
    "processes": 2,  # Student t over the processes' own medians (ab --processes): processes, not pairs
    "cold_start": 2,  # ab's load_s and ready_s: Student t over processes, one sample each
    "mean": 7,  # a ratio of means, Student t with the jackknife's standard error: 92% at 6 pairs, 93-95% from 7
    "p50": 8,  # sweep's margin by p50, the percentile bootstrap of a ratio of medians: 47-93% below 8
    "p90": 15,  # the percentile bootstrap of a ratio of p90s: 47-92% below 11 pairs, 93.1-94.8% at 11-14
    "unpaired": 2,  # unpaired rows (different prompt files): the prompts' spread makes them wide, 97% and more
    "run_mean": 40,  # a run's own mean in the history, Student t: 91-93% below 40 (requests of skewed prompts)
    "run_p90": 36,  # a run's own p90: the exact order-statistic interval exists from 36 requests (p99: 368)
}


@lru_cache(maxsize=256)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """Student t's two-sided ``confidence`` quantile with ``df`` degrees of freedom (t_{0.975, df} at 95%), to
    ~1e-12 (tests/unit/test_too_few_pairs.py holds it to scipy.stats.t.ppf). In Python: importing scipy's
    special functions costs compare 0.35 s, more than its arithmetic."""
    if df < 1 or not 0 < confidence < 1:
        raise ValueError(f"t_quantile needs df >= 1 and a confidence in (0, 1), not {df}, {confidence}")
    tail = (1 - confidence) / 2  # P(T > t) = I_{df/(df+t^2)}(df/2, 1/2) / 2, decreasing in t: bisect on it
    low, high = 0.0, 1.0
    while _t_upper(high, df) > tail:
        high *= 2
    for _ in range(200):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_upper(mid, df) > tail else (low, mid)
        if high - low <= 1e-13 * high:
            break
    return (low + high) / 2


def _t_upper(t: float, df: int) -> float:
    """P(T > t) for Student t with ``df`` degrees of freedom, t >= 0."""
    return 0.5 * _betainc(df / 2, 0.5, df / (df + t * t))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (modified Lentz; Numerical Recipes'
    betacf), used on the side where it converges fast."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x > (a + 1) / (a + b + 2):
        return 1.0 - _betainc(b, a, 1.0 - x)
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    f = d
    for m in range(1, 1000):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):  # fmt: skip
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            f *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return front * f / a


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


@lru_cache(maxsize=4096)
def order_ranks(n: int, q: float = 0.5, confidence: float = CONFIDENCE) -> tuple[int, int, float] | None:
    """(j, k, coverage): the 0-based ranks of the exact distribution-free interval [x_(j), x_(k)] of the ``q``
    quantile of ``n`` sorted values, and its coverage P(j < B <= k) with B ~ Binomial(n, q) the count below the
    quantile; the narrowest such pair, its two tails each at most (1 - confidence) / 2. None when no pair of order
    statistics reaches ``confidence`` (the median below 6 values at 95%)."""
    if n < 1 or not 0 < q < 1:
        return None
    tail = (1 - confidence) / 2
    # ln C(n, i) as a running sum of ln((n - i + 1) / i): a million pairs in milliseconds (lgamma a term: seconds)
    i = np.arange(1, n + 1, dtype=float)
    log_choose = np.concatenate([[0.0], np.cumsum(np.log(n - i + 1) - np.log(i))])
    below_count = np.arange(n + 1, dtype=float)
    cdf = np.cumsum(np.exp(log_choose + below_count * math.log(q) + (n - below_count) * math.log1p(-q)))
    # the lower bound x_(j) (0-based j) is below the quantile unless B <= j: P(B <= j) <= tail
    below = np.nonzero(cdf <= tail)[0]
    above = np.nonzero(1 - cdf[:-1] <= tail)[0]  # x_(k) is above it unless B >= k + 1: P(B > k) <= tail
    if below.size == 0 or above.size == 0:
        return None
    j, k = int(below[-1]), int(above[0])
    coverage = float(cdf[k] - cdf[j]) if k > j else 0.0
    return (j, k, coverage) if coverage >= confidence else None


def order_interval(values: np.ndarray, q: float = 0.5, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """The exact distribution-free ``confidence`` interval of ``values``' ``q`` quantile (:func:`order_ranks`);
    (nan, nan) where none exists at this n."""
    ranks = order_ranks(int(np.asarray(values).size), q, confidence)
    if ranks is None:
        return float("nan"), float("nan")
    x = np.sort(np.asarray(values, dtype=float))
    return float(x[ranks[0]]), float(x[ranks[1]])


def mean_ratio_interval(base: np.ndarray, new: np.ndarray, paired: bool) -> tuple[float, float]:
    """(low %, high %) of R - 1, R = mean(new) / mean(base), with Student t. Paired (m pairs): the jackknife's
    standard error, R_(i) = (sum n - n_i) / (sum b - b_i), se^2 = (m - 1) / m sum_i (R_(i) - mean R_(.))^2, m - 1 df.
    Unpaired (m and k requests): the ratio's linearisation, se^2 = R^2 (s_b^2 / (m mean(b)^2) + s_n^2 / (k
    mean(n)^2)), Welch-Satterthwaite df. The percentile bootstrap these replaced covered 73-89% below 12 pairs; the
    paired jackknife covers 93% and more from 7 pairs (92-95% below) with normal, skewed and heavy-tailed noise,
    where the linearisation covered 91-94% (benchmarks/README.md, "Interval coverage")."""
    r = float(new.mean() / base.mean())
    if paired:
        m = base.size
        loo = (new.sum() - new) / (base.sum() - base)
        se, df = math.sqrt((m - 1) / m * float(np.sum((loo - loo.mean()) ** 2))), m - 1
    else:
        vb = float(base.var(ddof=1)) / (base.size * float(base.mean()) ** 2)
        vn = float(new.var(ddof=1)) / (new.size * float(new.mean()) ** 2)
        se = r * math.sqrt(vb + vn)
        df = max(1, round((vb + vn) ** 2 / (vb**2 / (base.size - 1) + vn**2 / (new.size - 1)))) if vb + vn else 1
    half = t_quantile(df, CONFIDENCE) * se
    return 100.0 * (r - half - 1.0), 100.0 * (r + half - 1.0)


# A (prompt_index, repeat) as one int64 that sorts as the pair does: prompt_index * 2^32 + repeat + 2^31 (both
# are 32-bit, RequestResult's Index): pairing a million requests is then one sorted intersection, not a dict.
_KEY_SHIFT = 2**32
_KEY_BIAS = 2**31


def request_keys(requests: Sequence[Any]) -> np.ndarray:
    """Each request's (prompt_index, repeat) encoded as one int64 (see :data:`_KEY_SHIFT`), in their order."""
    return np.fromiter((r.prompt_index * _KEY_SHIFT + r.repeat + _KEY_BIAS for r in requests), dtype=np.int64,
                       count=len(requests))  # fmt: skip


class KeyMemo:
    """Each requests list's :func:`request_keys`, computed once: compare reads one run's requests for many rows."""

    def __init__(self) -> None:
        self._memo: dict[int, tuple[Sequence[Any], np.ndarray]] = {}

    def __call__(self, requests: Sequence[Any]) -> np.ndarray:
        got = self._memo.get(id(requests))
        if got is None or got[0] is not requests or len(got[1]) != len(requests):
            got = self._memo[id(requests)] = (requests, request_keys(requests))  # held: its id stays its own
        return got[1]


def key_pair(key: int) -> tuple[int, int]:
    """The (prompt_index, repeat) of an encoded key."""
    prompt, repeat = divmod(int(key), _KEY_SHIFT)
    return prompt, repeat - _KEY_BIAS


def series(requests: Sequence[Any], metric: str, keys: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(keys, values) of the requests that have ``metric`` (a None is left out), in their order; ``keys``: the
    requests' :func:`request_keys`, when the caller has them. ``decode_tokens_per_s`` is 1000 / tpot_ms ((n - 1)
    / (last - first)), none where TPOT is 0 or missing."""
    name = "tpot_ms" if metric == "decode_tokens_per_s" else metric
    values = np.array([getattr(r, name, None) for r in requests], dtype=float)  # None: nan
    if metric == "decode_tokens_per_s":
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.where(values > 0, 1000.0 / values, np.nan)
    keys = request_keys(requests) if keys is None else keys
    keep = ~np.isnan(values)
    return keys[keep], values[keep]


def matched(base: tuple[np.ndarray, np.ndarray], new: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, ...]:
    """(keys, base values, new values) of the pairs both series hold, by key ascending (a run's keys are unique)."""
    keys, ib, inew = np.intersect1d(base[0], new[0], assume_unique=True, return_indices=True)
    return keys, base[1][ib], new[1][inew]


# From this many pairs (or requests a side, unpaired) a quantile's change is sectioned, not bootstrapped: the
# bootstrap draws B resamples of n (B x n values a side: 150 x 1,000,000 is 1.2 GB, and a partition of each), where
# sectioning takes k quantiles of n/k values each. Each section then holds 1,250 or more: its quantile near normal
# (16 sections covered 93-96% at 20,000 pairs, 32 sections 93-95%, 64 sections 92-95%: larger sections, truer).
SECTIONED_FROM = 20_000
SECTIONS = 16


def sectioned_change(
    base: np.ndarray, new: np.ndarray, q: float, paired: bool, seed: int = 0, sections: int = SECTIONS,
    confidence: float = CONFIDENCE,
) -> tuple[float, float]:  # fmt: skip
    """(low %, high %) of the change of the ``q`` quantile, Q(new) / Q(base) - 1, by sectioning (Asmussen & Glynn,
    *Stochastic Simulation*, 2007, III.5): the pairs (each side's requests, unpaired) dealt at random into k
    sections, each section's L_j = ln Q(new_j) - ln Q(base_j), and around the whole sample's L

        L +- t_{0.975, k-1} sd(L_j) / sqrt(k)

    (a section holds n/k of the data, so Var L_j ~ k Var L). O(n) work and memory at any n; its coverage at large n
    is in benchmarks/README.md ("Interval coverage at large n")."""
    rng = np.random.default_rng(seed)
    order_b = rng.permutation(base.size)
    order_n = order_b if paired else rng.permutation(new.size)
    parts_b = np.array_split(base[order_b], sections)
    parts_n = np.array_split(new[order_n], sections)
    per = np.array([math.log(np.quantile(pn, q) / np.quantile(pb, q)) for pb, pn in zip(parts_b, parts_n, strict=True)])
    point = math.log(float(np.quantile(new, q)) / float(np.quantile(base, q)))
    low, high = t_interval(point, per, confidence) if np.ptp(per) > 0 else (point, point)
    return 100.0 * math.expm1(low), 100.0 * math.expm1(high)


def stats_with_intervals(values: list[float], metric: str) -> list[dict[str, Any]]:
    """A run's own mean, p50, p90 and p99 of ``values`` (the history's rows, trend's points) with 95% intervals:
    each quantile's exact distribution-free interval (order statistics, :func:`order_interval`: from 6
    requests for p50, 36 for p90, 368 for p99), the mean's Student t from ``MIN_N["run_mean"]`` requests. Below
    those an interval is None: none at this n holds 95% (benchmarks/README.md, "Interval coverage")."""
    a = np.asarray([v for v in values if v is not None and v == v], dtype=float)
    if a.size == 0:
        return []
    rows = []
    for stat in RUN_STATS:
        value = float(a.mean()) if stat == "mean" else float(np.percentile(a, int(stat[1:])))
        low: float | None = None
        high: float | None = None
        if stat == "mean" and a.size >= MIN_N["run_mean"]:
            low, high = t_interval(value, a) if np.ptp(a) > 0 else (value, value)
        elif stat != "mean":
            lo, hi = order_interval(a, int(stat[1:]) / 100)
            low, high = (lo, hi) if lo == lo else (None, None)
        rows.append({"metric": metric, "stat": stat, "value": value, "ci_low": low, "ci_high": high, "n": int(a.size)})
    return rows


def median_change(
    logs: np.ndarray,
    clusters: np.ndarray | None,
    resamples: int,
    confidence: float = CONFIDENCE,
    placements: np.ndarray | None = None,
) -> tuple[float, float, float]:
    """(change %, low %, high %) of the paired median, compare's p50 and gaps rows: 100 expm1(median of ``logs``,
    each pair's ln(new / base)), with the exact order-statistic interval of the pairs' median (:func:`order_interval`;
    nan below 6 pairs, where none reaches 95%), or (2 or more ``clusters``: ``ab --processes``) Student t in logs
    over the processes' own medians m_p, expm1(mean m_p +- t_{0.975,N-1} sd(m_p) / sqrt(N)) (compare shows it from
    :data:`MIN_N` ["processes"]). Logs throughout, so base and head swap exactly. ``resamples`` is kept for callers
    of the bootstrap this replaced; the interval draws none.

    ``placements`` (with clusters: a duet's CPU of each pair's base request): a process's own change is then the
    mean of its placements' medians (:func:`balanced_median`) of the run's :func:`winsorized` log ratios, so that
    a CPU slowed for a process's while weighs as much on either side, whichever placement held more of its pairs,
    and a lone outlier pair of one placement no more than 3 robust sd."""
    del resamples
    point = float(np.median(logs))
    if clusters is not None and np.unique(clusters).size > 1:
        _, index, sizes = np.unique(clusters, return_inverse=True, return_counts=True)
        order = np.argsort(index, kind="stable")
        grouped = np.split(logs[order], np.cumsum(sizes)[:-1])
        if placements is None:
            per = np.array([np.median(g) for g in grouped])
        else:
            # clipped first (:func:`winsorized`): a lone pair of one placement weighs half its process's change
            clipped = np.split(winsorized(logs)[order], np.cumsum(sizes)[:-1])
            where = np.split(np.asarray(placements)[order], np.cumsum(sizes)[:-1])
            per = np.array([balanced_median(g, w) for g, w in zip(clipped, where, strict=True)])
        # the processes are the units: the change is their medians' mean, which t's interval is exact for. Centred
        # on the pooled median instead, it covered 86-91% with normal noise (a median of all pairs varies more
        # than the mean of the processes' medians, by up to pi/2: benchmarks/README.md, "Interval coverage")
        point = float(per.mean())
        low, high = t_interval(point, per, confidence) if np.ptp(per) > 0 else (point, point)
    else:
        low, high = order_interval(logs, 0.5, confidence)
    return 100.0 * math.expm1(point), 100.0 * math.expm1(low), 100.0 * math.expm1(high)


def balanced_median(logs: np.ndarray, placements: np.ndarray) -> float:
    """One process's change, balanced over where its pairs ran: the mean over the distinct ``placements`` of the
    median of their ``logs`` (the plain median when all ran on one placement).

    Why: a duet pins base to one CPU and head to the other, swapping pair by pair, and a host slows one CPU for
    seconds at a time (a neighbour on its core), which adds +delta to the pairs of one placement and -delta to the
    other's. A process of 3 pairs holds 2 of one placement and 1 of the other, so its median is +-delta whenever
    delta outweighs a pair's own noise, and the interval over processes takes delta for their spread. Balanced, the
    lone pair of the other placement weighs half the process: :func:`median_change` clips the run's log ratios to
    3 robust sd first, so that a 1-2 s episode that hit one pair (the Xeon of 2026-12-06: one vCPU, +15-20% for a
    few tokens) moves its process by a bounded amount, while a slowdown that lasts (half the pairs off) widens the
    spread it is clipped to. Measured on the same pairs, the Xeon's 53 kept runs of the job: A/A changes' sd 0.29%
    against 0.38% (TPOT), 0.20% against 0.44% (TTFT), calibrated alike (benchmarks/README.md, ``placement.py``)."""
    groups = [logs[placements == p] for p in np.unique(placements)]
    return float(np.mean([np.median(g) for g in groups]))


def too_few(n: int, kind: str, unit: str = "pairs") -> str | None:
    """The line "too few pairs: n = 3; at least 6 needed" when ``n`` is under ``kind``'s :data:`MIN_N`, else None."""
    need = MIN_N[kind]
    return f"too few {unit}: n = {n}; at least {need} needed" if n < need else None


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


def c4(n: int) -> float:
    """E[s] / sigma for a sample sd of ``n`` normal values (s is biased low: 0.80 at n = 2, 0.97 at n = 10)."""
    if n < 2:
        return math.nan
    return math.sqrt(2.0 / (n - 1)) * math.exp(math.lgamma(n / 2) - math.lgamma((n - 1) / 2))


def balanced_median_variance(logs: np.ndarray, pairs: int, reps: int = 4000, seed: int = 0) -> float:
    """The variance of one process's change as :func:`median_change` takes it from a duet (``balanced_median``
    of its ``pairs`` pairs, the placements taking turns) when its pairs are drawn from ``logs``: the pilot's log
    ratios, :func:`winsorized` and centred on each placement's median by the caller. Simulated (``reps`` draws,
    a fixed ``seed``: the same pilot gives the same plan), because the pairs' noise is what a median of few is
    sensitive to: heavy-tailed on a VM (a vCPU preempted ~100 ms now and then), rarely normal, and a median of
    3 or 4 is neither a mean (variance s^2 / m) nor the large-m median (pi/2 x that)."""
    x = np.asarray(logs, dtype=float)
    if x.size < 2 or pairs < 1:
        raise ValueError(f"a process variance needs 2 or more pilot pairs and 1 or more pairs a process, not "
                         f"{x.size} and {pairs}")  # fmt: skip
    rng = np.random.default_rng(seed)
    first, second = -(-pairs // 2), pairs // 2  # a process's pairs take turns between the two placements
    one = np.median(rng.choice(x, size=(reps, first)), axis=1)
    per = one if second == 0 else (one + np.median(rng.choice(x, size=(reps, second)), axis=1)) / 2
    return float(np.var(per, ddof=1))


def expected_mdc_pct(s_b2: float, v_process: float, processes: int, quantile: float | None = None) -> float:
    """The minimum detectable change (%) a run of ``processes`` is expected to print when its processes' own
    changes vary by ``s_b2`` (between processes) + ``v_process`` (their pairs' noise, e.g.
    :func:`balanced_median_variance`): 100 expm1(t_{0.975, N-1} k sqrt((s_b^2 + v) / N)), the half-width of the
    t interval over the processes, whose sample sd s is sigma times k. ``quantile`` None: k = c4(N), s's mean;
    else s's quantile, k = sqrt(chi2_q(N - 1) / (N - 1)) (Wilson-Hilferty's chi-square quantile, within 1% from
    3 df): with few processes s scatters widely (0.5 of the 10-90% range: 0.42-1.52 sigma at 4 processes,
    0.72-1.27 at 16), and so does the MDC a run prints. Infinite for one process."""
    if processes < 2:
        return math.inf
    k = c4(processes) if quantile is None else math.sqrt(chi2_quantile(processes - 1, quantile) / (processes - 1))
    return 100.0 * math.expm1(t_quantile(processes - 1) * k * math.sqrt((s_b2 + v_process) / processes))


def chi2_quantile(df: int, q: float) -> float:
    """The chi-square distribution's ``q`` quantile with ``df`` degrees of freedom, by Wilson and Hilferty's cube
    root (1931): df (1 - 2 / (9 df) + z_q sqrt(2 / (9 df)))^3, floored at 0."""
    a = 2.0 / (9.0 * df)
    return df * max(0.0, 1 - a + NormalDist().inv_cdf(q) * math.sqrt(a)) ** 3


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
