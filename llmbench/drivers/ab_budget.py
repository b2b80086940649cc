"""``ab --budget``: the design (processes a side, full pairs, TTFT-only pairs) that fills a wall-time budget with
the smallest minimum detectable change (MDC). Full pairs go round the prompts, the last round partly when the
time ends within it.

Where the noise is decides what to buy (:mod:`llmbench.analysis.variance`): a pair's log change varies between
processes (``s_b``: memory layout, where the weights landed) and between pairs within a process (``s_w``). With N
processes of m pairs each, the interval over the processes' own changes has half-width

    MDC(N, m) = t(0.975, N - 1) * sqrt((s_b^2 + s_w^2 / m) / N)

so pairs beyond s_w^2 / s_b^2 per process buy little, and processes cost a start-up and a warm-up each. TPOT's
MDC follows the full pairs; TTFT's follows full and TTFT-only pairs together (one number per request: more
requests, not longer ones). The costs are measured here, on this run's own workers: process 0's start, and
pilot pairs on it, untimed for the runs (a first pair, two warm full pairs, the lower priced, a TTFT-only pair).
A later process replays the warm-ups cut to their prefill (one output token) where both sides' workers can: a new
exec'd worker's first request carried +1.0% over a warm one and +0.0% after such a warm-up, which took 0.23 s where
a full one took 4.4 s (benchmarks/README.md, ``fork_probe.py``); it is priced as a TTFT-only pair. A start that
read the weights and libraries from storage (a fresh runner's cold file cache) is no later process's cost: process 0
then starts again and the plan prices that start (issue 47: the cold start, 23 s where later ones took 5, had planned a
fresh runner's run at 9 processes of ~2 pairs and a printed MDC of 2.1%). The variance components are this
machine's from the gate study (benchmarks/README.md, "The gate's precision"), the defaults below. The design
minimizes the larger of MDC_TPOT / 1.5% and MDC_TTFT / 3% (the gate's targets) within the budget, among designs
that give every process at least 3 full pairs (a median of fewer is thrown by one outlier pair), 5% held back for
the end and 2.5 s for each switch of processes (measured here: a 5-minute duet planned without it took 5.5).
Pairs are priced at :data:`PAIR_MARGIN` times the pilot's (one pair is a noisy price). With ``--spawn fork`` a
later process is forked from process 0 (:mod:`llmbench.backends.pool`), and a trial fork on each side, forked,
prepared and closed, prices its start.
"""

from __future__ import annotations

import asyncio
import math
import re
import time
from dataclasses import dataclass, replace
from typing import Any

