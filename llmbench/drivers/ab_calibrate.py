"""``ab --budget`` with ``calibrate = true``: the workers' setup chosen for this CPU before the budget is planned.

Why: a gate's precision is pairs a minute times the steadiness of a pair, and both depend on the CPU. The job's
bfloat16 workers were chosen on an AVX2 EPYC and tuned on a Xeon with AMX; on a Zen 4 EPYC (AVX-512 BF16, no AMX)
one thread took 148 ms a token in bfloat16 and 45 in float32 with int8 dynamic quantization, so the five minutes
bought a third of the pairs they could (issue 62).

How: each candidate setup (:func:`candidates`: dtype, quantization, threads) starts on both sides as the run will,
warms up on a TTFT-only pair and a pair of the shortest length (a process's first request pays for what it sets up
once: ``ab_budget.pilot``), and times one more: how fast it is. Only the fastest goes on: it
measures full pairs of the longest length (:data:`LENGTHS`), a TTFT-only pair after each, for :data:`SCREEN_SHARE`
of the budget, as the run measures them (duet or ABBA, placements taking turns). Speed decides the setup, not the
noise of a few pairs: the first version also measured each candidate's noise (3-4 pairs) and chose the quietest,
which chose plain float32 on a pair sd of 0.4% and then measured 4.8% (the lowest of a few noisy estimates is
luck), in 100 s of 300. Each length is then planned for the fastest setup as the budget would plan it
(``ab_budget.best_design``): its measured start, its pairs' time and noise cut to that length (the same pairs, so
the lengths are compared on the same moments' noise; :class:`~llmbench.drivers.ab_projection.PilotNoise`), over the
time the calibration leaves; the length whose projected MDCs are the smallest against this CPU's targets wins (the
larger of MDC_TPOT / target and MDC_TTFT / target). The first candidate's start may have read the libraries from
storage (a fresh runner's cold file cache): it is priced as measured, not started again (the run's own start is
priced again). Both sides get the same setup: its flags are appended to both worker command lines (a later option
wins), and the length is the run's ``max_new_tokens``. The choice, every candidate's measurements and the scores go
to ``config.ab.budget_plan.calibration``, and its noise pairs join the run's pilot. A fixed setup (``calibrate =
false``, the default) is measured as given.
"""

from __future__ import annotations

import math
import shlex
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from llmbench.core.errors import UserError
from llmbench.drivers.ab_budget import (
    NOISE_MAX_PAIRS,
    NOISE_SHARE,
    PAIR_MARGIN,
    PRIORS,
    SWITCH_S,
    WARM_PAIRS,
    Costs,
    best_design,
    cpu_targets,
    measure_pair,
)
from llmbench.drivers.ab_projection import PilotPair, pair_logs, pilot_noise
from llmbench.options import RunOptions
from llmbench.workloads.prompts import PromptSet


@dataclass(frozen=True)
class WorkerSetup:
    """A worker setup the calibration may choose: ``llmbench worker``'s --dtype, --quantize and --threads."""

    dtype: str
    quantize: str = "none"
    threads: int = 1

    def flags(self) -> list[str]:
        return ["--dtype", self.dtype, "--quantize", self.quantize, "--threads", str(self.threads)]

    def label(self) -> str:
        q = "" if self.quantize == "none" else f"+{self.quantize}"
        return f"{self.dtype}{q}, {self.threads} thread{'s' if self.threads != 1 else ''}"


# the fastest on a CPU without AMX first (Zen 4: 45 ms a token against 139-153), so that the slow ones are seen
# slow after one pair; bfloat16 before float32 (on AMX and AVX-512 BF16 it is the faster of the two)
CANDIDATES = (WorkerSetup("float32", "int8-dynamic"), WorkerSetup("bfloat16"), WorkerSetup("float32"))
# output tokens a request; 3 is the gaps statistic's least, 8 gives it 7 gaps. 32 (the job's old length) won 1 of 3
# calibrations on the Zen 4 (2026-12-07; 8 and 16 the others) and doubles every measured pair's time
LENGTHS = (8, 16)
SCREEN_SHARE = 0.03  # of the budget: the fastest candidate's noise pairs (its sd is the length's to decide)
SCREEN_MIN_PAIRS = 3


