"""``ab --budget`` with ``calibrate = true``: the workers' setup chosen for this CPU before the budget is planned.

Why: a gate's precision is pairs a minute times the steadiness of a pair, and both depend on the CPU. The job's
bfloat16 workers were chosen on an AVX2 EPYC and tuned on a Xeon with AMX; on a Zen 4 EPYC (AVX-512 BF16, no AMX)
one thread took 148 ms a token in bfloat16 and 45 in float32 with int8 dynamic quantization, so the five minutes
bought a third of the pairs they could (issue 62).

How: each candidate setup (:data:`CANDIDATES`: dtype, quantization, threads) starts on both sides as the run will
and warms up on a TTFT-only pair and a pair of the shortest length (a first decode step sets up its kernels:
bfloat16's first 8-token pair took 5.0 s, its next 1.2). The first candidate's start may have read the libraries
from storage (a fresh runner's cold file cache): it is priced as measured, not started again (that took 12 s of
300 on the Zen 4 for a start ~5 s dearer: the first candidate is the one expected fastest, and the run's own start
is priced again). One pair of the shortest length (:data:`LENGTHS`) says how fast it is: a candidate whose pair took
:data:`SLOWER` times the fastest one's so far is measured no further. The others measure full pairs at the
longest length, a TTFT-only pair after each, for :data:`SCREEN_SHARE` of the budget (at least
:data:`SCREEN_MIN_PAIRS`), as the run measures them (duet or ABBA, placements taking turns). Each (setup, length)
is then planned as the budget would plan it (``ab_budget.best_design``): its measured start, its pairs' time cut to
that length, and its pairs' own noise cut there too (:class:`~llmbench.drivers.ab_budget.PilotNoise`), over the
time the calibration leaves. The one whose projected MDCs are the smallest against this CPU's targets wins (the
larger of MDC_TPOT / target and MDC_TTFT / target). Both sides get the same setup: its flags are appended to both
worker command lines (a later option wins), and the length is the run's ``max_new_tokens``. The choice, every
candidate's measurements and score go to ``config.ab.budget_plan.calibration``. A fixed setup (``calibrate =
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
    PilotPair,
    best_design,
    cpu_targets,
    measure_pair,
    pair_logs,
    pilot_noise,
)
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
# calibrations on the Zen 4 (2026-12-07; 8 and 16 the others) and doubles every screened pair's time
LENGTHS = (8, 16)
SCREEN_SHARE = 0.04  # of the budget, each candidate's measured pairs (after its start and warm-up)
SCREEN_MIN_PAIRS = 3
SLOWER = 2.5  # a first pair this many times the best candidate's so far: its noise could not make up for it


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


def candidates(duet: bool) -> list[WorkerSetup]:
    """:data:`CANDIDATES`, on 1 thread a side for a duet (a side has one CPU), also on every CPU this process may
    use for ABBA (one side measures at a time)."""
    import os

    threads = [1] if duet else sorted({1, len(os.sched_getaffinity(0))})
    return [WorkerSetup(c.dtype, c.quantize, t) for t in threads for c in CANDIDATES]


# the sides' backends from their command lines, started (``ab``'s: this layer can't import the driver that calls it)
OpenSides = Callable[[dict[str, str], RunOptions], Awaitable[list[Any]]]


async def _screen(
    setup: WorkerSetup, sides: dict[str, str], options: RunOptions, prompts: PromptSet, duet: tuple[int, int] | None,
    screen_s: float, best_s: float | None, open_sides: OpenSides,
) -> Measured:  # fmt: skip
    from llmbench.core.process import Stop

    opts = options.replaced(max_new_tokens=max(LENGTHS))
    try:
        backends = await open_sides({r: shlex.join([*shlex.split(c), *setup.flags()]) for r, c in sides.items()}, opts)
    except UserError as e:
        raise UserError(f"calibrate: the workers would not start as {setup.label()} ({' '.join(setup.flags())} "
                        f"appended to --base and --head): {e}") from None  # fmt: skip
    try:
        start_s = max((getattr(b, "start_s", None) or 0.0) for b in backends)
        live = [getattr(b, "live", b) for b in backends]
        stop, n = Stop(), len(prompts.prompts)

        def reqs(j: int, short: bool, length: int | None, turn: int) -> list[Any]:
            req = replace(prompts.request((n - 1 - j) % n, -1), max_new_tokens=length)
            return [replace(req, ttft_only=short, cpu=None if duet is None else duet[(k + turn) % 2])
                    for k in range(2)]  # fmt: skip

        async def pair(j: int, short: bool, length: int | None = None, turn: int = 0) -> tuple[float, Any, Any]:
            wall, (b, h) = await measure_pair(live, reqs(j, short, length, turn), stop, duet is not None, turn == 1)
            return wall, b, h

        ttft_s = (await pair(0, True))[0]  # the warm-up: a prefill, then a short request (a first decode step
        await pair(1, False, min(LENGTHS))  # set up kernels: bfloat16's first 8-token pair took 5.0 s, its next 1.2)
        m = Measured(setup, start_s, ttft_s)
        # how fast, first: one pair of the shortest length, against the fastest candidate's
        m.first_pair_s = (await pair(2, False, min(LENGTHS)))[0]
        if best_s is not None and m.first_pair_s > SLOWER * best_s:
            m.dropped = (
                f"(a {min(LENGTHS)}-token pair {m.first_pair_s:.2f} s, {m.first_pair_s / best_s:.1f}x the fastest)"
            )
            return m
        t0 = time.perf_counter()
        for j in range(3, 4 * NOISE_MAX_PAIRS, 2):  # then its noise: a full pair and a TTFT-only one in turn
            turn = ((j - 3) // 2) % 2  # each kind's placements take turns
            for k, short in ((j, False), (j + 1, True)):
                wall, b, h = await pair(k, short, turn=turn)
                if b is not None and h is not None:
                    m.pairs.append(PilotPair(b, h, wall, duet[turn] if duet is not None else turn, short))
            full = sum(not p.ttft_only for p in m.pairs)
            if full >= NOISE_MAX_PAIRS or (full >= SCREEN_MIN_PAIRS and time.perf_counter() - t0 >= screen_s):
                break
        return m
    finally:
        for b in backends:
            await b.close()


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
    best_s: float | None = None
    for setup in setups or candidates(duet is not None):
        if reporter is not None:
            reporter.status(f"calibrate: {setup.label()} ...")
        m = await _screen(setup, sides, options, prompts, duet, SCREEN_SHARE * budget_s, best_s, open_sides)
        measured.append(m)
        if m.first_pair_s is not None and m.dropped is None:
            best_s = m.first_pair_s if best_s is None else min(best_s, m.first_pair_s)
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