from llmbench.core.errors import UserError
from llmbench.drivers.ab_projection import (
    Noise,
    PilotPair,
    PriorNoise,
    noise_record,
    noise_text,
    pilot_noise,
    projected_range,
    range_text,
)
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
TARGETS_PCT = (1.5, 3.0)  # TPOT, TTFT: what the design aims at on a CPU without bfloat16 in hardware (AVX2)
# ... and on one with it (AVX-512 BF16, AMX): faster, steadier pairs buy a tighter target (issue 62)
TARGETS_BF16_PCT = (1.0, 2.0)
# the pilot's pairs that measure this CPU's pair-to-pair noise for the projection (its warm pairs among them): as
# many as fit in NOISE_SHARE of the budget, at least NOISE_MIN_PAIRS, at most NOISE_MAX_PAIRS. A sd from n pairs is
# off by ~1 / sqrt(2 (n - 1)): 16% at 20 pairs, against the +-25% the projection answers for
NOISE_SHARE = 0.05
NOISE_MIN_PAIRS = 8
NOISE_MAX_PAIRS = 40
# the design is chosen for the MDC this share of its runs would print at most (the projection printed is the median
# run's, with the 10-90% range): with 4 processes a run's MDC scatters 0.47-1.71x the median's, with 16 0.74-1.30x
PLAN_QUANTILE = 0.8
MAX_PROCESSES = 32
MAX_TTFT_PAIRS = 10_000  # a plan holds every pair: bounded, whatever a pilot measured
RESERVE = 0.05  # of the budget, held back: the end's probe, the saving, the closing
SWITCH_S = 2.5  # per later process beyond its start and warm-ups: the previous one's exit, the first pair's set-up
# the same for a forked process (--spawn fork): from the last pair of one to the first of the next took 0.46-0.68 s
# here, its prefill warm-up (0.22-0.24 s) and its fork to prepared (0.01 s) included (the Xeon, 2026-12-06)
SWITCH_FORK_S = 0.5
# the pilot times one pair of each kind, and a run's pairs took 0.90-1.14x that on average (median 1.02; 48 fresh-
# runner runs on the Xeon, 2026-12-05/06): priced at 1.1x, a run ends within its budget, the 5% reserve meeting the
# rest. Unpriced, 2 of 9 exec'd runs took 5.02 minutes of 5 and 3 of 9 forked ones 5.22-5.3 (an exec'd run's
# switches, SWITCH_S ~1.5 s above a measured one, had absorbed most of it before)
PAIR_MARGIN = 1.1
# the pilot's warm pairs; the plan prices the lower (:func:`pilot`: a transient slows a pair, never speeds one). The
# margin above was measured when the pilot timed one warm pair (benchmarks/README.md: the two pairs' spread)
WARM_PAIRS = 2
# a process start that read more than this from storage (not the page cache) found the file cache cold: the weights
# and libraries (~1 GB for the job's worker) came from disk, as on a fresh runner; a warm start reads ~0
COLD_READ_MB = 32.0
# a process's change is the median of its pairs, and a median resists an outlier pair only from 3 on (of 1 it is
# that pair, of 2 their mean): the first fresh-runner A/A had 15 processes of 1.33 pairs, "the interval is 9.7x the
# pairs' spread"; the Xeon's 30 fresh-runner runs, their own pairs dealt to each floor's designs, printed TTFT's
# MDC at 0.67% (at most 1.71%) with at least 3 a process where at least 2 gave 1.20% (2.93%), TPOT's at 0.82-0.83%
# either way (benchmarks/regroup.py); the planner keeps at least this many
MIN_PAIRS_PER_PROCESS = 3


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
    """Measured seconds: a process pair's start, a new process's warm-up (its first pair), a full pair (warm), a
    TTFT-only pair; and the margin a switch of processes takes beyond them."""

    start_s: float
    warmup_s: float
    pair_s: float
    ttft_pair_s: float
    switch_s: float = SWITCH_S  # beyond the start and the warm-ups (SWITCH_FORK_S for a forked process)


@dataclass(frozen=True)
class Choice:
    """A design :func:`best_design` chose: ``processes`` a side, ``pairs`` full pairs in all (``rounds`` of the
    prompts, the last one partly when ``pairs`` is not a whole number of rounds), ``ttft_pairs``, the projected
    MDCs (%), the fewest full pairs a process gets; ``instead``: the design the variance components alone scored
    best, when it gave a process fewer than :data:`MIN_PAIRS_PER_PROCESS` full pairs (so it was not taken)."""

    processes: int
    pairs: int
    rounds: int
    ttft_pairs: int
    mdc_tpot_pct: float
    mdc_ttft_pct: float
    pairs_per_process: int
    instead: Choice | None = None

    def why(self) -> str | None:
        """One line: why the design is not the one the variance components alone scored best; None when it is."""
        if self.instead is None:
            return None
        o = self.instead
        return (f"{o.processes} processes would give a process {o.pairs_per_process} full pair(s), and one outlier "
                f"pair would throw its median: {self.processes} processes of at least "
                f"{self.pairs_per_process} pairs instead (projected MDC TPOT {o.mdc_tpot_pct:.1f}% -> "
                f"{self.mdc_tpot_pct:.1f}%, TTFT {o.mdc_ttft_pct:.1f}% -> {self.mdc_ttft_pct:.1f}%)")  # fmt: skip


def cpu_targets(flags: set[str] | None = None) -> tuple[float, float]:
    """The (TPOT, TTFT) MDCs (%) a budget aims at on this CPU: :data:`TARGETS_BF16_PCT` where bfloat16 is in
    hardware (AVX-512 BF16 or AMX: the Xeon, Zen 4), else :data:`TARGETS_PCT` (an AVX2-only CPU)."""
    from llmbench.machine.envinfo import cpu_flags

    return TARGETS_BF16_PCT if (cpu_flags() if flags is None else flags) & {"avx512_bf16", "amx_bf16"} else TARGETS_PCT