@dataclass
class Measured:
    """One candidate as the calibration saw it: its start, its TTFT-only pair, its full pairs, or why dropped."""

    setup: WorkerSetup
    start_s: float
    ttft_pair_s: float
    pairs: list[PilotPair] = field(default_factory=list)
    dropped: str | None = None
    first_pair_s: float | None = None  # its first full pair, of the shortest length: how fast, against the others


@dataclass
class Calibration:
    """What :func:`calibrate` chose (``setup``, ``length``), from what (``measured``, ``scores``), in how long."""

    setup: WorkerSetup
    length: int
    measured: list[Measured]
    scores: list[dict[str, Any]]
    spent_s: float

    def command(self, side: str) -> str:
        """``side``'s worker command line with the chosen setup's flags appended (a later option wins)."""
        return shlex.join([*shlex.split(side), *self.setup.flags()])

    def pairs(self) -> list[PilotPair]:
        """The chosen setup's measured pairs (at the longest length: :func:`pilot_noise` cuts them)."""
        return next(m.pairs for m in self.measured if m.setup == self.setup)

    def record(self) -> dict[str, Any]:
        """For the run JSON (config.ab.budget_plan.calibration)."""
        return {"setup": {"dtype": self.setup.dtype, "quantize": self.setup.quantize, "threads": self.setup.threads},
                "max_new_tokens": self.length, "spent_s": round(self.spent_s, 3),
                "candidates": [{"setup": m.setup.label(), "start_s": round(m.start_s, 3),
                                "ttft_pair_s": round(m.ttft_pair_s, 3),
                                "first_pair_s": None if m.first_pair_s is None else round(m.first_pair_s, 3),
                                "pairs": len(m.pairs),
                                "pair_s": [round(p.wall_s, 3) for p in m.pairs if not p.ttft_only],
                                "dropped": m.dropped}
                               for m in self.measured],
                "scores": self.scores}  # fmt: skip

    def text(self) -> str:
        """The status line: each candidate's pair and noise, and the choice."""
        parts = []
        for s in self.scores:
            parts.append(f"{s['setup']} x {s['max_new_tokens']} tokens: a pair {s['pair_s']:.2f} s, MDC TPOT "
                         f"{s['mdc_tpot_pct']:.1f}% TTFT {s['mdc_ttft_pct']:.1f}%")  # fmt: skip
        dropped = [f"{m.setup.label()} {m.dropped}" for m in self.measured if m.dropped]
        return (f"calibration ({self.spent_s:.0f} s): {self.setup.label()}, {self.length} tokens a request chosen "
                f"({'; '.join(parts)}{'; dropped: ' + '; '.join(dropped) if dropped else ''})")  # fmt: skip


def candidates(duet: bool, native: set[str] | None = None) -> list[WorkerSetup]:
    """:data:`CANDIDATES`, on 1 thread a side for a duet (a side has one CPU), also on every CPU this process may
    use for ABBA (one side measures at a time); plain float32 only where bfloat16 is not computed in hardware
    (``native``: :func:`~llmbench.engines.hf.models.cpu_native_dtypes`; where it is, bfloat16 was as fast: 139
    against 153 ms a token on the Zen 4)."""
    import os

    if native is None:
        from llmbench.engines.hf.models import cpu_native_dtypes

        native = cpu_native_dtypes()
    threads = [1] if duet else sorted({1, len(os.sched_getaffinity(0))})
    kept = [c for c in CANDIDATES if not (c.dtype == "float32" and c.quantize == "none" and "bfloat16" in native)]
    return [WorkerSetup(c.dtype, c.quantize, t) for t in threads for c in kept]


# the sides' backends from their command lines, started (``ab``'s: this layer can't import the driver that calls it)
OpenSides = Callable[[dict[str, str], RunOptions], Awaitable[list[Any]]]


