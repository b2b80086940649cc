"""``llmbench ab``: base and head measured side by side, request by request, so the machine's drift cancels.

Each side is a server URL (an endpoint backend) or a command line that starts ``llmbench worker`` (a worker
backend: its own environment, packages, model and options). Every (prompt, repeat) is measured on both sides
back to back, and the order alternates (ABBA: base first for one pair, head first for the next), so drift, a
neighbour's burst or heat lands on both alike; while one side generates the other is idle. The two runs are
ordinary run JSONs (``DIR/base.json``, ``DIR/head.json``) whose ``config.ab`` names the other.
"""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path
from typing import Literal

from llmbench.backends import Backend, Request
from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.schema import ABConfig, Run
from llmbench.results.storage import claim, default_dir, load_run, prepare_dir
from llmbench.runner.loop import Reporter, Track, check_resumable, execute, new_track
from llmbench.workloads.prompts import PromptSet

Role = Literal["base", "head"]
ROLES: tuple[Role, ...] = ("base", "head")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def is_url(side: str) -> bool:
    return side.strip().lower().startswith(("http://", "https://"))


def side_backend(side: str, options: RunOptions, role: str, processes: int = 1) -> Backend:
    """The backend of one side: a server URL, or a worker command line (``processes`` of them, used in turn)."""
    label = f"{role}: "
    if not side.strip():
        raise UserError(f"--{role} is empty: give a server URL or an `llmbench worker ...` command line")
    if is_url(side):
        if processes != 1:
            raise UserError(f"--processes spreads worker sides over processes; --{role} is a server")
        from llmbench.backends.endpoint import EndpointBackend

        return EndpointBackend(EndpointOptions(url=side.strip()), options, label=label)
    from llmbench.backends.worker import WorkerBackend

    try:
        command = shlex.split(side)
    except ValueError as e:
        raise UserError(f"--{role} '{side}': not a command line ({e})") from None
    if processes > 1:
        from llmbench.backends.pool import PoolBackend

        return PoolBackend(command, options, processes, label=label)
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
    """The plan: every (prompt, repeat) on both sides back to back, who goes first alternating pair by pair and,
    with ``processes`` N (pair k on process k mod N), also within each process's own pairs: base first when
    (k mod N + k div N) is even. (With k alone, an even N would give each process one order for its whole
    life, and an order effect would pass for a process effect.)"""
    plan: list[tuple[Track, Request]] = []
    k = 0
    for rep in range(repeats):
        for i in range(len(prompts.prompts)):
            first, second = (base, head) if (k % processes + k // processes) % 2 == 0 else (head, base)
            plan += [(first, prompts.request(i, rep)), (second, prompts.request(i, rep))]
            k += 1
    return plan


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
) -> tuple[Run, Run, Path]:
    """Measure ``prompts`` on both sides in ABBA pairs; (base run, head run, their folder). ``processes``: worker
    processes per side, pair k measured by process k mod N on both sides (see :mod:`llmbench.backends.pool`)."""
    options.validate()
    sides = {"base": base, "head": head}
    backends = [side_backend(sides[r], options, r, processes) for r in ROLES]
    folder = prepare_ab_dir(out, resume)
    previous = {r: load_run(folder / f"{r}.json") if resume else None for r in ROLES}
    for r, b in zip(ROLES, backends, strict=True):
        if previous[r] is not None:
            check_resumable(previous[r], folder / f"{r}.json", b.early_config(prompts))  # type: ignore[arg-type]
    await _start_all(backends, prompts)
    try:
        tracks = [
            new_track(b, prompts, folder / f"{r}.json", previous[r]) for r, b in zip(ROLES, backends, strict=True)
        ]
        for t, r in zip(tracks, ROLES, strict=True):
            other = tracks[1] if r == "base" else tracks[0]
            t.run.config.ab = ABConfig(role=r, side=recorded_side(sides[r]), other_file=f"{_other(r)}.json",
                                       other_run_id=other.run.run_id, processes=processes)  # fmt: skip
        if reporter is not None:
            spread = f", {processes} processes a side in turn" if processes > 1 else ""
            reporter.status(f"{len(prompts.prompts) * options.repeats} pairs, ABBA{spread} -> {folder}")
        plan = abba(tracks[0], tracks[1], prompts, options.repeats, processes)
        runs = await execute(tracks, plan, prompts, warmup=options.warmup, stop=stop, reporter=reporter)
    finally:
        for b in backends:
            await b.close()
    return runs[0], runs[1], folder


def _other(role: Role) -> Role:
    return "head" if role == "base" else "base"