def best_design(
    budget_s: float, spent_s: float, costs: Costs, n_prompts: int, warmup: int, max_processes: int = MAX_PROCESSES,
    prior_tpot: tuple[float, float] = PRIOR_TPOT, prior_ttft: tuple[float, float] = PRIOR_TTFT,
    min_pairs: int = MIN_PAIRS_PER_PROCESS, noise: Noise | None = None, targets: tuple[float, float] = TARGETS_PCT,
) -> Choice:  # fmt: skip
    """The design that fits ``budget_s`` after ``spent_s`` with the smallest max(MDC / target) among those that
    give every process at least ``min_pairs`` full pairs (the best of all when none does; benchmarks/regroup.py
    tries other floors); at
    least 2 processes and 1 round. Process 0 is started and warm already (the pilot warmed it); each later one
    costs a start, a switch and ``warmup`` warm-up pairs. UserError when even 2 processes of one round don't
    fit. ``noise``: how a design's MDC is projected (:class:`PilotNoise`: this CPU's pilot); without it the normal
    model of ``prior_tpot`` / ``prior_ttft``. ``targets``: the (TPOT, TTFT) MDCs aimed at (:func:`cpu_targets`)."""
    noise = noise or PriorNoise(prior_tpot, prior_ttft)
    left = budget_s * (1 - RESERVE) - spent_s
    best: dict[bool, tuple[float, Choice]] = {}  # enough pairs a process? -> (score, choice)
    for n in range(2, max_processes + 1):
        room = left - (n - 1) * (costs.start_s + costs.switch_s + warmup * costs.warmup_s) - warmup * costs.pair_s
        # full pairs fill the room, the last round partly (whole rounds left up to a round's time unspent: a third
        # of the pairs the Xeon's first runs could have had); at least one round, at most 1,000 (a pair measured at
        # (nearly) no cost must not make the plan endless)
        most = max(n_prompts, min(1_000 * n_prompts, int(room // max(costs.pair_s, 1e-6))))
        for full in sorted({most, *range(n_prompts, most + 1, max(1, (most - n_prompts) // 50))}):  # ~50 at most
            rest = room - full * costs.pair_s
            if rest < 0:
                break
            shorts = min(MAX_TTFT_PAIRS, int(rest // costs.ttft_pair_s)) if costs.ttft_pair_s > 0 else 0
            mt = noise.mdc_pct("tpot", n, full / n)
            mf = noise.mdc_pct("ttft", n, (full + shorts) / n)
            # scored by the MDC 4 runs in 5 stay under: a design of few processes prints an MDC that scatters
            score = max(noise.mdc_pct("tpot", n, full / n, PLAN_QUANTILE) / targets[0],
                        noise.mdc_pct("ttft", n, (full + shorts) / n, PLAN_QUANTILE) / targets[1])  # fmt: skip
            enough = full // n >= min_pairs
            if enough not in best or score < best[enough][0]:
                rounds = -(-full // n_prompts)
                best[enough] = (score, Choice(n, full, rounds, shorts, mt, mf, full // n))
    if not best:
        need = spent_s + costs.start_s + costs.switch_s + 2 * warmup * costs.warmup_s + n_prompts * costs.pair_s
        raise UserError(f"--budget {budget_s:g}s is too short here: 2 processes and one round of the "
                        f"{n_prompts} prompts need about {need / (1 - RESERVE):.0f} s")  # fmt: skip
    if True not in best:
        return best[False][1]
    if False in best and best[False][0] < best[True][0]:
        return replace(best[True][1], instead=best[False][1])
    return best[True][1]


@dataclass
class Pilot:
    """What :func:`pilot` measured: the first pair's seconds, the warm full pairs' seconds, a TTFT-only pair's,
    and every warm pair with its results (the noise pairs among them)."""

    first_s: float
    warm_s: list[float]
    ttft_s: float
    pairs: list[PilotPair]


async def measure_pair(
    live: list[Any], reqs: list[Any], stop: Any, duet: bool, head_first: bool
) -> tuple[float, list[Any]]:
    """(seconds, [base result, head result]) of one pair: both at once (a duet) or one side then the other."""
    if duet:
        t = time.perf_counter()
        results = await asyncio.gather(*(w.measure(r, stop, 0.0) for w, r in zip(live, reqs, strict=True)))
        return time.perf_counter() - t, list(results)
    order = [1, 0] if head_first else [0, 1]
    results, took = [None, None], 0.0
    for k in order:
        t = time.perf_counter()
        results[k] = await live[k].measure(reqs[k], stop, 0.0)
        took += time.perf_counter() - t
    return took, results


async def pilot(
    backends: list[Any], prompts: PromptSet, duet: tuple[int, int] | None, noise_s: float = 0.0
) -> Pilot:  # fmt: skip
    """Pairs on the live processes, measured as the design will (ABBA: one side then the other; duet: both at
    once), untimed for the runs (kept nowhere): a first pair, :data:`WARM_PAIRS` warm pairs, a TTFT-only pair,
    then more full pairs for ``noise_s`` seconds (:data:`NOISE_MIN_PAIRS` to :data:`NOISE_MAX_PAIRS` warm pairs in
    all), going round the prompts from the last, the placements taking turns (a duet's CPUs swap; ABBA's order).
    A process's first request pays for what it sets up once (measured here: 9 s, where later pairs took 7), so it
    is what a new process's warm-up costs, and the warm pairs after it are what a measured pair costs: the plan
    prices the lower (a transient slows a pair, never speeds one; one pair taken 1.5x slow by a command run beside
    it once planned a run of 3.35 minutes of 5 and a TTFT MDC of 2.2%)."""
    from llmbench.core.process import Stop

    stop = Stop()
    live = [getattr(b, "live", b) for b in backends]
    n = len(prompts.prompts)

    def reqs(j: int, short: bool, turn: int) -> list[Any]:
        req = prompts.request((n - 1 - j) % n, -1)
        return [replace(req, ttft_only=short, cpu=None if duet is None else duet[(k + turn) % 2]) for k in range(2)]

    warm: list[PilotPair] = []
    turns = {False: 0, True: 0}  # each kind's placements take turns

    async def measured(j: int, short: bool = False) -> float:
        turn = turns[short] % 2
        turns[short] += 1
        wall, (b, h) = await measure_pair(live, reqs(j, short, turn), stop, duet is not None, turn == 1)
        if b is not None and h is not None:  # None: a side measured nothing (stopped)
            warm.append(PilotPair(b, h, wall, duet[turn] if duet is not None else turn, short))
        return wall

    def full_pairs() -> int:
        return sum(not p.ttft_only for p in warm)

    first_s = await measured(0)
    warm.clear()  # the first pair prices a warm-up, it is no sample of the noise
    walls = [await measured(j) for j in range(1, WARM_PAIRS + 1)]
    j = WARM_PAIRS + 1
    ttft_s = await measured(j, True)
    t0 = time.perf_counter()
    # the noise pairs: a full pair and a TTFT-only one in turn (a TTFT-only pair costs a prefill, and the run's
    # TTFT row pools both kinds)
    while noise_s > 0 and full_pairs() < NOISE_MAX_PAIRS and j < 4 * NOISE_MAX_PAIRS and (
            full_pairs() < NOISE_MIN_PAIRS or time.perf_counter() - t0 < noise_s):  # fmt: skip
        await measured(j + 1)
        await measured(j + 2, True)
        j += 2
    return Pilot(first_s, walls, ttft_s, warm)


async def warm_start(backends: list[Any]) -> dict[str, Any]:
    """When process 0 read more than :data:`COLD_READ_MB` from storage to start (a cold file cache: a fresh
    runner's first job), it starts again on both sides, at once, so that the plan prices a start as every later
    process will pay it (from the file cache). What was seen and done, for the run JSON."""
    reads = [getattr(b, "start_read_mb", None) for b in backends]
    first_s = max((getattr(b, "start_s", None) or 0.0) for b in backends)
    known = [x for x in reads if x is not None]
    cold = None if not known else max(known) >= COLD_READ_MB
    seen: dict[str, Any] = {"cold_start": cold, "first_start_s": round(first_s, 3),
                            "first_start_read_mb": max(known) if known else None}  # fmt: skip
    if cold:
        await asyncio.gather(*(b.restart() for b in backends))
    return seen


async def choose(
    design: Any, backends: list[Any], prompts: PromptSet, options: RunOptions, spent_s: float,
    duet: tuple[int, int] | None, reporter: Any = None, *, max_processes: int = MAX_PROCESSES,
    earlier: list[PilotPair] | None = None,
) -> Any:  # fmt: skip
    """The design that fills ``design.budget_s`` (:func:`best_design`), from this run's own costs and noise:
    process 0 started again when its first start found a cold file cache (:func:`warm_start`), then a pilot
    (:func:`pilot`) whose pairs (and ``earlier`` ones of the same setup: a calibration's, cut to this run's
    length) project each design's MDC (:class:`PilotNoise`) against this CPU's targets (:func:`cpu_targets`).
    Said in status lines (the design; why the pairs a process gets decided it; what would reach a target the
    budget can't); the costs, the noise, what was seen and the choice go to ``design.plan`` (the run JSON's
    config.ab.budget_plan)."""
    t = time.perf_counter()
    seen = await warm_start(backends)
    p = await pilot(backends, prompts, duet, NOISE_SHARE * design.budget_s)
    first_s, warm_s, ttft_s = p.first_s, p.warm_s, p.ttft_s
    pair_s = min(warm_s)
    start_s = exec_start_s = max((getattr(b, "start_s", None) or spent_s) for b in backends)
    if design.spawn == "fork":  # a later process is forked from process 0: priced by a trial fork on each side
        start_s = max(await asyncio.gather(*(b.time_fork() for b in backends)))
    # a later process replays the warm-ups cut to their prefill where both sides' workers can (a TTFT-only
    # request), priced as a TTFT-only pair; else in full, priced as the pilot's first pair. Not the first pair's
    # extra over a warm one: that is process 0's alone (the Xeon's fresh-runner study: 0.6-3.0 s in the pilot, where
    # a later process took 5.3-5.8 s from the last pair of the one before it, start 4.1-4.9 s included, and its
    # first request's TPOT was +0.2% over its others'); ABBA's two sides take turns, a duet's at once
    prefill = all("max_new_tokens" in getattr(getattr(b, "live", b), "features", ()) for b in backends)
    warmup_s = ttft_s if prefill else first_s
    switch_s = SWITCH_FORK_S if design.spawn == "fork" else SWITCH_S
    costs = Costs(start_s=start_s, warmup_s=warmup_s, pair_s=pair_s * PAIR_MARGIN, ttft_pair_s=ttft_s * PAIR_MARGIN,
                  switch_s=switch_s)  # fmt: skip
    used = spent_s + time.perf_counter() - t  # the restart and the pilot are spent too
    prior = PRIORS["duet" if duet else "ABBA"]
    noise = pilot_noise([*(earlier or []), *p.pairs], options.max_new_tokens, prior)
    targets = cpu_targets()

    def design_for(budget_s: float) -> Choice:
        return best_design(budget_s, used, costs, len(prompts.prompts), options.warmup, max(2, max_processes),
                           prior["tpot"], prior["ttft"], noise=noise, targets=targets)  # fmt: skip

    c = design_for(design.budget_s)
    reach = None if fits(c, targets) else reach_budget(design.budget_s, design_for, targets)
    spread = projected_range(noise, c)
    if reporter is not None:
        cold, replay = "", ""
        forked = f" (forked from process 0; {exec_start_s:.1f} s exec'd)" if design.spawn == "fork" else ""
        if options.warmup:
            replay = f"; a later process's warm-up {warmup_s:.2f} s{' (replayed as its prefill)' if prefill else ''}"
        if seen["cold_start"]:
            cold = (f"; the first start read {seen['first_start_read_mb']:.0f} MB from storage (a cold file cache) "
                    f"and took {seen['first_start_s']:.1f} s, so process 0 started again")  # fmt: skip
        reporter.status(
            f"--budget {design.budget_s:g}s: {c.processes} processes a side, "
            f"{rounds_text(c.pairs, len(prompts.prompts))} + {c.ttft_pairs} TTFT-only pairs (measured here: a "
            f"process start {start_s:.1f} s{forked}{cold}, a new process's first pair {first_s:.2f} s, a pair "
            f"{pair_s:.2f} s, a TTFT-only pair {ttft_s:.2f} s{replay}; projected MDC TPOT {c.mdc_tpot_pct:.1f}%"
            f"{range_text(spread, 'tpot')}, TTFT {c.mdc_ttft_pct:.1f}%{range_text(spread, 'ttft')}{noise_text(noise)})"
        )
        if c.why():
            reporter.status(f"--budget: {c.why()}")
        if not fits(c, targets):
            reporter.status(f"--budget: {short_text(c, targets, reach)}")
    plan = {**seen, "spawn": design.spawn, "start_s": round(start_s, 3), "exec_start_s": round(exec_start_s, 3),
            "first_pair_s": round(first_s, 3), "pair_s": round(pair_s, 3),
            "warm_pairs_s": [round(x, 3) for x in warm_s], "ttft_pair_s": round(ttft_s, 3),
            "warmup_replay": "prefill" if prefill else "full",
            "warmup_s": round(warmup_s, 3), "switch_s": switch_s, "pair_margin": PAIR_MARGIN,
            "spent_s": round(used, 3), **_choice_dict(c), "noise": noise_record(noise), "projected_range_pct": spread,
            "targets_pct": {"tpot": targets[0], "ttft": targets[1]},
            "reach_budget_s": None if reach is None else round(reach), "fits_targets": fits(c, targets),
            "instead": _choice_dict(c.instead) if c.instead else None, "why": c.why()}  # fmt: skip
    return replace(
        design, processes=c.processes, repeats=c.rounds, full_pairs=c.pairs, ttft_pairs=c.ttft_pairs, plan=plan
    )


def fits(c: Choice, targets: tuple[float, float]) -> bool:
    return c.mdc_tpot_pct <= targets[0] and c.mdc_ttft_pct <= targets[1]


def reach_budget(budget_s: float, plan: Any, targets: tuple[float, float]) -> float | None:
    """The shortest budget (a 10% grid up to 8 times ``budget_s``, at most a day) whose design ``plan(budget)``
    projects within both ``targets``; None when none does (another setup, or the noise, must change)."""
    b = budget_s
    while b < min(8 * budget_s, 86400):
        b = min(b * 1.1, 86400)
        if fits(plan(b), targets):
            return b
    return None


def short_text(c: Choice, targets: tuple[float, float], reach: float | None) -> str:
    """The line said before measuring when the projection misses a target: what it expects, what would reach it."""
    missed = [f"{label} {mdc:.1f}% against {target:g}%" for label, mdc, target in
              (("TPOT", c.mdc_tpot_pct, targets[0]), ("TTFT", c.mdc_ttft_pct, targets[1])) if mdc > target]  # fmt: skip
    more = (f"about {math.ceil(reach / 60)} minutes (--budget {math.ceil(reach / 60)}m) would reach "
            "it" if reach is not None else "8 times the budget would not reach it")  # fmt: skip
    return (f"this CPU's noise projects an MDC of {'; '.join(missed)} in this budget: {more}; a faster or steadier "
            "setup (calibrate = true: dtype and request length chosen here) buys more pairs a minute")  # fmt: skip


def rounds_text(pairs: int, n_prompts: int) -> str:
    """``40 pairs (2 rounds of 20 prompts)``, ``27 pairs (1 round of 20 prompts and 7 of the next)``."""
    whole, part = divmod(pairs, n_prompts)
    rounds = f"{whole} round{'s' if whole != 1 else ''} of {n_prompts} prompts"
    return f"{pairs} pairs ({rounds}{f' and {part} of the next' if part else ''})"


def _choice_dict(c: Choice) -> dict[str, Any]:
    return {"processes": c.processes, "pairs": c.pairs, "rounds": c.rounds, "ttft_pairs": c.ttft_pairs,
            "pairs_per_process": c.pairs_per_process, "projected_mdc_tpot_pct": round(c.mdc_tpot_pct, 3),
            "projected_mdc_ttft_pct": round(c.mdc_ttft_pct, 3)}  # fmt: skip


def shortfall(comp: Any, budget_s: float | None, plan: dict[str, Any] | None = None) -> str | None:
    """One line when a ``--budget`` run did not reach the MDC it aims at (``plan``'s targets, else
    :func:`cpu_targets`): what it reached against what was projected before measuring, where a pair's noise was,
    and what buys more; None when it did (or without a budget)."""
    if budget_s is None:
        return None
    plan = plan or {}
    aimed = plan.get("targets_pct") or dict(zip(("tpot", "ttft"), cpu_targets(), strict=True))
    missed = []
    for metric, key, label in (("tpot_ms", "tpot", "TPOT"), ("ttft_ms", "ttft", "TTFT")):
        mdc, target = comp.detectable_pct(metric, comp.spoken_stat(metric)), aimed[key]
        if mdc is None or mdc <= target:
            continue
        v = comp.variance.get(metric)
        noise = ""
        if v:
            noise = (f"; a pair varied {v['sd_within_process_pct']:.1f}% within a process and "
                     f"{v['sd_between_processes_pct']:.1f}% between its {v['processes']} processes")  # fmt: skip
        projected = plan.get(f"projected_mdc_{key}_pct")
        before = "" if projected is None else f", {projected:.1f}% projected before measuring"
        missed.append(f"{label} {mdc:.1f}% against {target:g}% ({before[2:] or 'no projection'}{noise})")
    if not missed:
        return None
    return (f"--budget {budget_s:g}s: the MDC aimed at was not reached on this machine today: {'; '.join(missed)}; "
            "a longer --budget buys more pairs")  # fmt: skip