class _Sides:
    """One candidate's two started workers, and its pairs as the run measures them (duet or ABBA)."""

    def __init__(self, backends: list[Any], prompts: PromptSet, duet: tuple[int, int] | None) -> None:
        from llmbench.core.process import Stop

        self.backends, self.prompts, self.duet, self.stop = backends, prompts, duet, Stop()
        self.live = [getattr(b, "live", b) for b in backends]
        self.j = 0

    async def pair(self, short: bool, length: int | None = None, turn: int = 0) -> PilotPair | float:
        """One pair, going round the prompts from the last: its results (a :class:`PilotPair`), or only its
        seconds when a side measured nothing."""
        n = len(self.prompts.prompts)
        req = replace(self.prompts.request((n - 1 - self.j) % n, -1), max_new_tokens=length)
        self.j += 1
        duet = self.duet
        reqs = [replace(req, ttft_only=short, cpu=None if duet is None else duet[(k + turn) % 2]) for k in range(2)]
        wall, (b, h) = await measure_pair(self.live, reqs, self.stop, self.duet is not None, turn == 1)
        if b is None or h is None:
            return wall
        return PilotPair(b, h, wall, self.duet[turn] if self.duet is not None else turn, short)

    async def close(self) -> None:
        for b in self.backends:
            await b.close()


def _seconds(p: PilotPair | float) -> float:
    return p.wall_s if isinstance(p, PilotPair) else p


async def _speed(
    setup: WorkerSetup, sides: dict[str, str], options: RunOptions, prompts: PromptSet, duet: tuple[int, int] | None,
    open_sides: OpenSides,
) -> tuple[Measured, _Sides]:  # fmt: skip
    """A candidate started on both sides, warmed up (a TTFT-only pair, then a short one: a process's first request
    sets up what it needs once), and one timed pair of the shortest length: how fast it is. Its workers stay up
    (the caller closes them)."""
    opts = options.replaced(max_new_tokens=max(LENGTHS))
    try:
        backends = await open_sides({r: shlex.join([*shlex.split(c), *setup.flags()]) for r, c in sides.items()}, opts)
    except UserError as e:
        raise UserError(f"calibrate: the workers would not start as {setup.label()} ({' '.join(setup.flags())} "
                        f"appended to --base and --head): {e}") from None  # fmt: skip
    both = _Sides(backends, prompts, duet)
    try:
        start_s = max((getattr(b, "start_s", None) or 0.0) for b in backends)
        m = Measured(setup, start_s, _seconds(await both.pair(True)))
        await both.pair(False, min(LENGTHS))  # a process's first request sets up what it needs once
        m.first_pair_s = _seconds(await both.pair(False, min(LENGTHS), turn=1))
        return m, both
    except BaseException:
        await both.close()
        raise


async def _noise(m: Measured, both: _Sides, screen_s: float) -> None:
    """The fastest candidate's noise: full pairs of the longest length, a TTFT-only pair after each, the
    placements taking turns, for ``screen_s`` seconds (at least :data:`SCREEN_MIN_PAIRS`), into ``m.pairs``."""
    t0 = time.perf_counter()
    for k in range(2 * NOISE_MAX_PAIRS):
        for short in (False, True):
            p = await both.pair(short, None if short else max(LENGTHS), turn=k % 2)
            if isinstance(p, PilotPair):
                m.pairs.append(p)
        full = sum(not p.ttft_only for p in m.pairs)
        if full >= NOISE_MAX_PAIRS or (full >= SCREEN_MIN_PAIRS and time.perf_counter() - t0 >= screen_s):
            break


