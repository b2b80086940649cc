"""One side of ``ab`` spread over N worker processes, one after another (``ab --processes N``).

Two identical processes can differ by several percent for the life of the process (memory layout, hash seeds,
where the allocator put the weights): with one process per side, that difference is a constant offset inside
every pair, and a paired interval calls it real. With N processes per side, pair k is measured by process
k mod N on both sides; each result records its ``process``, and compare's interval is taken over the
processes' own changes (Student t, N - 1 degrees of freedom), so a difference that only one process shows stays
noise.

The processes live one at a time: process k starts (and is warmed up, as the first was) when the first pair of
its group comes, after process k - 1 has exited, so 32 processes a side cost the memory of one. The run loop
makes both sides ready for a pair at once and untimed (``ready``), so the two sides' processes k start
together and nothing is measured while a process starts. Each process gets its own setup (:class:`Setup`): a
hash seed and an environment of its own size, drawn at random, so what such things do to a process is sampled
over the N processes rather than fixed for the run; process k has the same setup on both sides.

``spawn="fork"`` (``ab --spawn fork``): process 0 stays alive, idle, once its pairs are done, and each later
process is forked from it (:class:`ForkedWorker`): no imports and no load, ~0.1 s where an exec'd start took 4-7
s. Such processes share process 0's hash seed and weights (where they lie in memory); only a heap padding of
``env_pad`` x 256 bytes (up to 1 MiB) differs. Their ``load_s``/``startup_s`` are process 0's, so they are no
samples of a cold start (recorded as None; ``fork_s`` is theirs).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import time
import weakref
from collections.abc import Hashable
from dataclasses import asdict, dataclass, replace
from typing import Any

from llmbench.backends import Request
from llmbench.backends.worker import ForkedWorker, WorkerBackend
from llmbench.backends.worker_main import FORK
from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.options import RunOptions
from llmbench.results.schema import Probe, RequestResult, Run
from llmbench.workloads.prompts import PromptSet

ENV_PAD_MAX = 4096  # bytes of environment padding: moves the initial stack by up to a page
HEAP_PAD_PER_ENV_PAD = 256  # a forked process holds env_pad x this many bytes: up to 1 MiB of its heap
# Two sides warming their new processes at the same moment, each on several threads, oversubscribe the CPUs:
# OpenMP's spinning threads then wait for ones that are descheduled (measured: a 4 s warm-up took 15-40 s). They
# take turns, unless the pair is a duet's (one thread a side, one CPU each). One lock per event loop: an asyncio
# lock binds to the loop it first waited in, so a module-wide one failed the second ab of a process (a notebook,
# the in-process tests: "bound to a different event loop").
_WARMING: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = weakref.WeakKeyDictionary()


def warming_lock() -> asyncio.Lock:
    """The lock new processes' warm-ups take turns on, in the running event loop."""
    loop = asyncio.get_running_loop()
    lock = _WARMING.get(loop)
    if lock is None:
        lock = _WARMING[loop] = asyncio.Lock()
    return lock


@dataclass(frozen=True)
class Setup:
    """How one worker process is started: ``PYTHONHASHSEED`` and ``LLMBENCH_ENV_PAD`` (that many bytes, which
    shift where the process's stack and environment land; Mytkowicz et al., ASPLOS 2009). A worker command's own
    ``env PYTHONHASHSEED=...`` wins over it."""

    hash_seed: int
    env_pad: int

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONHASHSEED": str(self.hash_seed), "LLMBENCH_ENV_PAD": "x" * self.env_pad}


def storage_read_mb(pid: int | None) -> float | None:
    """MB a live process (and its children) read from storage so far, not from the page cache: what tells a cold
    file cache from a warm one (psutil's ``io_counters().read_bytes``, Linux's /proc/PID/io). None where the
    system does not count it (macOS) or the process is gone."""
    import psutil

    if pid is None:  # psutil.Process(None) would be this process
        return None
    try:
        proc = psutil.Process(pid)
        total = 0
        for p in (proc, *proc.children(recursive=True)):
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.io_counters().read_bytes
    except (psutil.Error, AttributeError, TypeError, ValueError):  # AttributeError: no io_counters on macOS
        return None
    return round(total / 1e6, 1)


