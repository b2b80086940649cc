"""How ``ab --budget`` projects a design's minimum detectable change from this CPU's own pilot pairs (issue 62):
the pairs' log ratios (:func:`pair_logs`), the noise model that simulates compare's estimator on them
(:class:`PilotNoise`; :class:`PriorNoise` is the normal model of fixed figures it replaced), and how the
projection is said and recorded. The planner (:mod:`llmbench.drivers.ab_budget`) and the calibration
(:mod:`llmbench.drivers.ab_calibrate`) use it."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

# the sd between processes a projection from one process's pilot assumes (it can't see it): the Zen 4 EPYC's duet
# runs measured 0.0-0.2% (TTFT and TPOT, 4 rows of 2 runs, 2026-12-07), PRIORS' 1% came from ABBA-era studies;
# the studies' own s_b is reported against it (benchmarks/README.md, issue 62)
BETWEEN_PRIOR = {"tpot": 0.003, "ttft": 0.003}
# the range of the MDC a design's runs print that the projection says (ab_budget.PLAN_QUANTILE chooses the design)
RANGE_QUANTILES = (0.1, 0.9)
# a process's variance is simulated up to this many pairs, then scaled as 1 / m (a median's large-sample law)
SIMULATED_PAIRS = 40


@dataclass(frozen=True)
class PilotPair:
    """One measured pilot pair: both sides' results, the pair's wall time, its placement (a duet: base's CPU;
    ABBA: 0 when base went first), and whether it was a TTFT-only pair (one output token: TTFT's noise alone)."""

    base: Any
    head: Any
    wall_s: float
    placement: int
    ttft_only: bool = False


def pair_logs(pairs: list[PilotPair], length: int | None = None) -> tuple[dict[str, Any], dict[str, Any], float]:
    """(log ratios {"tpot", "ttft"}, their placements {"tpot", "ttft"}, median full pair's seconds) of pilot pairs:
    TPOT's mean gap over the first ``length`` tokens of the full pairs (compare's gaps statistic cut there: what a
    run of that many tokens a request would measure; None: all), every pair's TTFT, and a full pair's time cut
    there too. A full pair whose sides lack 3 stamped tokens says nothing of TPOT."""
    import numpy as np

    logs: dict[str, list[float]] = {"tpot": [], "ttft": []}
    where: dict[str, list[int]] = {"tpot": [], "ttft": []}
    secs = []
    for p in pairs:
        if p.base.ttft_ms and p.head.ttft_ms and p.base.ttft_ms > 0 and p.head.ttft_ms > 0:
            logs["ttft"].append(math.log(p.head.ttft_ms / p.base.ttft_ms))
            where["ttft"].append(p.placement)
        bt, ht = p.base.token_times_ms, p.head.token_times_ms
        m = min(len(bt), len(ht), length or len(bt)) - 1
        if p.ttft_only or m < 2:
            continue
        gb, gh = (bt[m] - bt[0]) / m, (ht[m] - ht[0]) / m
        if gb <= 0 or gh <= 0:
            continue
        logs["tpot"].append(math.log(gh / gb))
        where["tpot"].append(p.placement)
        # the pair ends with its later side: cut at token m, each side ends (its last stamp - stamp m) sooner
        cut = min(float(bt[-1] - bt[m]), float(ht[-1] - ht[m])) / 1000
        secs.append(max(p.wall_s - cut, 1e-3))
    return ({k: np.array(v) for k, v in logs.items()}, {k: np.array(v) for k, v in where.items()},
            float(np.median(secs)) if secs else math.nan)  # fmt: skip


class Noise(Protocol):
    """How a design's minimum detectable change is projected: ``metric`` "tpot" or "ttft"."""

    @property
    def source(self) -> str: ...

    def mdc_pct(self, metric: str, processes: int, pairs_per_process: float, quantile: float = 0.5) -> float: ...


@dataclass(frozen=True)
class PriorNoise:
    """The normal model with fixed components (s_b, s_w) a metric: :data:`PRIORS`, another machine's figures."""

    tpot: tuple[float, float]
    ttft: tuple[float, float]
    source: str = "prior"

    def mdc_pct(self, metric: str, processes: int, pairs_per_process: float, quantile: float = 0.5) -> float:
        """The normal model's MDC (``quantile`` is not modelled: the priors are no run's own figures)."""
        from llmbench.analysis.variance import projected_mdc_pct

        s_b, s_w = self.tpot if metric == "tpot" else self.ttft
        return projected_mdc_pct(s_b**2, s_w**2, processes, pairs_per_process)


class PilotNoise:
    """This CPU's noise, from the pilot's pairs: each pair's log ratio (head over base) of TTFT and of TPOT's mean
    gap, :func:`~llmbench.analysis.variance.winsorized` as compare takes them and centred on each placement's
    median (a duet's process balances its placements, so a CPU that is slower all run long is no noise). A
    design's MDC is what the run would print: the processes' changes, balanced medians of pairs drawn from these
    (:func:`~llmbench.analysis.variance.balanced_median_variance`), plus ``s_b`` between processes, under
    :func:`~llmbench.analysis.variance.expected_mdc_pct`. One process shows no s_b: ``s_b`` is assumed
    (:data:`BETWEEN_PRIOR` in a run)."""

    source = "pilot"

    def __init__(self, logs: dict[str, Any], placements: dict[str, Any], s_b: dict[str, float]) -> None:
        import numpy as np

        from llmbench.analysis.variance import winsorized

        self.logs: dict[str, Any] = {}
        for metric, values in logs.items():
            where = np.asarray(placements[metric])
            x = winsorized(np.asarray(values, dtype=float))
            for p in np.unique(where):
                x[where == p] -= np.median(x[where == p])
            self.logs[metric] = x
        self.s_b = s_b
        self._v: dict[tuple[str, int], float] = {}

    def pairs(self, metric: str) -> int:
        return int(self.logs[metric].size)

    def sd_pct(self, metric: str) -> float:
        """The pairs' robust sd (%), 1.4826 MAD of their centred log ratios: what the status line says."""
        import numpy as np

        x = self.logs[metric]
        return 100.0 * math.expm1(1.4826 * float(np.median(np.abs(x - np.median(x)))))

    def variance(self, metric: str, pairs: float) -> float:
        """A process's change's variance from its pairs' noise, at ``pairs`` pairs a process (simulated up to
        :data:`SIMULATED_PAIRS`, then scaled as 1 / m)."""
        from llmbench.analysis.variance import balanced_median_variance

        m = max(1, round(pairs))
        k = min(m, SIMULATED_PAIRS)
        if (metric, k) not in self._v:
            self._v[(metric, k)] = balanced_median_variance(self.logs[metric], k)
        return self._v[(metric, k)] * k / m

    def mdc_pct(self, metric: str, processes: int, pairs_per_process: float, quantile: float = 0.5) -> float:
        """The MDC a run of this design prints at ``quantile`` of its runs (0.5: the median run)."""
        from llmbench.analysis.variance import expected_mdc_pct

        v = self.variance(metric, pairs_per_process)
        return expected_mdc_pct(self.s_b[metric] ** 2, v, processes, quantile)


def pilot_noise(pairs: list[PilotPair], length: int, prior: dict[str, tuple[float, float]]) -> Noise:
    """:class:`PilotNoise` from ``pairs`` cut to ``length`` tokens, its between-process part
    :data:`BETWEEN_PRIOR` (one process can't show it); ``prior``'s normal model when fewer than 4 pairs could say
    (a worker without stamps)."""
    logs, where, _ = pair_logs(pairs, length)
    if logs["tpot"].size < 4 or logs["ttft"].size < 4:
        return PriorNoise(prior["tpot"], prior["ttft"])
    return PilotNoise(logs, where, BETWEEN_PRIOR)


def projected_range(noise: Noise, c: Any) -> dict[str, list[float]] | None:
    """{metric: [low, high]}: the MDC that :data:`RANGE_QUANTILES` of runs of design ``c`` (a
    :class:`~llmbench.drivers.ab_budget.Choice`) would print (10% of
    them under low, 10% above high); None for the priors' model."""
    if not isinstance(noise, PilotNoise):
        return None
    m = {"tpot": c.pairs / c.processes, "ttft": (c.pairs + c.ttft_pairs) / c.processes}
    return {k: [round(noise.mdc_pct(k, c.processes, m[k], q), 3) for q in RANGE_QUANTILES] for k in m}


def range_text(spread: dict[str, list[float]] | None, metric: str) -> str:
    if spread is None:
        return ""
    low, high = spread[metric]
    return f" ({low:.1f}-{high:.1f} in 8 runs of 10)"


def noise_text(noise: Noise) -> str:
    if not isinstance(noise, PilotNoise):
        return "; noise: another machine's figures"
    return (f"; a pair varied {noise.sd_pct('tpot'):.1f}% (TPOT), {noise.sd_pct('ttft'):.1f}% (TTFT) in "
            f"{noise.pairs('tpot')} pilot pairs")  # fmt: skip


def noise_record(noise: Noise) -> dict[str, Any]:
    """The noise the projection used, for the run JSON."""
    if not isinstance(noise, PilotNoise):
        return {"source": noise.source}
    return {"source": noise.source, "pairs": noise.pairs("tpot"),
            "sd_within_pct": {m: round(noise.sd_pct(m), 3) for m in ("tpot", "ttft")},
            "sd_between_prior_pct": {m: round(100 * v, 3) for m, v in noise.s_b.items()}}  # fmt: skip