def score(
    m: Measured, length: int, budget_s: float, spent_s: float, n_prompts: int, warmup: int, duet: bool,
    targets: tuple[float, float],
) -> dict[str, Any] | None:  # fmt: skip
    """(setup, length)'s plan as the budget would make it after the calibration: its costs and noise measured,
    the run's own start and pilot to come; None when it can't say (no pairs, or too few for a plan)."""
    logs, _, pair_s = pair_logs(m.pairs, length)
    if logs["tpot"].size < SCREEN_MIN_PAIRS or not math.isfinite(pair_s):
        return None
    prior = PRIORS["duet" if duet else "ABBA"]
    noise = pilot_noise(m.pairs, length, prior)
    costs = Costs(start_s=m.start_s, warmup_s=m.ttft_pair_s, pair_s=pair_s * PAIR_MARGIN,
                  ttft_pair_s=m.ttft_pair_s * PAIR_MARGIN, switch_s=SWITCH_S)  # fmt: skip
    # what the run spends before it measures: process 0's start, its pilot (first, warm and noise pairs)
    ahead = m.start_s + (2 + WARM_PAIRS) * pair_s + m.ttft_pair_s + NOISE_SHARE * budget_s
    try:
        c = best_design(budget_s, spent_s + ahead, costs, n_prompts, warmup, noise=noise, targets=targets)
    except UserError:
        return None
    return {"setup": m.setup.label(), "max_new_tokens": length, "pair_s": round(pair_s, 3),
            "processes": c.processes, "pairs": c.pairs, "ttft_pairs": c.ttft_pairs,
            "mdc_tpot_pct": round(c.mdc_tpot_pct, 3), "mdc_ttft_pct": round(c.mdc_ttft_pct, 3),
            "score": round(max(c.mdc_tpot_pct / targets[0], c.mdc_ttft_pct / targets[1]), 4)}  # fmt: skip


async def calibrate(
    sides: dict[str, str], options: RunOptions, prompts: PromptSet, budget_s: float, duet: tuple[int, int] | None,
    open_sides: OpenSides, spent_s: float = 0.0, reporter: Any = None, setups: list[WorkerSetup] | None = None,
    lengths: tuple[int, ...] = LENGTHS,
) -> Calibration:  # fmt: skip
    """The setup and request length that project the smallest MDCs in ``budget_s`` on this CPU (see the module's
    docstring), measured on ``sides``' own worker commands ({role: command line}), each candidate's opened with
    ``open_sides``. UserError when no candidate could be planned."""
    t0 = time.perf_counter()
    targets = cpu_targets()
    measured: list[Measured] = []
    best: tuple[Measured, _Sides] | None = None
    try:
        for setup in setups or candidates(duet is not None):
            if reporter is not None:
                reporter.status(f"calibrate: {setup.label()} ...")
            m, both = await _speed(setup, sides, options, prompts, duet, open_sides)
            measured.append(m)
            fastest = best[0].first_pair_s if best is not None else None
            if fastest is None or (m.first_pair_s or math.inf) < fastest:
                if best is not None:
                    best[0].dropped = f"(a pair {fastest:.2f} s, {m.setup.label()}'s {m.first_pair_s:.2f})"
                    await best[1].close()
                best = (m, both)
            else:
                m.dropped = f"(a pair {m.first_pair_s:.2f} s, {(m.first_pair_s or 0) / fastest:.1f}x the fastest)"
                await both.close()
        if best is not None:
            await _noise(best[0], best[1], SCREEN_SHARE * budget_s)
    finally:
        if best is not None:
            await best[1].close()
    spent = spent_s + time.perf_counter() - t0
    scores = [s for m in measured if m.dropped is None for n in lengths if n <= max(LENGTHS)
              if (s := score(m, n, budget_s, spent, len(prompts.prompts), options.warmup, duet is not None,
                             targets)) is not None]  # fmt: skip
    if not scores:
        raise UserError("calibrate: no candidate setup measured enough pairs to plan the budget with; give a longer "
                        "--budget, or pin the setup (calibrate = false)")  # fmt: skip
    win = min(scores, key=lambda s: (s["score"], -s["max_new_tokens"]))
    setup = next(m.setup for m in measured if m.setup.label() == win["setup"])
    return Calibration(setup, win["max_new_tokens"], measured, scores, spent)
