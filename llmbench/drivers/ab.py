"""``llmbench ab``: base and head measured side by side, request by request, so the machine's drift cancels.

Each side is a server URL (an endpoint backend) or a command line that starts ``llmbench worker`` (a worker
backend: its own environment, packages, model and options). Every (prompt, repeat) is measured on both sides
back to back, and the order alternates (ABBA: base first for one pair, head first for the next), so drift, a
neighbour's burst or heat lands on both alike; while one side generates the other is idle. The two runs are
ordinary run JSONs (``DIR/base.json``, ``DIR/head.json``) whose ``config.ab`` names the other.
"""

from __future__ import annotations

import asyncio
import random
import re
import shlex
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from llmbench.backends import Backend, Request
from llmbench.backends.pool import PoolBackend, Setup, process_for, random_setups
from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.drivers.ab_budget import MAX_PROCESSES
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.schema import ABConfig, Run
from llmbench.results.storage import claim, default_dir, load_run, prepare_dir, tidied_on_failure
from llmbench.runner.loop import Reporter, Track, check_resumable, execute, new_track
from llmbench.workloads.limits import MAX_PROCESSES as MAX_AB_PROCESSES
from llmbench.workloads.limits import MAX_REQUESTS, check_planned
from llmbench.workloads.prompts import PromptSet

Role = Literal["base", "head"]
ROLES: tuple[Role, ...] = ("base", "head")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def is_url(side: str) -> bool:
    return side.strip().lower().startswith(("http://", "https://"))


def side_backend(
    side: str, options: RunOptions, role: str, processes: int = 1, setups: list[Setup] | None = None
) -> Backend:
    """The backend of one side: a server URL, or a worker command line (``processes`` of them, one after
    another, process k started with ``setups[k]``)."""
    label = f"{role}: "
    if not side.strip():
        raise UserError(f"--{role} is empty: give a server URL or an `llmbench worker ...` command line")
    if is_url(side):
        if processes != 1:
            raise UserError(f"--processes spreads worker sides over processes; --{role} is a server")
        from llmbench.backends.endpoint import EndpointBackend

        return EndpointBackend(EndpointOptions(endpoint=side.strip()), options, label=label)
    from llmbench.backends.worker import WorkerBackend

    try:
        command = shlex.split(side)
    except ValueError as e:
        raise UserError(f"--{role} '{side}': not a command line ({e})") from None
    if processes > 1:
        from llmbench.backends.pool import PoolBackend

        return PoolBackend(command, options, processes, label=label, setups=setups)
    if processes < 1:
        raise UserError(f"--processes must be at least 1, not {processes}")
    return WorkerBackend(command, options, label=label)


def recorded_side(side: str) -> str:
    """What ``config.ab.side`` holds: a URL without credentials or query; a command with ``VAR=value``
    assignments (``env TOKEN=...``), secret options' values (``--api-key X``) and URLs in it redacted
    (:func:`llmbench.core.redact.redact_command`), so no secret reaches the JSON."""
    from llmbench.core.redact import redact_command, redact_url

    if is_url(side):
        return redact_url(side.strip())
    return redact_command(shlex.split(side))


def abba(base: Track, head: Track, prompts: PromptSet, repeats: int, processes: int = 1) -> list[tuple[Track, Request]]:
    """The plain ABBA plan (no TTFT-only pairs, no duet, the orders fixed): see :func:`plan`."""
    return plan(base, head, prompts, repeats, processes)


