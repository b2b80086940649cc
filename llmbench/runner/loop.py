"""The one run loop: every mode's warm-ups, order, resume, stops, machine record, saving and summaries.

A driver (run, sweep, ...) decides *what* to measure and in *which order* (a plan of (track, request) pairs);
this loop decides *how* a measurement is taken and kept; backends know *where* tokens come from. The loop is
async so that an endpoint can keep several streams in flight; an in-process backend runs generate() on its
generation thread, which leaves the event loop free (a notebook's too).

Per run it owns: warm-ups (from the end of the prompt list, so a server's prefix cache never hands the first
measured request a prefill it already did; a server the run started gets the plan's first request before them,
its first ever), skipping what a resumed run already holds, the calibration
probe before and after, the machine sampler, the journal and snapshots of every run file (writes go through
one writer thread, in order, off the event loop), failures (recorded, or fatal when the very first request
fails), stops (first: after the token in flight, or dropping in-flight streams; second: at once), summaries,
warnings and ``complete``.

Closed loop (the default): ``concurrency`` workers take the plan in order, each sending its next request when
its last one finished. Open loop (requests that carry ``scheduled_s``): each request is sent at its due time
(``t0 + scheduled_s``), however many are in flight; the backend stamps how late it actually went out.
``start_at`` aligns ``t0`` with other processes sharing one schedule (``--workers``).

Why one module of 700-odd lines (over 600): every piece above reads and writes the same per-run state (the tracks, the
stop, the writer thread), and splitting it would pass that state between files; it has one job, the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psutil

from llmbench.backends import Backend, Request
from llmbench.core.errors import BackendUnavailable, RequestFailed, RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.machine import probe as machine
from llmbench.machine import telemetry
from llmbench.results.metrics import reshape, summarize
from llmbench.results.schema import (
    RESUME,
    Environment,
    FailedRequest,
    LoadInfo,
    Probe,
    RequestResult,
    Run,
    Session,
    differences,
    must_match,
    utc_now,
)
from llmbench.results.storage import RunWriter, save_run
from llmbench.workloads.prompts import PromptSet


class Reporter(Protocol):
    """What the loop tells a user while it works (the CLI's progress bar; nothing by default)."""

    def status(self, text: str) -> None: ...

    def warn(self, text: str) -> None: ...

    def warmup(self, done: int, total: int) -> None: ...

    def request(self, result: RequestResult, done: int, total: int) -> None: ...

    def outcome(self, item: RequestResult | FailedRequest, in_flight: int, now_s: float) -> None:
        """Each measured outcome as it is recorded: ``in_flight`` other requests still out, at ``now_s`` on the
        loop's clock (load's over-saturation watch)."""


class NullReporter:
    """Says nothing."""

    def status(self, text: str) -> None:
        pass

    def warn(self, text: str) -> None:
        pass

    def warmup(self, done: int, total: int) -> None:
        pass

    def request(self, result: RequestResult, done: int, total: int) -> None:
        pass

    def outcome(self, item: RequestResult | FailedRequest, in_flight: int, now_s: float) -> None:
        pass


@dataclass(eq=False)
class Track:
    """One backend's run while the loop measures it: the record (a resumed run's, or new), this session's own
    facts (``fresh``: environment, load, warnings) and where it is saved (None: nowhere)."""

    backend: Backend
    run: Run
    fresh: Run
    path: Path | None = None
    writer: RunWriter | None = None
    session: int = 0
    probe_before: Probe | None = None
    probe_after: Probe | None = None
    expected: set[tuple[int, int]] = field(default_factory=set)
    prompts: PromptSet | None = None  # this track's own prompts (a scan's points), else the loop's


def check_resumable(
    run: Run, path: Path | str, config: dict, environment: dict | None = None, load: LoadInfo | None = None
) -> None:
    """UserError unless ``run`` is incomplete and measured the same setup: every RESUME field of ``config``
    (a full or partial config dict) and of ``environment`` (when given) equals the run's, and the weights are
    offloaded (or not) as in the run (``load``, when given)."""
    if run.complete:
        raise UserError(f"{path} is already complete: nothing to resume")
    have = run.config.model_dump()
    keys = tuple(k for k in must_match(RESUME) if k.split(".")[0] in config)
    diffs = differences(have, config, keys)
    if environment is not None:
        diffs += differences(run.environment.model_dump(), environment, must_match(RESUME, Environment))
    if load is not None and run.load is not None and _offloaded(run.load) != _offloaded(load):
        diffs.append(("offloaded weights", _offloaded(run.load), _offloaded(load)))
    if diffs:
        shown = "; ".join(f"{k} {a!r} -> {b!r}" for k, a, b in diffs)
        raise UserError(
            f"--resume {path}: this setup differs from the run's ({shown}); resume with the same options, prompt "
            "file and environment"
        )


def _offloaded(load: LoadInfo) -> list[str]:
    """Where weights were off the computing device (empty: none were)."""
    o = load.offload
    return [name for name, modules in (("disk", o.disk), ("cpu", o.cpu), ("meta", o.meta)) if modules]


def new_track(backend: Backend, prompts: PromptSet, path: Path | None, resume: Run | None = None) -> Track:
    """A track for ``backend`` (started): its fresh record, or ``resume`` after checking it measures the same."""
    fresh = backend.new_run(prompts)
    if resume is not None:
        check_resumable(resume, path or "the run", fresh.config.model_dump(), fresh.environment.model_dump(),
                        fresh.load)  # fmt: skip
    return Track(backend, resume if resume is not None else fresh, fresh, path)


class RunLoop:
    """Runs a plan over tracks; see the module docstring. One instance per plan."""

    def __init__(
        self,
        tracks: Sequence[Track],
        prompts: PromptSet,
        *,
        warmup: int = 0,
        concurrency: int = 1,
        stop: Stop | None = None,
        reporter: Reporter | None = None,
        start_at: Callable[[], Awaitable[float]] | None = None,
        survive_backend_loss: bool = False,
        cold_first: bool = False,
    ) -> None:
        self.tracks = list(tracks)
        # a server the run started (--server-command): the plan's first request (or conversation) is the first it
        # ever gets, measured before the warm-up; started_s counts from its start
        self.cold_first = cold_first
        # a sweep's setups are independent: one whose backend dies (an engine's crashed worker) ends alone, its
        # failure recorded, and the others go on; a run or an ab pair can't go on without it
        self.survive = survive_backend_loss
        self.lost: dict[int, str] = {}  # id(track) -> why its backend was lost
        # a turn's reply (the assistant message: its text and tool calls) and the perf_counter() its answer ended,
        # until its conversation's next turn
        self._replies: dict[tuple[int, int, int], tuple[dict[str, Any], float]] = {}
        self.start_at = start_at  # awaited after warm-up and probe: the perf_counter() instant to start at
        self.prompts = prompts
        self.warmup = warmup
        self.concurrency = concurrency
        self.stop = stop or Stop()
        self.reporter = reporter or NullReporter()
        # a run on a CUDA device reads the card with every sample (telemetry.GpuReader; None off CUDA)
        devices = [d for t in self.tracks if (d := getattr(t.backend, "gpu_device", None))]
        self.gpu = telemetry.GpuReader.open(devices[0]) if devices else None
        self.sampler = machine.Sampler(gpu=self.gpu)
        self.cpu_energy = telemetry.CpuEnergy()
        self.inflight: set[asyncio.Future] = set()
        self.dropping = False  # set when a stop cancels requests in flight: their CancelledError is expected
        self.fatal: BaseException | None = None
        self.active: Track | None = None
        self.done = self.total = 0
        self.t0 = 0.0
        self.measuring = False
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="llmbench-write")  # one writer: saves in order
        self._warned: set[str] = set()
        self._sleeping: asyncio.Future | None = None  # an open loop's wait for its next due time

    async def run(self, plan: Sequence[tuple[Track, Request]]) -> list[Run]:
        """Measure ``plan`` (every planned pair, done ones included: they are skipped) and return the runs.

        Raises RunInterrupted after a stop, UserError for a fatal failure (finished requests kept and saved),
        and re-raises an unexpected error after saving.
        """
        loop = asyncio.get_running_loop()

        def wake() -> None:  # from whatever thread asked (a signal handler runs on the main thread)
            loop.call_soon_threadsafe(self._on_stop)

        remove = self.stop.on_request(wake)
        try:
            todo = self._open(plan)
            if self.cold_first:
                todo = await self._cold(todo)
            if self.fatal is None and not self.stop.requested:
                await self._warm_up()
            swap0 = None
            if self.fatal is None and not self.stop.requested:  # a warm-up that failed ends the run here, saved
                await self._probe("before")
            if self.fatal is None and not self.stop.requested:
                swap0 = psutil.swap_memory()
                t0 = await self.start_at() if self.start_at is not None else self.t0 or time.perf_counter()
                if (wait := t0 - time.perf_counter()) > 0:
                    await asyncio.sleep(wait)
                self.sampler.start()
                self.cpu_energy.start()
                self._window("window_start")
                self.t0, self.measuring = t0, True
                if any(req.scheduled_s is not None for _, req in todo):
                    await self._measure_open(todo)
                else:
                    await self._measure_all(todo)
                self.sampler.stop()
                self._window("window_stop")
                if not self.stop.requested and self.fatal is None:
                    await self._probe("after")
            self._close(swap0)
        except asyncio.CancelledError:  # cancelled from outside: asyncio.run's Ctrl-C, a caller's cancel
            self.stop.signal = self.stop.signal or "SIGINT"
            self._close(None)
            raise
        finally:
            self.sampler.stop()
            if self.measuring:
                self._window("window_stop")
            remove()
            self._disk.shutdown(wait=True)
        return self._outcome()

    def _window(self, hook: str) -> None:
        """The measured window opens or closes for backends that watch something over it (a server's metrics);
        each backend once, closing at most once."""
        for backend in {id(t.backend): t.backend for t in self.tracks}.values():
            if (fn := getattr(backend, hook, None)) is not None:
                fn()

    # -- set-up ---------------------------------------------------------------------------------------------

    def _open(self, plan: Sequence[tuple[Track, Request]]) -> list[tuple[Track, Request]]:
        """A session per track; what is left to do; the warnings this session brings."""
        for t in self.tracks:
            run = t.run
            t.session = len(run.sessions)
            run.sessions.append(Session(started_at=utc_now(), environment=t.fresh.environment, load=t.fresh.load))
            for w in t.fresh.warnings:  # kept once per run (a resumed one has them already), shown once per loop
                if w not in run.warnings:
                    run.warnings.append(w)
                self._warn(w)
        done = {id(t): {(r.prompt_index, r.repeat) for r in (*t.run.requests, *t.run.ttft_requests)}
                for t in self.tracks}  # fmt: skip
        todo = []
        for t, req in plan:
            t.expected.add((req.prompt_index, req.repeat))
            if (req.prompt_index, req.repeat) not in done[id(t)]:
                todo.append((t, req))
        self.total = len(plan)
        self.done = self.total - len(todo)
        return todo

    def _warn(self, text: str) -> None:
        """Tell the user once, however many tracks (a sweep's setups, a scan's points) say the same."""
        if text not in self._warned:
            self._warned.add(text)
            self.reporter.warn(text)

    async def _cold(self, todo: list[tuple[Track, Request]]) -> list[tuple[Track, Request]]:
        """The plan's first unit (a request, or a conversation's turns) measured before any warm-up: a server's
        first request ever (``cold_first``). The clock of ``started_s`` starts at it and keeps running through the
        warm-up. What is left to do."""
        units = _units(todo)
        if not units or self.stop.requested:
            return todo
        self.t0 = time.perf_counter()
        try:
            await self._unit(units[0])
        except Exception as e:  # saving failed: the run ends, saved as far as it can be
            self.fatal = e
        return [pair for unit in units[1:] for pair in unit]

    async def _warm_up(self) -> None:
        for t in self.tracks:
            pset = t.prompts or self.prompts
            # an agent task's later step can't stand alone (it answers a call): warm-ups send first steps
            every = range(len(pset.prompts))
            firsts = [i for i in every if pset.request(i, -1).tool_result is None] if pset.asks is not None else every
            n = len(firsts)
            await self._activate(t)
            t0 = time.perf_counter()
            for w in range(self.warmup):
                i = firsts[n - 1 - w % n]
                # a workload with shared prefixes warms up on a prompt of its own (prompt_index -1)
                req = (
                    Request(pset.warmup[w % len(pset.warmup)], -1, -1 - w)
                    if pset.warmup
                    else pset.request(i, -1 - w // n)
                )
                try:
                    r = await self._call(t, req, 0.0)
                except (RequestFailed, BackendUnavailable) as e:
                    if isinstance(e, BackendUnavailable):
                        # a crashed engine's worker: recorded (a repeat below 0 is a warm-up), so the file says
                        # what happened; a refused request (a wrong setup) writes nothing, as before
                        await self._record(t, self._failure(req, f"warm-up: {e}", None, 0.0))
                        if self.survive and self._lose(t, str(e)):
                            break
                    self.fatal = UserError(f"{t.backend.label}warm-up request failed: {e}")
                    return
                if r is None:
                    return
                t.run.warmup_requests += r if isinstance(r, list) else [r]
                self.reporter.warmup(w + 1, self.warmup)
            _keep_warmup(t.run, time.perf_counter() - t0)

    def _lose(self, t: Track, why: str) -> bool:
        """Give up on ``t`` alone (its backend died); False when no other track is left to go on with."""
        self.lost[id(t)] = why
        self._warn(f"{t.backend.label}lost: {why}")
        return any(id(o) not in self.lost for o in self.tracks)

    async def _probe(self, when: str) -> None:
        if not machine.enabled():  # LLMBENCH_PROBE=off: no probe recorded, compare then says nothing of one
            return
        probes: dict[Hashable, Probe | None] = {}
        for t in self.tracks:
            key = t.backend.probe_key()
            if key is None or id(t) in self.lost:
                continue
            if key not in probes:
                try:
                    probes[key] = await t.backend.probe()
                except BackendUnavailable as e:
                    if not (self.survive and self._lose(t, str(e))):
                        self.fatal = UserError(f"{t.backend.label}{e}")
                        return
                    continue
            setattr(t, f"probe_{when}", probes[key])

    async def _activate(self, t: Track) -> None:
        if self.active is not t:
            await t.backend.activate()
            self.active = t

    # -- measuring ------------------------------------------------------------------------------------------

    async def _measure_all(self, todo: list[tuple[Track, Request]]) -> None:
        queue = list(reversed(_units(todo)))  # a unit: one request, or a conversation's turns (in order)

        async def worker() -> None:
            while queue and not self.stop.requested and self.fatal is None:
                unit = queue.pop()
                try:
                    if not await self._unit(unit):
                        return
                except Exception as e:  # saving failed (a full disk...): the run ends, saved as far as it can be
                    self.fatal = e
                    return

        await asyncio.gather(*(worker() for _ in range(min(self.concurrency, len(queue)))))

    async def _unit(self, unit: list[tuple[Track, Request]]) -> bool:
        """One request, an ab pair, or a conversation: each turn sent with the conversation so far (the replies
        it got), after its think time; a failed turn ends the conversation. False when the run must end."""
        if unit[0][1].pair is not None:
            return await self._pair(unit)
        history: list[dict[str, Any]] = []
        answered: float | None = None  # perf_counter() when the previous turn's answer ended (an agent task's step)
        for k, (t, req) in enumerate(unit):
            if id(t) in self.lost or self.stop.requested:
                return True
            if req.conversation is not None:
                if req.tool_result is not None:  # an agent task's step: each call of the last answer gets the result
                    calls = history[-1].get("tool_calls") if history else None
                    if not calls:  # the model answered without a call: the task is done, its later steps unsent
                        t.expected.difference_update((r.prompt_index, r.repeat) for _, r in unit[k:])
                        return True
                    history += [{"role": "tool", "tool_call_id": c["id"], "content": req.tool_result.content}
                                for c in calls]  # fmt: skip
                if req.tool_result is not None and answered is not None:
                    # the tool runs from the answer's end: the client's own work on the answer (parsing, checking,
                    # saving) overlaps it, and only what outlasts the latency shows in tool_wait_ms
                    if (wait := answered + req.think_s - time.perf_counter()) > 0:
                        await asyncio.sleep(wait)
                elif req.think_s > 0 and req.turn:
                    await asyncio.sleep(req.think_s)
                req = dataclasses.replace(req, messages=tuple(history))
            if not await self._one(t, req, answered):
                return False
            if req.conversation is not None:
                reply = self._replies.pop((id(t), req.prompt_index, req.repeat), None)
                if reply is None:  # the turn failed: there is no reply to go on from
                    return True
                message, answered = reply
                history += [*([] if req.tool_result else [{"role": "user", "content": req.prompt}]), message]
        return True

    async def _pair(self, unit: list[tuple[Track, Request]]) -> bool:
        """An ab pair: every side made ready for it first, untimed and at once (a backend that starts a worker
        process per group of pairs starts it here: ``ready``), then measured one after the other, or at the same
        moment (``simultaneous``: ab --duet, each on its own CPU)."""
        try:
            await asyncio.gather(*(fn(req) for t, req in unit if (fn := getattr(t.backend, "ready", None))))
        except (UserError, BackendUnavailable) as e:
            self.fatal = e if isinstance(e, UserError) else UserError(str(e))
            return False
        if self.stop.requested:
            return False
        if unit[0][1].simultaneous:
            return all(await asyncio.gather(*(self._one(t, req) for t, req in unit)))
        for t, req in unit:
            if not await self._one(t, req):
                return False
        return True

    async def _measure_open(self, todo: list[tuple[Track, Request]]) -> None:
        """Each request at its due time, whatever is in flight. A resumed run's remaining schedule starts at
        once (its first remaining request at t0); a fresh one keeps its offsets (a --workers share starts late)."""
        resumed = self.done > 0
        shift = min(req.scheduled_s or 0.0 for _, req in todo) if todo and resumed else 0.0
        tasks: list[asyncio.Task] = []
        loop = asyncio.get_running_loop()

        async def send(unit: list[tuple[Track, Request]]) -> None:  # one request, or an agent task's steps in order
            try:
                await (self._unit(unit) if len(unit) > 1 else self._one(*unit[0]))
            except Exception as e:  # saving failed: the run ends, saved as far as it can be
                self.fatal = e

        # a unit: one request, or an agent task's steps (all due at the task's arrival; a --turns conversation's
        # turns each have their own); by due time
        units = [part for u in _units(todo)
                 for part in ([u] if len({r.scheduled_s for _, r in u}) == 1 else [[x] for x in u])]  # fmt: skip
        for unit in sorted(units, key=lambda u: u[0][1].scheduled_s or 0.0):
            t, req = unit[0]
            due = self.t0 + (req.scheduled_s or 0.0) - shift
            # a loop whose clock ticks coarser than perf_counter (uvloop's is cached per iteration, in ms) can wake
            # a timer early: it waits again, so no request goes out before its due time
            while (wait := due - time.perf_counter()) > 0 and not self.stop.requested:
                # asyncio.sleep's own mechanism, but a stop can end it: it must not wait for the next due time
                # (minutes away at a low rate)
                self._sleeping = loop.create_future()
                timer = loop.call_later(wait, _wake, self._sleeping)
                await self._sleeping
                timer.cancel()
            if self.stop.requested or self.fatal is not None:
                break
            req = dataclasses.replace(req, due_ns=int(due * 1e9))
            # only a task's first step is due: the later ones wait for its answer and the tool
            later = [(lt, dataclasses.replace(r, scheduled_s=None)) for lt, r in unit[1:]]
            tasks.append(asyncio.ensure_future(send([(t, req), *later])))
        await asyncio.gather(*tasks)

    async def _one(self, t: Track, req: Request, answered: float | None = None) -> bool:
        """Measure and record one request; False when the run must end. ``answered``: perf_counter() when the
        previous step's answer ended (an agent task's later step records its wait for the tool, from there)."""
        await self._activate(t)
        now = time.perf_counter()
        started = now - self.t0
        try:
            result = await self._call(t, req, started)
        except RequestFailed as e:
            # before any success a failure means a wrong setup, except 429: a busy server (concurrency above
            # its queue) is a finding, recorded like any later failure
            if e.status != 429 and not t.run.requests and not t.run.failed_requests:
                self.fatal = UserError(f"{t.backend.label}the first request failed: {e}")
                return False
            await self._record(t, self._failure(req, str(e), e.status, started))
            return True
        except BackendUnavailable as e:
            await self._record(t, self._failure(req, str(e), None, started))
            if self.survive and self._lose(t, str(e)):
                return True
            self.fatal = UserError(f"{t.backend.label}{e}")
            return False
        except Exception as e:  # a defect: never dropped silently; recorded, then the run ends and re-raises it
            self.fatal = e
            from llmbench.core.redact import scrub

            error = scrub(f"internal error: {type(e).__name__}: {e}")  # a library's message may quote a URL
            await self._record(t, self._failure(req, error, None, started))
            return False
        if result is None:  # a stop cut it short: a partial request is not a measurement
            if self.stop.record_dropped:  # ... but a rule's stop must not keep only the luckier requests
                waited = (time.perf_counter() - self.t0 - started) * 1000
                why = f"unfinished: in flight for {waited:.0f} ms when the run was stopped ({self.stop.signal})"
                await self._record(t, self._failure(req, why, None, started))
            return False
        results = result if isinstance(result, list) else [result]
        if req.tool_result is not None and answered is not None:
            results[-1].tool_wait_ms = round((now - answered) * 1000, 3)
            results[-1].tool_wait_set_ms = req.tool_result.latency_ms
        if req.conversation is not None:  # the next turn sends this reply back
            r = results[-1]
            end_ms = r.stream_end_ms if r.stream_end_ms is not None else r.e2e_ms
            self._replies[(id(t), req.prompt_index, req.repeat)] = (reply_message(r), now + end_ms / 1000)
        for r in results:
            if req.cold is not None and r.cold is None:  # the workload's structure: first of its prefix, or not
                r.cold = req.cold
            if req.conversation is not None:
                r.conversation, r.turn = req.conversation, req.turn
            r.ttft_only = req.ttft_only
            await self._record(t, r)
        self.done += 1
        self.reporter.request(results[-1], self.done, self.total)
        return True

    async def _call(self, t: Track, req: Request, started: float) -> RequestResult | list[RequestResult] | None:
        """``measure`` as a task that a stop can cancel; None when a stop dropped it."""
        task = asyncio.ensure_future(t.backend.measure(req, self.stop, started))
        self.inflight.add(task)
        try:
            return await task
        except asyncio.CancelledError:
            if self.dropping and task.cancelled():
                return None
            raise
        finally:
            self.inflight.discard(task)

    def _on_stop(self) -> None:
        """On the event loop, at each stop request: wake an open loop waiting for its next due time; drop what
        is in flight when that is the rule."""
        _wake(self._sleeping)
        if self.stop.hard or any(t.backend.cancel_on_stop for t in self.tracks):
            self.dropping = True
            for task in list(self.inflight):
                task.cancel()

    @staticmethod
    def _failure(req: Request, error: str, status: int | None, started: float) -> FailedRequest:
        return FailedRequest(
            prompt_index=req.prompt_index, repeat=req.repeat, error=error, status=status, started_s=round(started, 6),
            scheduled_s=req.scheduled_s,
        )  # fmt: skip

    async def _record(self, t: Track, item: RequestResult | FailedRequest) -> None:
        item.session = t.session
        run = t.run
        if isinstance(item, RequestResult) and run.config.reader is not None:  # a pace other than the default
            reshape(item, run.config.reader)
        if isinstance(item, RequestResult):
            (run.ttft_requests if item.ttft_only else run.requests).append(item)
        else:
            run.failed_requests.append(item)
        if item.repeat >= 0:  # a measured request, not a warm-up
            self.reporter.outcome(item, len(self.inflight), time.perf_counter() - self.t0)
        if t.path is None:
            return
        loop = asyncio.get_running_loop()
        try:
            if t.writer is None:  # made at the first outcome: a run that fails at once writes nothing
                t.writer = await loop.run_in_executor(self._disk, RunWriter, t.path, run)
            else:
                await loop.run_in_executor(self._disk, t.writer.add, run, item, lambda: self._summarize(t))
        except OSError as e:  # a full disk, a folder made read-only: what was saved before stays readable
            # not on disk, so not kept: the run's count must say what the file holds
            kept = run.failed_requests if isinstance(item, FailedRequest) else run.ttft_requests if item.ttft_only \
                else run.requests  # fmt: skip
            kept.remove(item)  # type: ignore[arg-type]
            raise UserError(_unsaved(t.path, e)) from None

    # -- the end --------------------------------------------------------------------------------------------

    def _summarize(self, t: Track) -> None:
        probes = [p.mem_read_gbps for p in (t.probe_before, t.probe_after) if p is not None and p.method == "torch"]
        dwb = t.run.load.decode_weight_bytes if t.run.load else None
        # the roofline uses the better reading: the bandwidth the machine can reach
        endpoint = t.run.config.endpoint
        rate = endpoint.arrival.rate_rps if endpoint is not None and endpoint.arrival is not None else None
        t.run.summary = summarize(
            t.run.requests, dwb, max(probes) if probes else None, failed=len(t.run.failed_requests),
            offered_rate_rps=rate,
        )  # fmt: skip

    def _close(self, swap0) -> None:
        """Every run's machine record, summary, warnings and ``complete``; saved. Runs once, on every path."""
        stopped = self.stop.signal
        cpu_energy_j = self.cpu_energy.stop() if self.measuring else None
        for t in self.tracks:
            run = t.run
            session = [r for r in run.requests if r.session == t.session]
            if self.measuring:
                gpu = None
                if self.gpu is not None and getattr(t.backend, "gpu_device", None):
                    peaks: dict[str, int | None] = getattr(t.backend, "torch_memory_peaks", dict)()
                    gpu = telemetry.gpu_summary(self.gpu, self.sampler.gpu_samples,
                                                sum(r.output_tokens for r in session), peaks)  # fmt: skip
                    gpu["shared_by_runs"] = len(self.tracks)  # the card's energy is the window's, all runs in it
                run.machine = machine.state(swap0, t.probe_before, t.probe_after, self.sampler, gpu)
                if any(r.cpu_ms is not None for r in session):
                    run.cpu = telemetry.cpu_record(session, run.machine.summary, cpu_energy_j,
                                                   self.cpu_energy.reason, len(self.tracks))  # fmt: skip
            self._summarize(t)
            warnings = (t.backend.finish(run) + machine.swap_warnings(run.machine)
                        + telemetry.gpu_warnings(run.machine.gpu if run.machine else None))  # fmt: skip
            failed = len([f for f in run.failed_requests if f.session == t.session])
            if failed:
                warnings.append(
                    f"{failed} of {len(t.expected)} requests failed (failed_requests): the summary omits them"
                )
            if id(t) in self.lost:
                warnings.append(f"its backend was lost, the other setups went on: {self.lost[id(t)]}")
            for w in warnings:
                run.warnings.append(w)
                if self.fatal is None:  # a fatal end is one line; the file keeps the rest
                    self._warn(w)
            if stopped:
                run.sessions[t.session].interrupted_by = stopped
            have = {(r.prompt_index, r.repeat) for r in (*run.requests, *run.ttft_requests)}
            run.complete = not stopped and self.fatal is None and id(t) not in self.lost and t.expected <= have
            self._save(t)

    def _save(self, t: Track) -> None:
        if t.path is None:
            return
        try:
            if t.writer is not None:
                t.writer.close(t.run)
            elif self.fatal is None:  # nothing measured, but a stop: the file records the session
                save_run(t.run, t.path)
        except OSError as e:  # the last snapshot and the journal on disk still hold every saved request
            if self.fatal is None:
                self.fatal = UserError(_unsaved(t.path, e))

    def _outcome(self) -> list[Run]:
        runs = [t.run for t in self.tracks]
        if self.stop.requested:
            raise RunInterrupted(runs, self.tracks[0].path, self.stop.signal or "stop")
        if self.fatal is not None:
            if isinstance(self.fatal, UserError):
                kept = [f"{len(t.run.requests)} finished requests are in {t.path}" if t.run.requests else
                        f"the failure is recorded in {t.path}" for t in self.tracks if t.writer]  # fmt: skip
                raise UserError("; ".join([str(self.fatal), *kept]))
            raise self.fatal
        for t in self.tracks:
            if t.run.failed_requests and not t.run.requests and id(t) not in self.lost:
                where = f"; they are listed in {t.path}" if t.path else ""
                raise UserError(f"every request failed (first: {t.run.failed_requests[0].error}){where}")
        return runs


def _unsaved(path: Path, e: OSError) -> str:
    return f"cannot save to {path}: {e.strerror or e}"


def _wake(fut: asyncio.Future | None) -> None:
    if fut is not None and not fut.done():
        fut.set_result(None)


async def execute(
    tracks: Sequence[Track], plan: Sequence[tuple[Track, Request]], prompts: PromptSet, **loop_options: Any
) -> list[Run]:
    """Run ``plan`` with a new :class:`RunLoop` (``loop_options``: its keyword arguments: ``warmup``,
    ``concurrency``, ``stop``, ``reporter``, ``start_at``, ``survive_backend_loss``, ``cold_first``); the runs, in
    the order of ``tracks``."""
    return await RunLoop(tracks, prompts, **loop_options).run(plan)


def reply_message(r: RequestResult) -> dict[str, Any]:
    """The assistant message a conversation's next turn sends back for ``r``: its text and tool calls."""
    # the text as it came, "" beside calls alone (OpenAI allows null there; llama-cpp-python's server refuses it)
    message: dict[str, Any] = {"role": "assistant", "content": r.output_text}
    if r.tool_calls:
        ids = r.tool_call_ids or []
        message["tool_calls"] = [
            {"id": ids[k] if k < len(ids) and ids[k] else f"call_{r.prompt_index}_{k}", "type": "function",
             "function": {"name": name, "arguments": args}}
            for k, (name, args) in enumerate(zip(r.tool_call_names or [], r.tool_call_arguments or [], strict=True))
        ]  # fmt: skip
    return message


def _units(todo: list[tuple[Track, Request]]) -> list[list[tuple[Track, Request]]]:
    """Consecutive turns of one conversation (same track and repeat) as one unit, and an ab pair's requests (the
    same ``pair``) as one; every other request alone."""
    units: list[list[tuple[Track, Request]]] = []
    for t, req in todo:
        last = units[-1][-1] if units else None
        same_pair = last is not None and req.pair is not None and last[1].pair == req.pair
        if same_pair or (req.conversation is not None and last is not None and last[0] is t
                         and last[1].conversation == req.conversation and last[1].repeat == req.repeat):  # fmt: skip
            units[-1].append((t, req))
        else:
            units.append([(t, req)])
    return units


def scheduled(track: Track, prompts: PromptSet, offsets: Sequence[float]) -> list[tuple[Track, Request]]:
    """An open-loop plan: request i is prompt ``i % len(prompts)`` (its repeat ``i // len(prompts)``), due at
    ``offsets[i]``. A workload of agent tasks schedules tasks instead: task i is task ``i % tasks`` (repeat
    ``i // tasks``), every step of it due at ``offsets[i]`` (its later steps follow its answers: the loop sends
    each after the previous one, as a conversation's turns)."""
    asks = prompts.asks
    if prompts.turns is None or asks is None or not any(a is not None and a.results for a in asks):
        n = len(prompts.prompts)
        return [(track, prompts.request(i % n, i // n, scheduled_s=offset)) for i, offset in enumerate(offsets)]
    steps: dict[int, list[int]] = {}
    for index, (task, _) in enumerate(prompts.turns):
        steps.setdefault(task, []).append(index)
    tasks = list(steps.values())
    return [(track, prompts.request(index, i // len(tasks), scheduled_s=offset))
            for i, offset in enumerate(offsets) for index in tasks[i % len(tasks)]]  # fmt: skip


def round_robin(tracks: Sequence[Track], prompts: PromptSet, repeats: int) -> list[tuple[Track, Request]]:
    """The plan of a single run: the whole prompt list, ``repeats`` times round (drift hits every prompt alike)."""
    n = len(prompts.prompts)
    return [(t, prompts.request(i, rep)) for t in tracks for rep in range(repeats) for i in range(n)]


def _keep_warmup(run: Run, seconds: float) -> None:
    """The cold start's last phases in ``run.load.phases``: the warm-up's seconds and the first request's TTFT
    after loading (the first warm-up's; without warm-ups the first measured request has it, see
    :func:`llmbench.results.metrics.cold_start`). A run resumed keeps the phases of its first process."""
    if run.load is None or (run.load.phases or {}).get("warmup_s") is not None or not run.warmup_requests:
        return
    first = next((r.ttft_ms for r in run.warmup_requests if r.ttft_ms is not None), None)
    run.load.phases = {**(run.load.phases or {}), "warmup_s": round(seconds, 3), "first_ttft_ms": first}
