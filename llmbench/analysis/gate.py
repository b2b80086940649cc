"""What a gate decides, once: the checks of every comparison, the gated metrics the runs could not have seen
(loudly: their pass is blind), ``--require-mdc``'s failures, the trend budget's, and the exit code they mean.
The CLI only prints a verdict.

Exit codes: 0 when every gate passes; 1 when a gate found a regression, when ``--require-mdc`` finds a run that
could not have seen a change that small, or when a trend is over its budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from llmbench.analysis.compare import GATED_BY_DEFAULT, Comparison, GateCheck, check_percent, parse_fail_on


@dataclass
class GateVerdict:
    """The gates' decision on a list of comparisons (compare's NEW files, or ab's one pair)."""

    checks: list[list[GateCheck]]  # per comparison, every gated (metric, stat) with its verdict
    blind: list[str] = field(default_factory=list)  # "BLIND: ..." lines: a gate that could not have failed
    require_mdc: float | None = None
    short: list[tuple[str, str, float]] = field(default_factory=list)  # --require-mdc: (metric, stat, mdc) over it

    @property
    def regression(self) -> bool:
        """True when a gate found a significant regression beyond its threshold."""
        return any(c.regression for k in self.checks for c in k)

    @property
    def mdc_error(self) -> str | None:
        """``--require-mdc``'s failure as one line (without the ``llmbench: error:`` prefix), or None."""
        if not self.short or self.require_mdc is None:
            return None
        shown = ", ".join(f"{m} {st} {mdc:.1f}%" if mdc != float("inf") else f"{m} {st}: no interval"
                          for m, st, mdc in self.short)  # fmt: skip
        return f"--require-mdc {self.require_mdc:g}: this run could not have seen a change that small ({shown})"

    @property
    def exit_code(self) -> int:
        """1 when a gate fails (a regression, or ``--require-mdc``), else 0."""
        return 1 if self.short or self.regression else 0


def gate(
    comps: list[Comparison],
    fail_on_regression: float | None = None,
    fail_on: list[str] | None = None,
    stat: str = "mean",
    require_mdc: float | None = None,
) -> GateVerdict:
    """Gate ``comps``: each one's checks (``fail_on_regression`` PCT for TTFT, TPOT and E2E; ``fail_on``
    METRIC=PCT items), the blind spots of the gated metrics, and ``require_mdc``'s shortfalls. UserError for a
    gate that can't be applied (an unknown metric, ``gaps`` without stamps). The rows a gate decides on speak
    (:meth:`Comparison.speak`): with ``stat`` mean, the gated means show their verdict."""
    thresholds = parse_fail_on(fail_on)
    checks = [c.checks(fail_on_regression, thresholds, stat) for c in comps]
    verdict = GateVerdict(checks, require_mdc=require_mdc)
    for c, k in zip(comps, checks, strict=True):
        verdict.blind += _blind_shape(k)
        for metric, mdc, pct in c.blind_spots({x.metric: x.threshold_pct for x in k if x.threshold is None}, stat):
            row = c.row(metric, stat)
            assert row is not None  # blind_spots found it
            why = (f"{row.too_few}, so no interval and no verdict" if row.too_few else
                   f"its minimum detectable change is {mdc:.1f}%")  # fmt: skip
            more = " (more pairs: --repeats, or more processes: --processes)"
            if row.too_few and not row.too_few.startswith("too few"):
                more = ""  # more pairs of a 0 are still 0
            verdict.blind.append(f"BLIND: this run could not have seen a {pct:g}% regression of {metric} {row.stat}: "
                                 f"{why}{more}")  # fmt: skip
    if require_mdc is not None:
        check_percent("--require-mdc", require_mdc, zero=False)  # a NaN would switch it off, 0 fail every run
        gated = [x.metric for k in checks for x in k] or list(GATED_BY_DEFAULT)
        wanted = list(dict.fromkeys(gated))  # in the gates' order, each once: the line reads the same every time
        for c in comps:  # the gate decides on these rows' widths: they speak (a mean's too)
            for row in filter(None, (c.row(m, stat) for m in wanted)):
                c.speak(row)
        verdict.short = [(m, c.row(m, stat).stat, mdc) for c in comps  # type: ignore[union-attr]
                         for m, mdc, _ in c.blind_spots(dict.fromkeys(wanted, require_mdc), stat)]  # fmt: skip
    return verdict


def _blind_shape(checks: list[GateCheck]) -> list[str]:
    """BLIND lines for the gated shape metrics that could not have failed: no interval (too few pairs), or one
    whose half-width is over the threshold (a growth of the threshold's size would not have been significant)."""
    out = []
    for x in checks:
        if x.threshold is None or x.difference_ci is None:
            continue
        low, high = x.difference_ci
        half = (high - low) / 2 if low == low else float("inf")  # NaN: too few pairs for an interval
        if half > x.threshold:
            why = "too few pairs for an interval" if half == float("inf") else (
                f"its 95% interval is +-{half:.4g} {x.unit} wide")  # fmt: skip
            out.append(f"BLIND: this run could not have seen {x.metric} grow worse by {x.threshold:g} {x.unit}: "
                       f"{why} (more pairs: --repeats)")  # fmt: skip
    return out


@dataclass
class BudgetVerdict:
    """``trend --check``: the anchored series' points over the allowed slowdown."""

    problems: list[str]
    budget: float
    anchor: str | None
    bisect: list[dict] = field(default_factory=list)  # the `llmbench bisect` of each problem's stretch

    @property
    def lines(self) -> list[str]:
        """What is said on stderr: each problem and the bisect that would find it, or that the series is within
        its budget."""
        if self.problems:
            return [f"llmbench: over budget: {p}" for p in self.problems] + [
                f"llmbench: to find the commit: {' '.join(h['argv'])}" for h in self.bisect]  # fmt: skip
        return [f"within the {self.budget:g}% budget against {self.anchor}"]

    @property
    def exit_code(self) -> int:
        """1 when the series is significantly over its budget, else 0."""
        return 1 if self.problems else 0