def process_for(prompt_index: int, repeat: int, n_prompts: int, processes: int) -> int:
    """The process that measures (prompt, repeat): pair k = repeat * n_prompts + prompt_index on process k mod N,
    the same rule on both sides (ab's plan groups its pairs by it)."""
    return (repeat * n_prompts + prompt_index) % processes


def random_setups(n: int, seed: int | None = None) -> list[Setup]:
    """``n`` setups drawn at random (``seed``: reproducibly)."""
    rng = random.Random(seed) if seed is not None else random.SystemRandom()
    return [Setup(rng.randint(1, 2**32 - 1), rng.randrange(ENV_PAD_MAX)) for _ in range(n)]


class PoolBackend:
    """N :class:`WorkerBackend` of the same command, one alive at a time; request (prompt i, repeat r) goes to
    process (r * prompts + i) mod N, the same rule on both sides of an ab pair."""

    cancel_on_stop = False

    def __init__(
        self, command: list[str], options: RunOptions, processes: int, *, label: str = "",
        setups: list[Setup] | None = None,
    ) -> None:  # fmt: skip
        if processes < 1:
            raise UserError(f"--processes must be at least 1, not {processes}")
        self.command, self.options, self.label = command, options, label
        self.setups = setups or random_setups(processes)
        if len(self.setups) != processes:
            raise UserError(f"{processes} processes need {processes} setups, not {len(self.setups)}")
        self.workers: list[WorkerBackend | None] = [None] * processes
        self.current: int | None = None
        self.n_prompts = 1
        self.prompts: PromptSet | None = None
        self.warmups: list[Request] = []  # the loop's warm-ups, replayed on every later process
        # ab --budget: a later process replays them cut to their prefill (one output token): a new exec'd worker's
        # first request carried +1.0% (up to +2.7%) over a warm one, +0.0% after a 1-token warm-up of 0.23 s where
        # a full one took 4.4 s (benchmarks/README.md, fork_probe.py, the Xeon)
        self.replay_prefill = False
        self.timings: dict[int, dict[str, Any]] = {}  # process -> start-up and warm-up seconds
        self.first_start: dict[str, Any] | None = None  # process 0's first start, when restart() replaced it
        self.spawn = "exec"  # or "fork": later processes forked from process 0 (set before the first pair)
        self._stop = Stop()

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        return WorkerBackend(self.command, self.options).early_config(prompts)

    async def start(self, prompts: PromptSet) -> None:
        """Start process 0 (the run's record comes from it); the others start when their pairs come."""
        self.n_prompts, self.prompts = len(prompts.prompts), prompts
        await self._enter(0, warm=False)

    @property
    def can_fork(self) -> bool:
        """Process 0 is alive and announced that it forks (its worker: transformers, the CPU, one thread)."""
        w = self.workers[0]
        return w is not None and FORK in w.features and w.alive()

    def _new_worker(self, k: int) -> WorkerBackend:
        name = f"{self.label}process {k}"
        server = self.workers[0]
        if self.spawn == "fork" and k > 0 and server is not None:
            pad = self.setups[k].env_pad * HEAP_PAD_PER_ENV_PAD
            return ForkedWorker(server, self.options, heap_pad=pad, label=self.label, name=name)
        worker = WorkerBackend(self.command, self.options, label=self.label, name=name)
        worker.env = self.setups[k].env()
        return worker

    async def _enter(self, k: int, warm: bool = True, together: bool = False) -> None:
        """Process k becomes the live one: the previous one exits first (process 0 stays, idle, when later ones
        are forked from it), then k starts and is warmed up."""
        if self.current == k:
            return
        if self.current is not None and not (self.spawn == "fork" and self.current == 0):
            await self._live().close()
        assert self.prompts is not None, "start() first"
        if k == 0 and self.workers[0] is not None and self.workers[0].alive():  # the fork server, warm already
            self.current = 0
            return
        worker = self._new_worker(k)
        self.workers[k], self.current = worker, k
        await worker.start(self.prompts)
        read_mb = storage_read_mb(worker.pid)
        t = time.perf_counter()
        if warm and self.warmups:
            async with contextlib.nullcontext() if together else warming_lock():
                t = time.perf_counter()
                for req in self.warmups:
                    req = replace(req, ttft_only=True) if self.replay_prefill else req
                    if await worker.measure(req, self._stop, 0.0) is None:
                        break
        warmup_s = round(time.perf_counter() - t, 3) if warm and self.warmups else None
        self.timings[k] = {"pid": worker.pid, "spawn_s": worker.spawn_s, "startup_s": worker.startup_s,
                           "load_s": worker.load_s, "warmup_s": warmup_s, "start_read_mb": read_mb,
                           **asdict(self.setups[k])}  # fmt: skip
        if isinstance(worker, ForkedWorker):  # what this process shares with process 0, and what is its own
            self.timings[k].update(spawn="fork", startup_s=None, fork_s=worker.startup_s, heap_pad=worker.heap_pad,
                                   **asdict(self.setups[0]))  # fmt: skip

    async def time_fork(self) -> float:
        """Seconds a forked process takes from the fork to prepared and back out (``ab --budget`` prices a later
        process by it): one is forked from process 0 and closed. Before the first pair."""
        assert self.prompts is not None and self.current == 0, "start() first"
        t = time.perf_counter()
        trial = ForkedWorker(self._live(), self.options, heap_pad=0, label=self.label,
                             name=f"{self.label}a trial fork")  # fmt: skip
        try:
            await trial.start(self.prompts)
        finally:
            await trial.close()
        return time.perf_counter() - t

    async def restart(self) -> None:
        """Process 0 exits and starts again, unwarmed (before the first pair): ``ab --budget`` times a start
        from a warm file cache when the first one read the weights and libraries from storage. The first start's
        timings are kept in :attr:`first_start`."""
        if self.current != 0 or self.warmups:
            raise UserError("only process 0 restarts, and only before its warm-ups")
        self.first_start = self.timings.pop(0, None)
        await self._live().close()
        self.current = None
        await self._enter(0, warm=False)

    def resize(self, processes: int) -> None:
        """Use the first ``processes`` only (ab --budget, once it chose; before the first pair)."""
        if not 1 <= processes <= len(self.workers) or (self.current or 0) >= processes:
            raise UserError(f"cannot resize {len(self.workers)} processes to {processes}")
        self.workers, self.setups = self.workers[:processes], self.setups[:processes]

    @property
    def live(self) -> WorkerBackend:
        """The process alive now."""
        return self._live()

    @property
    def start_s(self) -> float | None:
        """Process 0's start, spawn to ready (what each later process costs again)."""
        return self.timings.get(0, {}).get("spawn_s")

    @property
    def start_read_mb(self) -> float | None:
        """MB process 0 read from storage by the time it was ready (None: not counted here)."""
        return self.timings.get(0, {}).get("start_read_mb")

    def _live(self) -> WorkerBackend:
        w = self.workers[self.current] if self.current is not None else None
        assert w is not None, "start() first"
        return w

    def new_run(self, prompts: PromptSet) -> Run:
        run = self._live().new_run(prompts)
        run.config.engine_settings = {**(run.config.engine_settings or {}), "worker_processes": len(self.workers)}
        return run

    async def activate(self) -> None:
        pass

    def process_of(self, request: Request) -> int:
        return process_for(request.prompt_index, request.repeat, self.n_prompts, len(self.workers))

    async def ready(self, request: Request) -> None:
        """Before ``request``'s pair is timed: its process is the live one (started and warmed up if not)."""
        if request.repeat >= 0:
            await self._enter(self.process_of(request), together=request.simultaneous)

    async def measure(self, request: Request, stop: Stop, started_s: float) -> RequestResult | None:
        self._stop = stop
        if request.repeat < 0:  # the loop's warm-up: this process now, every later one when it starts
            self.warmups.append(request)
            return await self._live().measure(request, stop, started_s)
        k = self.process_of(request)
        await self._enter(k)
        result = await self._live().measure(request, stop, started_s)
        if result is not None:
            result.process = k
        return result

    def probe_key(self) -> Hashable:
        return ("pool", id(self))

    async def probe(self) -> Probe | None:
        return await self._live().probe()

    def finish(self, run: Run) -> list[str]:
        seen: list[str] = []
        for w in self.workers:
            seen += [x for x in (w.finish(run) if w is not None else []) if x not in seen]
        run.config.engine_settings = {**(run.config.engine_settings or {}),
                                      "processes": [self.timings[k] for k in sorted(self.timings)],
                                      **({"first_start": self.first_start} if self.first_start else {})}  # fmt: skip
        return seen

    async def close(self) -> None:
        if self.current is not None:
            await self._live().close()
        if self.workers and self.workers[0] is not None and self.current != 0:  # the fork server
            await self.workers[0].close()
