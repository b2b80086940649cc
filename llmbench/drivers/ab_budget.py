"""``ab --budget``: the design (processes a side, rounds of the prompts, TTFT-only pairs) that fills a wall-time
budget with the smallest minimum detectable change (MDC).

Where the noise is decides what to buy (:mod:`llmbench.analysis.variance`): a pair's log change varies between
processes (``s_b``: memory layout, where the weights landed) and between pairs within a process (``s_w``). With N
processes of m pairs each, the interval over the processes' own changes has half-width

    MDC(N, m) = t(0.975, N - 1) * sqrt((s_b^2 + s_w^2 / m) / N)

so pairs beyond s_w^2 / s_b^2 per process buy little, and processes cost a start-up and a warm-up each. TPOT's
MDC follows the full pairs; TTFT's follows full and TTFT-only pairs together (one number per request: more
requests, not longer ones). The costs are measured here, on this run's own workers (one pilot pair of each kind
on process 0, untimed, after its start); the variance components are this machine's from the gate study
(benchmarks/README.md, "The gate's precision"), the defaults below. The design minimizes the larger of
MDC_TPOT / 1.5% and MDC_TTFT / 3% (the gate's targets) within the budget, 5% held back for the end and 2.5 s
for each switch of processes (measured here: a 5-minute duet planned without it took 5.5).
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any

from llmbench.core.errors import UserError
from llmbench.options import RunOptions
from llmbench.workloads.prompts import PromptSet

# (s_b, s_w) of a pair's log change, as fractions: measured by the gate study on this project's 2-core VM
# (benchmarks/README.md: TPOT's gaps at 32 tokens, TTFT's median); a machine of another kind differs, and the
# printed MDC is then what to trust
# (benchmarks/README.md, issue 34's pilot: ABBA and duet, 2026-12-01)
PRIORS = {
    "ABBA": {"tpot": (0.02, 0.065), "ttft": (0.02, 0.045)},
    "duet": {"tpot": (0.01, 0.025), "ttft": (0.01, 0.035)},  # the machine's noise lands on both: s_w shrinks
}
PRIOR_TPOT, PRIOR_TTFT = PRIORS["ABBA"]["tpot"], PRIORS["ABBA"]["ttft"]
TARGETS_PCT = (1.5, 3.0)  # TPOT, TTFT: what the design aims at
MAX_PROCESSES = 32
MAX_TTFT_PAIRS = 10_000  # a plan holds every pair: bounded, whatever a pilot measured
RESERVE = 0.05  # of the budget, held back: the end's probe, the saving, the closing
SWITCH_S = 2.5  # per later process beyond its start and warm-ups: the previous one's exit, the first pair's set-up


def parse_budget(text: str) -> float:
    """``--budget``: seconds from ``300``, ``300s``, ``5m``, ``1.5h``; UserError for anything else, a NaN, zero
    or less, or more than a day."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([smh]?)\s*", text or "")
    if not m:
        raise UserError(f"--budget {text!r}: expected a duration such as 300s, 5m or 1h")
    seconds = float(m.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[m.group(2)]
    if not math.isfinite(seconds) or seconds <= 0 or seconds > 86400:
        raise UserError(f"--budget {text!r}: expected more than 0 seconds and at most a day")
    return seconds


@dataclass(frozen=True)
class Costs:
    """Measured seconds: a process pair's start, a warm-up, a full pair, a TTFT-only pair."""

    start_s: float
    warmup_s: float
    pair_s: float
    ttft_pair_s: float


def best_design(
    budget_s: float, spent_s: float, costs: Costs, n_prompts: int, warmup: int, max_processes: int = MAX_PROCESSES,
    prior_tpot: tuple[float, float] = PRIOR_TPOT, prior_ttft: tuple[float, float] = PRIOR_TTFT,
) -> tuple[int, int, int, float, float]:  # fmt: skip
    """(processes, rounds, ttft_pairs, projected TPOT MDC %, projected TTFT MDC %) that fit ``budget_s`` after
    ``spent_s`` with the smallest max(MDC / target); at least 2 processes and 1 round. UserError when even that
    does not fit."""
    from llmbench.analysis.variance import projected_mdc_pct

    left = budget_s * (1 - RESERVE) - spent_s
    best: tuple[float, tuple[int, int, int, float, float]] | None = None
    for n in range(2, max_processes + 1):
        # process 0 is started already; every later one costs a start and its warm-ups (both sides at once)
        room = left - (n - 1) * (costs.start_s + SWITCH_S) - n * warmup * costs.warmup_s
        # at most 1,000 rounds: a pair measured at (nearly) no cost must not make the plan endless
        rounds = max(1, min(1_000, int(room // (n_prompts * max(costs.pair_s, 1e-6)))))
        for r in sorted({rounds, *range(1, rounds + 1, max(1, rounds // 50))}):  # about 50 candidates at most
            rest = room - r * n_prompts * costs.pair_s
            if rest < 0:
                break
            shorts = min(MAX_TTFT_PAIRS, int(rest // costs.ttft_pair_s)) if costs.ttft_pair_s > 0 else 0
            full = r * n_prompts
            mt = projected_mdc_pct(prior_tpot[0] ** 2, prior_tpot[1] ** 2, n, full / n)
            mf = projected_mdc_pct(prior_ttft[0] ** 2, prior_ttft[1] ** 2, n, (full + shorts) / n)
            score = max(mt / TARGETS_PCT[0], mf / TARGETS_PCT[1])
            if best is None or score < best[0]:
                best = (score, (n, r, shorts, mt, mf))
    if best is None:
        need = spent_s + costs.start_s + 2 * warmup * costs.warmup_s + n_prompts * costs.pair_s
        raise UserError(f"--budget {budget_s:g}s is too short here: 2 processes and one round of the "
                        f"{n_prompts} prompts need about {need / (1 - RESERVE):.0f} s")  # fmt: skip
    return best[1]


async def _timed(coros: list[Any]) -> float:
    t = time.perf_counter()
    await asyncio.gather(*coros)
    return time.perf_counter() - t


async def pilot(backends: list[Any], prompts: PromptSet, duet: tuple[int, int] | None) -> tuple[float, float]:
    """(full pair s, TTFT-only pair s): one of each on the live processes, measured as the design will (ABBA:
    one side then the other; duet: both at once). Untimed for the runs (warm-up requests, kept nowhere)."""
    from llmbench.core.process import Stop

    stop = Stop()
    live = [getattr(b, "live", b) for b in backends]
    req = prompts.request(len(prompts.prompts) - 1, -1)
    out = []
    for short in (False, True):
        reqs = [replace(req, ttft_only=short, cpu=None if duet is None else duet[k]) for k in range(len(live))]
        if duet is not None:
            out.append(await _timed([w.measure(r, stop, 0.0) for w, r in zip(live, reqs, strict=True)]))
        else:
            out.append(sum([await _timed([w.measure(r, stop, 0.0)]) for w, r in zip(live, reqs, strict=True)]))
    return out[0], out[1]


async def choose(
    design: Any, backends: list[Any], prompts: PromptSet, options: RunOptions, spent_s: float,
    duet: tuple[int, int] | None, reporter: Any = None, *, max_processes: int = MAX_PROCESSES,
) -> Any:  # fmt: skip
    """The design that fills ``design.budget_s`` (:func:`best_design`), from this run's own costs; said in one
    status line."""
    pair_s, ttft_s = await pilot(backends, prompts, duet)
    start_s = max((getattr(b, "start_s", None) or spent_s) for b in backends)
    # a new process's warm-ups: ABBA's two sides take turns (pair_s is one request of each), a duet's at once
    costs = Costs(start_s=start_s, warmup_s=pair_s, pair_s=pair_s, ttft_pair_s=ttft_s)
    # the pilot itself is spent too
    used = spent_s + pair_s + ttft_s
    prior = PRIORS["duet" if duet else "ABBA"]
    n, r, s, mt, mf = best_design(design.budget_s, used, costs, len(prompts.prompts), options.warmup,
                                  max(2, max_processes), prior["tpot"], prior["ttft"])  # fmt: skip
    if reporter is not None:
        reporter.status(
            f"--budget {design.budget_s:g}s: {n} processes a side, {r} round(s) of {len(prompts.prompts)} prompts "
            f"+ {s} TTFT-only pairs (measured here: a process start {start_s:.1f} s, a pair {pair_s:.2f} s, a "
            f"TTFT-only pair {ttft_s:.2f} s; projected MDC TPOT {mt:.1f}%, TTFT {mf:.1f}%)"
        )
    return replace(design, processes=n, repeats=r, ttft_pairs=s)


def shortfall(comp: Any, budget_s: float | None) -> str | None:
    """One line when a ``--budget`` run did not reach the MDC it aims at (TARGETS_PCT): what it reached, where
    a pair's noise was, and what buys more; None when it did (or without a budget)."""
    if budget_s is None:
        return None
    missed = []
    for metric, label, target in (("tpot_ms", "TPOT", TARGETS_PCT[0]), ("ttft_ms", "TTFT", TARGETS_PCT[1])):
        mdc = comp.detectable_pct(metric, comp.spoken_stat(metric))
        if mdc is None or mdc <= target:
            continue
        v = comp.variance.get(metric)
        noise = ""
        if v:
            noise = (f" (a pair varied {v['sd_within_process_pct']:.1f}% within a process and "
                     f"{v['sd_between_processes_pct']:.1f}% between its {v['processes']} processes)")  # fmt: skip
        missed.append(f"{label} {mdc:.1f}% against {target:g}%{noise}")
    if not missed:
        return None
    return (f"--budget {budget_s:g}s: the MDC aimed at was not reached on this machine today: {'; '.join(missed)}; "
            "a longer --budget buys more pairs")  # fmt: skip