def plan(
    base: Track, head: Track, prompts: PromptSet, repeats: int, processes: int = 1, *, ttft_pairs: int = 0,
    duet: tuple[int, int] | None = None, base_first: list[bool] | None = None, full_pairs: int | None = None,
) -> list[tuple[Track, Request]]:  # fmt: skip
    """The plan: every (prompt, repeat) on both sides as one pair, pair k measured by process k mod N, the
    pairs grouped by process (process 0's first: a side's processes live one at a time). ``full_pairs``: only
    the first that many of the (prompt, repeat) pairs, round by round (``ab --budget``'s partial last round;
    None: all ``repeats`` rounds); the processes' shares then differ by one pair at most.

    ``ttft_pairs`` more pairs of one output token (``ttft_only``), keyed (prompt j mod n, repeat ``repeats`` + j
    div n) so they never collide with the full pairs, spread evenly among their process's full pairs.
    ABBA (``duet`` None): within each process who goes first alternates pair by pair, starting with
    ``base_first[p]`` (default: base, then head for odd processes...). ``duet`` (two CPUs): both requests of a
    pair start at the same moment, base on the first CPU and head on the second, swapped pair by pair over the
    whole plan. Full and TTFT-only pairs alternate each on their own count: counted together, the short pairs
    spread one between two full ones put every full pair on the same order or CPU (a study run's 20 full pairs
    all had the head on one CPU, and a +3% head read +0.1%)."""
    n = len(prompts.prompts)
    keys = [(i, rep, False) for rep in range(repeats) for i in range(n)][:full_pairs]
    keys += [(j % n, repeats + j // n, True) for j in range(ttft_pairs)]
    groups: list[list[tuple[int, int, bool]]] = [[] for _ in range(processes)]
    for i, rep, short in keys:
        groups[process_for(i, rep, n, processes)].append((i, rep, short))
    out: list[tuple[Track, Request]] = []
    swaps = {False: 0, True: 0}  # a duet's pairs of each kind so far, over the plan: the CPUs swap on each
    for p, group in enumerate(groups):
        full, shorts = [g for g in group if not g[2]], [g for g in group if g[2]]
        first = base_first[p] if base_first is not None else p % 2 == 0
        places = {False: 0, True: 0}  # ABBA: this process's pairs of each kind so far
        for i, rep, short in _spread(full, shorts):
            pair = len(out) // 2
            if duet is not None:
                even = swaps[short] % 2 == 0
                swaps[short] += 1
                cpus = duet if even else duet[::-1]
                sides = [(base, cpus[0]), (head, cpus[1])]
                sides = sides if even else sides[::-1]  # who is sent first alternates too
                out += [(t, prompts.request(i, rep, ttft_only=short, pair=pair, simultaneous=True, cpu=c))
                        for t, c in sides]  # fmt: skip
            else:
                order = (base, head) if first == (places[short] % 2 == 0) else (head, base)
                places[short] += 1
                out += [(t, prompts.request(i, rep, ttft_only=short, pair=pair)) for t in order]
    return out


def _spread(full: list, shorts: list) -> list:
    """``full`` in order with ``shorts`` spread evenly among them (so drift within a process hits both kinds)."""
    if not shorts or not full:
        return full + shorts
    merged = [(k / len(full), 0, x) for k, x in enumerate(full)] + [
        ((k + 0.5) / len(shorts), 1, x) for k, x in enumerate(shorts)
    ]
    return [x for _, _, x in sorted(merged, key=lambda m: (m[0], m[1]))]


def balanced_firsts(processes: int, rng: random.Random) -> list[bool]:
    """Which side goes first in each process's first pair: half the processes base, half head, in random order
    (one process: base)."""
    if processes == 1:
        return [True]
    firsts = [p < processes // 2 for p in range(processes)]
    rng.shuffle(firsts)
    return firsts


def prepare_ab_dir(out: Path | None, resume: bool) -> Path:
    """``results/ab-<UTC time>`` by default; an existing pair of runs is never overwritten (resume it)."""
    if out is None:
        folder = default_dir("ab", "base.json")
        claim(folder / "head.json")
        return folder
    out = out.expanduser()
    if out.exists() and not out.is_dir():
        raise UserError(f"{out} is a file; give a folder for the two runs")
    present = [r for r in ROLES if (out / f"{r}.json").exists()]
    if resume and len(present) < 2:
        raise UserError(f"--resume {out}: it holds no base.json and head.json to continue")
    if not resume and present:
        raise UserError(f"{out} already holds an ab run ({', '.join(present)}.json); resume it with --resume or "
                        "choose another -o folder")  # fmt: skip
    prepare_dir(out)
    for role in ROLES:  # held until this process ends: a second ab into the same folder is refused now
        claim(out / f"{role}.json", replace=resume)
    return out


async def _start_all(backends: list[Backend], prompts: PromptSet) -> None:
    """Start both sides at once (two models load in parallel); if one fails, close both and say why."""
    results = await asyncio.gather(*(b.start(prompts) for b in backends), return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        for b in backends:
            await b.close()
        raise errors[0]


def duet_cpus() -> tuple[int, int]:
    """The two CPUs a duet pins its sides to: the first two this process may use; UserError with fewer."""
    import os

    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise UserError(f"--duet runs the two sides on two CPUs at once; this process may use {len(cpus)}")
    return cpus[0], cpus[1]


@dataclass
class Design:
    """How an ab run measures: ``processes`` a side, ``repeats`` rounds of the prompts, ``ttft_pairs`` one-token
    pairs for TTFT, ABBA or ``duet``; ``seed`` draws each process's setup and first side (None: at random)."""

    processes: int = 1
    repeats: int = 1
    ttft_pairs: int = 0
    duet: bool = False
    full_pairs: int | None = None  # --budget: the full pairs in all, fewer than prompts x repeats (a partial round)
    seed: int | None = None
    budget_s: float | None = None  # --budget: the design was chosen to fill it (llmbench.drivers.ab_budget)
    plan: dict[str, Any] | None = None  # --budget: the costs measured, what was seen and chosen, and why
    # how a process after the first starts: "exec" (a new worker: its own imports, load, hash seed), "fork" (from
    # process 0: loaded once), "auto" (fork where both sides' workers can, else exec)
    spawn: Literal["exec", "fork", "auto"] = "exec"
    # --budget: the workers' dtype, quantization, threads and request length chosen for this CPU first, by
    # measurement (llmbench.drivers.ab_calibrate), the same for both sides
    calibrate: bool = False

    def validate(self) -> None:
        """UserError for a count no run can hold, before anything is planned or started (a plan holds every
        pair: --ttft-pairs 10**12 was a MemoryError once)."""
        for name, value, least, most in (("--processes", self.processes, 1, MAX_AB_PROCESSES),
                                         ("--repeats", self.repeats, 1, MAX_REQUESTS),
                                         ("--ttft-pairs", self.ttft_pairs, 0, MAX_REQUESTS)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise UserError(f"{name} must be a whole number of at least {least}, not {value!r}")
            if value > most:
                raise UserError(f"{name} {value}: expected at most {most:,}")

    def check_plan(self, n_prompts: int) -> None:
        """UserError when the plan (prompts x --repeats full pairs + --ttft-pairs, two requests each) would hold
        more requests than ``limits.MAX_PLANNED``: checked before the plan is built and before any worker starts."""
        full = (("prompts", n_prompts), ("--repeats", self.repeats)) if self.full_pairs is None else \
            (("full pairs", self.pairs(n_prompts)),)  # fmt: skip
        check_planned(*full, ("sides", 2), add=("--ttft-pairs x 2 sides", 2 * self.ttft_pairs))

    def pairs(self, n_prompts: int) -> int:
        """The full pairs the plan holds: prompts x repeats, or fewer (``full_pairs``: a partial last round)."""
        whole = n_prompts * self.repeats
        return whole if self.full_pairs is None else min(self.full_pairs, whole)


async def ab(
    prompts: PromptSet,
    base: str,
    head: str,
    options: RunOptions,
    out: Path | None = None,
    *,
    resume: bool = False,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
    processes: int = 1,
    design: Design | None = None,
) -> tuple[Run, Run, Path]:
    """Measure ``prompts`` on both sides in pairs; (base run, head run, their folder). ``design``: processes a
    side, rounds, TTFT-only pairs, ABBA or duet (default: ``processes`` a side, ``options.repeats`` rounds, ABBA);
    with ``design.budget_s`` the rest of the design is chosen to fill that wall time (see
    :mod:`llmbench.drivers.ab_budget`)."""
    options.check()
    d = design or Design(processes=processes, repeats=options.repeats)
    d.validate()
    d.check_plan(len(prompts.prompts))
    rng = random.Random(d.seed) if d.seed is not None else random.Random(random.SystemRandom().getrandbits(64))
    cpus = duet_cpus() if d.duet else None
    sides = {"base": base, "head": head}
    # what this call makes, so that a failure to start leaves none of it: the folder, and results/ by default
    new = [f for f in ([Path("results")] if out is None else [*reversed(out.expanduser().parents), out.expanduser()])
           if not f.exists()]  # fmt: skip
    folder = prepare_ab_dir(out, resume)
    made = [folder, *reversed(new)] if out is None else list(reversed(new))
    with tidied_on_failure(made, tuple(f"{r}.json" for r in ROLES)):
        return await _measure(folder, prompts, sides, options, d, rng, cpus, resume, stop, reporter)


async def _measure(
    folder: Path, prompts: PromptSet, sides: dict[str, str], options: RunOptions, d: Design, rng: random.Random,
    cpus: tuple[int, int] | None, resume: bool, stop: Stop | None, reporter: Reporter | None,
) -> tuple[Run, Run, Path]:  # fmt: skip
    """:func:`ab`'s measuring, in its folder: the sides started, the design chosen (a budget's), the plan run."""
    previous = {r: load_run(folder / f"{r}.json") if resume else None for r in ROLES}
    budgeted = d.budget_s is not None
    servers = [r for r in ROLES if is_url(sides[r])]
    for flag, on in (("--duet pins worker processes to CPUs", d.duet),
                     ("--budget chooses how many worker processes", budgeted)):  # fmt: skip
        if servers and on:
            raise UserError(f"{flag}; --{servers[0]} is a server")
    if budgeted and resume:
        raise UserError("--budget chooses a new design; resume with the options it printed instead")
    if d.calibrate and not budgeted:
        raise UserError("calibrate chooses the workers' setup to fill a --budget: give --budget")
    if d.calibrate and servers:
        raise UserError(f"calibrate chooses worker settings; --{servers[0]} is a server")
    t0 = time.perf_counter()
    calibration = None
    if d.calibrate:
        from llmbench.drivers.ab_calibrate import calibrate

        async def open_sides(commands: dict[str, str], opts: RunOptions) -> list[Backend]:
            backends = [side_backend(commands[r], opts, r) for r in ROLES]
            await _start_all(backends, prompts)
            return backends

        calibration = await calibrate(sides, options, prompts, d.budget_s or 0.0, cpus, open_sides, reporter=reporter)
        sides = {r: calibration.command(sides[r]) for r in ROLES}
        options = options.replaced(max_new_tokens=calibration.length)
        if reporter is not None:
            reporter.status(calibration.text())
    most = 1 if servers else MAX_PROCESSES if budgeted else d.processes
    setups = random_setups(most, rng.getrandbits(64))
    backends = [side_backend(sides[r], options, r, most, setups) for r in ROLES]
    for r, b in zip(ROLES, backends, strict=True):
        if previous[r] is not None:
            check_resumable(previous[r], folder / f"{r}.json", b.early_config(prompts))  # type: ignore[arg-type]
    await _start_all(backends, prompts)
    try:
        d = replace(d, spawn=_spawn(backends, d))
        for b in backends:
            if isinstance(b, PoolBackend):
                b.spawn = d.spawn
        if budgeted:
            from llmbench.drivers.ab_budget import choose

            d = await choose(d, backends, prompts, options, time.perf_counter() - t0, cpus, reporter,
                             max_processes=most, earlier=calibration.pairs() if calibration else None)  # fmt: skip
            if calibration is not None and d.plan is not None:
                d.plan["calibration"] = calibration.record()
            for b in backends:
                if isinstance(b, PoolBackend):
                    b.resize(d.processes)
                    b.replay_prefill = (d.plan or {}).get("warmup_replay") == "prefill"
        _check_features(backends, d)
        tracks = [
            new_track(b, prompts, folder / f"{r}.json", previous[r]) for r, b in zip(ROLES, backends, strict=True)
        ]
        if cpus is not None:
            _check_duet(tracks)
        firsts = balanced_firsts(d.processes, rng)
        setup = _setup_record(setups[: d.processes], firsts, d.spawn) if d.processes > 1 else None
        for t, r in zip(tracks, ROLES, strict=True):
            t.run.config.repeats = d.repeats  # the design's rounds (a budget chose them after the workers started)
            other = tracks[1] if r == "base" else tracks[0]
            t.run.config.ab = ABConfig(role=r, side=recorded_side(sides[r]), other_file=f"{_other(r)}.json",
                                       other_run_id=other.run.run_id, processes=d.processes,
                                       order="duet" if cpus else "ABBA", ttft_pairs=d.ttft_pairs,
                                       budget_s=d.budget_s, budget_plan=d.plan, setup=setup,
                                       full_pairs=d.full_pairs)  # fmt: skip
        if reporter is not None:
            reporter.status(describe(d, len(prompts.prompts), folder))
        the_plan = plan(tracks[0], tracks[1], prompts, d.repeats, d.processes, ttft_pairs=d.ttft_pairs, duet=cpus,
                        base_first=None if d.processes == 1 else firsts, full_pairs=d.full_pairs)  # fmt: skip
        runs = await execute(tracks, the_plan, prompts, warmup=options.warmup, stop=stop, reporter=reporter)
    finally:
        for b in backends:
            await b.close()
    return runs[0], runs[1], folder


def describe(d: Design, n_prompts: int, folder: Path) -> str:
    """The one status line: what will be measured, how."""
    spread = f", {d.processes} processes a side one after another" if d.processes > 1 else ""
    short = f" + {d.ttft_pairs} TTFT-only pairs" if d.ttft_pairs else ""
    how = "duet (both sides at once, one CPU each, swapped pair by pair)" if d.duet else "ABBA"
    return f"{d.pairs(n_prompts)} pairs{short}, {how}{spread} -> {folder}"


def _setup_record(setups: list[Setup], firsts: list[bool], spawn: str) -> dict[str, Any]:
    """config.ab.setup: each process's hash seed and environment padding, who went first; forked processes share
    process 0's seed and environment and hold a heap padding of their own."""
    from llmbench.backends.pool import HEAP_PAD_PER_ENV_PAD

    if spawn != "fork":
        return {"hash_seed": [s.hash_seed for s in setups], "env_pad": [s.env_pad for s in setups],
                "base_first": firsts}  # fmt: skip
    return {"hash_seed": [setups[0].hash_seed] * len(setups), "env_pad": [setups[0].env_pad] * len(setups),
            "heap_pad": [0] + [s.env_pad * HEAP_PAD_PER_ENV_PAD for s in setups[1:]], "base_first": firsts,
            "spawn": "fork"}  # fmt: skip


def _spawn(backends: list[Backend], d: Design) -> Literal["exec", "fork"]:
    """How later processes start (``d.spawn`` resolved once process 0 is up): "fork" needs both sides' process 0
    to announce it (a transformers model on the CPU, one thread, llmbench 0.3.0 or later); UserError when asked
    for and one can't, "exec" then for "auto"."""
    if d.spawn == "exec" or (d.budget_s is None and d.processes == 1):
        return "exec"
    for r, b in zip(ROLES, backends, strict=True):
        if not (isinstance(b, PoolBackend) and b.can_fork):
            if d.spawn == "auto":
                return "exec"
            raise UserError(f"--spawn fork: the {r} worker can't fork (it needs llmbench 0.3.0 or later, a "
                            "transformers model on the CPU and --threads 1)")  # fmt: skip
    return "fork"


def _check_features(backends: list[Backend], d: Design) -> None:
    """An older worker ignores what it does not know: a TTFT-only pair would run full length, a duet unpinned.
    Refused here, in one line, rather than measured wrong."""
    from llmbench.backends.worker import WorkerBackend

    needs = [f for f, on in (("max_new_tokens", d.ttft_pairs > 0), ("cpu", d.duet)) if on]
    for r, b in zip(ROLES, backends, strict=True):
        w = b.live if isinstance(b, PoolBackend) else b
        if isinstance(w, WorkerBackend) and (missing := [f for f in needs if f not in w.features]):
            what = "TTFT-only pairs (--ttft-pairs, --budget)" if "max_new_tokens" in missing else "--duet"
            raise UserError(f"the {r} worker (llmbench {w.version}) predates {what}: upgrade its llmbench, or "
                            "measure without")  # fmt: skip


def _check_duet(tracks: list[Track]) -> None:
    """A duet pins each side to one CPU: a side computing on more threads would fight itself there."""
    for t, r in zip(tracks, ROLES, strict=True):
        threads = t.run.config.threads
        if threads != 1:
            raise UserError(f"--duet runs each side on one CPU: give the {r} worker --threads 1 (it has {threads})")


def _other(role: Role) -> Role:
    return "head" if role == "base" else "base"
