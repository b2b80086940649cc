"""compare's rows for the shape of the wait: differences in the metric's own unit, which hold when the base is 0.

A base with no stalls has no ratio to change by, so these rows are not percentages: each is the mean over
requests of NEW minus BASE, in the metric's unit (ms of stall a request, stalls a request, QoE, fluidity).
With pairs (the same prompt_index and repeat in both runs) d_i = new_i - base_i:

    difference = mean_i d_i;  95% interval = difference +- t_{0.975,n-1} sd(d) / sqrt(n)     (Student t)

and without pairs Welch's interval on mean(new) - mean(base). Every d_i equal (an A/A run with no stall on either
side): the interval is that one value, significant only when it is not 0.

How honest the interval is at small n (``python benchmarks/shape_interval.py``, 4,000 simulated comparisons a
cell): on A/A runs (both sides drawn alike: stalls 70% or 90% absent, else exponential; stall counts; QoE near 1)
it covers 95-100% from 6 pairs; when NEW stalls and BASE never does (a skewed, one-sided difference) it covers
less (41-91%), but it errs by ending *below* the true difference: its lower bound lies above the truth in at most
1.4% of comparisons, so a gate (which fails on the lower side) is wrong less often than its 2.5% allows. Rows
need :data:`variance.MIN_N` ``["difference"]`` pairs (7, as a mean's).

Rows are information unless a gate decides on them (``--fail-on reader_stall_ms=200``: fail when a request's
mean stall grew significantly, by more than 200 ms); their verdicts, "worse" or "better", are the gate's test.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from llmbench.analysis import variance

# metric -> (label, direction: +1 higher is better, -1 lower is better; unit)
SHAPE_METRICS: dict[str, tuple[str, int, str]] = {
    "reader_stall_ms": ("reader stall ms", -1, "ms"),
    "reader_stalls": ("reader stalls", -1, "stalls"),
    "reader_longest_stall_ms": ("longest stall ms", -1, "ms"),
    "andes_qoe": ("Andes QoE", +1, "QoE"),
    "fluidity": ("fluidity", +1, "fluidity"),
}
MAX_THRESHOLD = {"reader_stall_ms": 3_600_000.0, "reader_stalls": 1_000_000.0, "reader_longest_stall_ms": 3_600_000.0,
                 "andes_qoe": 1.0, "fluidity": 1.0}  # fmt: skip


@dataclass
class ShapeRow:
    """One shape metric's change: NEW minus BASE, in the metric's unit, with its 95% interval."""

    metric: str
    unit: str
    base: float  # mean over the requests compared (the pairs' when paired)
    new: float
    difference: float  # new - base (paired: the mean of the pairs' differences, the same number)
    ci_low: float  # NaN: too few requests for an interval
    ci_high: float
    significant: bool  # the interval excludes 0
    verdict: str  # "worse" | "better" | "no significant change" when gated, else "(information)"; or too few
    n_base: int
    n_new: int
    paired: bool
    too_few: str | None = None

    def worse_by(self) -> float:
        """The difference in the direction that is worse (positive: worse)."""
        return self.difference * -SHAPE_METRICS[self.metric][1]


def shape_rows(base: Any, new: Any, paired: bool, memo: variance.KeyMemo | None = None) -> list[ShapeRow]:
    """A row per shape metric both runs have (a run records them since issue 46; older runs get them when read)."""
    rows = []
    memo = memo or variance.KeyMemo()
    keys = [memo(run.requests) for run in (base, new)]
    for metric, (_, _, unit) in SHAPE_METRICS.items():
        bs, ns = variance.series(base.requests, metric, keys[0]), variance.series(new.requests, metric, keys[1])
        if not bs[0].size or not ns[0].size:
            continue
        if paired:
            _, b, n = variance.matched(bs, ns)
            if not b.size:
                continue
            low, high = paired_interval(n - b)
        else:
            b, n = bs[1], ns[1]
            low, high = welch_interval(b, n)
        few = variance.too_few(min(b.size, n.size), "difference", "pairs" if paired else "requests")
        if few is not None:
            low = high = math.nan
        diff = float(n.mean() - b.mean())
        significant = bool(math.isfinite(low) and (low > 0 or high < 0))
        rows.append(ShapeRow(metric, unit, float(b.mean()), float(n.mean()), diff, low, high, significant,
                             few or variance.INFORMATION, b.size, n.size, paired, few))  # fmt: skip
    return rows


def speak(row: ShapeRow) -> None:
    """A gated row says its verdict: worse or better when its 95% interval excludes 0."""
    if row.too_few is None:
        row.verdict = ("worse" if row.worse_by() > 0 else "better") if row.significant else variance.NO_CHANGE


def check_threshold(metric: str, value: float) -> float:
    """A shape gate's threshold, in the metric's unit: UserError unless finite, 0 or more and within reach."""
    from llmbench.core.errors import UserError

    v = float(value)
    top = MAX_THRESHOLD[metric]
    if not (math.isfinite(v) and 0 <= v <= top):
        raise UserError(f"--fail-on {metric}: expected how much worse a request may get, in "
                        f"{SHAPE_METRICS[metric][2]}, a number from 0 to {top:g}, not {value:g}")  # fmt: skip
    return v


def paired_interval(d: np.ndarray) -> tuple[float, float]:
    if d.size < 2:
        return math.nan, math.nan
    mean, sd = float(d.mean()), float(d.std(ddof=1))
    half = variance.t_quantile(d.size - 1) * sd / math.sqrt(d.size)
    return mean - half, mean + half


def welch_interval(b: np.ndarray, n: np.ndarray) -> tuple[float, float]:
    if b.size < 2 or n.size < 2:
        return math.nan, math.nan
    vb, vn = float(b.var(ddof=1)) / b.size, float(n.var(ddof=1)) / n.size
    diff = float(n.mean() - b.mean())
    if vb + vn == 0:
        return diff, diff
    df = (vb + vn) ** 2 / (vb**2 / (b.size - 1) + vn**2 / (n.size - 1))
    half = variance.t_quantile(max(1, math.floor(df))) * math.sqrt(vb + vn)
    return diff - half, diff + half
