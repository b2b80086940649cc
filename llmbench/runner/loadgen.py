"""Load generators that share one run's requests: ``--workers N`` local processes, or N Ray tasks.

One asyncio process has a ceiling: past some rate or some number of streams its own event loop delays the next
send and reads every stream late, and its delay becomes the measurement (benchmarks/README.md, "load generator
ceiling", "the client that keeps up"). With N workers, request i (of an open loop's schedule, or of a closed loop's
prompts x repeats) goes to worker ``i % N``; a closed loop's ``--concurrency`` streams are split among them. Each
worker is an ordinary endpoint backend driven by the one run loop, stamping its own requests. They start at one
instant: every worker reports ready (server probed, warm-up done by worker 0), then the parent names a start time on
the wall clock (``time.time()``, the clock every process of a host, and NTP-synced hosts, share) and each converts
it to its own ``perf_counter``. The parent merges the workers' runs into one run JSON, ordered by due time.

Ray (``--ray ADDRESS``, ``pip install llmbench[ray]``): the same worker function runs as Ray tasks; the ready
count and the start time go through a small actor.
"""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing as mp
import os
import queue
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.metrics import summarize
from llmbench.results.schema import Run
from llmbench.workloads.prompts import PromptSet

START_MARGIN_S = 0.5  # between "everyone is ready" and the common start: time for the start to reach them all
READY_TIMEOUT_S = 300.0  # a worker that is not ready by then (server probe, warm-up) fails the run


@dataclasses.dataclass
class Share:
    """What one worker measures: its place among ``workers`` and everything to build its backend."""

    index: int
    workers: int
    prompts: PromptSet
    endpoint: EndpointOptions
    options: RunOptions

    @property
    def streams(self) -> int:
        """A closed loop's streams in flight in this worker: its share of ``--concurrency``."""
        c = self.endpoint.concurrency
        return c // self.workers + (1 if self.index < c % self.workers else 0)


def measure_share(share: Share, ready: Callable[[], float]) -> dict[str, Any]:
    """In a worker: measure requests ``share.index``, ``+ workers``, ... of the schedule (or of a closed loop's
    prompts x repeats, with its share of the streams); ``ready()`` blocks until the common start and returns it
    (``time.time()`` seconds). Returns ``{"run": ..., "loop_lags": [...]}`` (JSON; the lags its event loop showed,
    ms), with ``"interrupted"`` after a stop, or ``{"error": "..."}``."""
    from llmbench.backends.endpoint import EndpointBackend
    from llmbench.core.process import stop_on_signals
    from llmbench.runner.loop import execute, new_track

    made: list[EndpointBackend] = []  # the backend, for its event loop's lag samples once the run is over

    async def main(stop: Stop) -> Run:
        backend = EndpointBackend(share.endpoint, share.options)
        made.append(backend)
        backend.probing = share.index == 0  # one calibration probe per host is enough, and quieter
        n = len(share.prompts.prompts)
        # an open loop's due times, or a closed loop's (prompt, repeat) order (round_robin's): every N-th is ours
        offsets: list[float | None] = list(backend.offsets) or [None] * (n * share.options.repeats)
        mine = [(i, o) for i, o in enumerate(offsets) if i % share.workers == share.index]
        await backend.start(share.prompts)
        try:
            track = new_track(backend, share.prompts, None)
            plan = [(track, share.prompts.request(i % n, i // n, scheduled_s=o)) for i, o in mine]

            async def start_at() -> float:
                start_unix = await asyncio.get_running_loop().run_in_executor(None, ready)
                return time.perf_counter() + (start_unix - time.time())

            warmup = share.options.warmup if share.index == 0 else 0
            runs = await execute([track], plan, share.prompts, warmup=warmup, stop=stop, start_at=start_at,
                                 concurrency=max(share.streams, 1) if not backend.offsets else 1)  # fmt: skip
        finally:
            await backend.close()
        return runs[0]

    def lags() -> list[float]:
        return [round(v, 3) for v in made[0].loop_lags] if made else []

    def dumped(run: Run) -> dict[str, Any]:
        if run.client is not None:  # --ray: the machine each worker ran on, for the warning that names one
            run.client.host = socket.gethostname()
        return run.model_dump(mode="json")

    with stop_on_signals() as stop:
        try:
            run = asyncio.run(main(stop))
        except RunInterrupted as e:
            return {"run": dumped(e.runs[0]), "interrupted": e.signal_name, "loop_lags": lags()}
        except UserError as e:
            return {"error": str(e)}
    return {"run": dumped(run), "loop_lags": lags()}


def merge(parts: list[Run], workers: int, loop_lags: list[list[float]] | None = None) -> Run:
    """One run from the workers' runs: requests ordered by due time (a closed loop's by start), the first worker's
    record (config, environment, probes, warm-ups), the clients' CPU added up and their self-check redone over
    every request and every worker's event-loop lag (``loop_lags``), the summary and lateness recomputed."""
    from llmbench.backends.endpoint import disagreement_warning, lateness_warning
    from llmbench.results.client import behind_warning, client_record

    run = parts[0].model_copy(deep=True)
    e = run.config.endpoint
    assert e is not None
    run.requests = sorted((r for p in parts for r in p.requests), key=lambda r: (r.scheduled_s or 0.0, r.started_s))
    run.failed_requests = sorted((f for p in parts for f in p.failed_requests), key=lambda f: f.scheduled_s or 0.0)
    clients = [p.client for p in parts if p.client is not None]
    if clients:
        lags = loop_lags or [[] for _ in parts]
        sched = [(c.sched_wait_ms, c.sched_runs) for c in clients
                 if c.sched_wait_ms is not None and c.sched_runs is not None]  # fmt: skip
        run.client = client_record(run.requests, sum(c.cpu_s for c in clients), max(c.wall_s for c in clients),
                                   lags, processes=workers, sched=sched)  # fmt: skip
        run.client.per_process = [
            client_record(p.requests, p.client.cpu_s, p.client.wall_s, [lag],
                          sched=[(p.client.sched_wait_ms, p.client.sched_runs)]
                          if p.client.sched_wait_ms is not None and p.client.sched_runs is not None else None)
            for p, lag in zip(parts, lags, strict=True) if p.client is not None]  # fmt: skip
        for record, c in zip(run.client.per_process, clients, strict=True):
            record.host = c.host
    e.workers = workers
    run.summary = summarize(run.requests, failed=len(run.failed_requests),
                            offered_rate_rps=e.arrival.rate_rps if e.arrival is not None else None)  # fmt: skip
    # per-worker verdicts on lateness, the client and token counts are replaced by the merged run's
    own = ("THE CLIENT FELL BEHIND", "token counts disagree", "requests failed (failed_requests)", "is buffered")
    warnings = list(dict.fromkeys(w for p in parts for w in p.warnings if not any(o in w for o in own)))
    for said in (lateness_warning(run), behind_warning(run)):
        if said is not None:
            warnings.append(said)
    if run.summary and run.summary.token_count_disagreements:
        warnings.append(disagreement_warning(run))
    if run.summary and run.summary.stream_buffered and not (run.client and run.client.fell_behind):
        from llmbench.backends.endpoint import buffered_warning

        warnings.append(buffered_warning(run))
    if run.failed_requests:
        sent = e.arrival.requests if e.arrival is not None else len(run.requests) + len(run.failed_requests)
        warnings.append(f"{len(run.failed_requests)} of {sent} requests failed (failed_requests): the summary omits "
                        "them")  # fmt: skip
    run.warnings = warnings
    run.complete = all(p.complete for p in parts)
    return run


def _process_main(share: Share, events: Any, start: Any, start_value: Any) -> None:
    """A local worker process: report ready, wait for the start, measure, send the result."""

    def ready() -> float:
        events.put(("ready", share.index, None))
        start.wait()
        return float(start_value.value)

    try:
        result = measure_share(share, ready)
    except BaseException as e:  # a defect in a worker: reported to the parent as one line, never lost
        from llmbench.core.redact import scrub

        result = {"error": f"worker {share.index}: internal error: {type(e).__name__}: {scrub(str(e))}"}
    events.put(("result", share.index, result))


async def run_local(
    prompts: PromptSet, endpoint: EndpointOptions, options: RunOptions, stop: Stop | None
) -> tuple[Run, str | None]:
    """Measure ``endpoint``'s requests (its open loop's schedule, or its closed loop's streams) with its client
    processes: the merged run, and the signal that stopped it (None: it ran to the end). A stop reaches the
    workers as SIGINT; what they finished is kept."""
    n = endpoint.processes
    ctx = mp.get_context("spawn")  # a clean interpreter: no inherited event loop, threads or signal handlers
    events, start, start_value = ctx.Queue(), ctx.Event(), ctx.Value("d", 0.0)
    procs = [ctx.Process(target=_process_main, args=(Share(k, n, prompts, endpoint, options), events, start,
                                                     start_value), daemon=True) for k in range(n)]  # fmt: skip
    for p in procs:
        p.start()

    def forward_stop() -> None:
        for p in procs:
            if p.pid is not None and p.is_alive():
                os.kill(p.pid, signal.SIGINT)

    remove = (stop or Stop()).on_request(forward_stop)
    loop = asyncio.get_running_loop()
    results: dict[int, dict] = {}
    ready = 0
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while len(results) < n:
            try:
                kind, k, payload = await loop.run_in_executor(None, events.get, True, 0.5)
            except queue.Empty:
                if ready < n and time.monotonic() > deadline:
                    raise UserError(f"only {ready} of {n} workers were ready after {READY_TIMEOUT_S:.0f} s") from None
                if not any(p.is_alive() for p in procs) and events.empty():
                    raise UserError("a worker process died without a result") from None
                continue
            if kind == "ready":
                ready += 1
                if ready == n:
                    start_value.value = time.time() + START_MARGIN_S
                    start.set()
            else:
                if "error" in payload:
                    raise UserError(payload["error"])
                results[k] = payload
    finally:
        remove()
        if len(results) < n:
            forward_stop()
            start.set()  # a worker waiting for the start must not wait for ever
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return _finish(results, n)


def _finish(results: dict[int, dict], n: int) -> tuple[Run, str | None]:
    """The merged run, and the signal that stopped a worker (None: none did)."""
    run = merge([Run.model_validate(results[k]["run"]) for k in range(n)], n,
                [results[k].get("loop_lags") or [] for k in range(n)])  # fmt: skip
    stopped = [r["interrupted"] for r in results.values() if "interrupted" in r]
    return run, (stopped[0] if stopped else None)


async def run_ray(
    prompts: PromptSet, endpoint: EndpointOptions, options: RunOptions, stop: Stop | None
) -> tuple[Run, str | None]:
    """As :func:`run_local`, with the workers as Ray tasks on the cluster at ``open_loop.ray`` ("local": start
    one here)."""
    from llmbench.core.errors import require

    require("--ray", "ray", "ray")
    import ray

    assert endpoint.open_loop is not None and endpoint.open_loop.ray is not None
    n, address = endpoint.processes, endpoint.open_loop.ray
    started_here = not ray.is_initialized()
    if started_here:
        try:
            ray.init(address=None if address == "local" else address, log_to_driver=False,
                     include_dashboard=False)  # fmt: skip
        except (ConnectionError, RuntimeError, ValueError) as e:
            raise ray_join_error(address, e) from None
    try:
        barrier: Any = ray.remote(num_cpus=0)(_Barrier).remote(n)
        task: Any = ray.remote(num_cpus=1)(_ray_share)
        refs = [task.remote(Share(k, n, prompts, endpoint, options), barrier) for k in range(n)]
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            ready: int = await loop.run_in_executor(None, ray.get, barrier.ready_count.remote())
            if ready >= n:
                break
            done, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            failed = [ray.get(r) for r in done if "error" in ray.get(r)]
            if failed:
                raise UserError(failed[0]["error"])
            if time.monotonic() > deadline or (stop is not None and stop.requested):
                raise UserError(f"the {n} Ray workers were not all ready after {READY_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.05)
        ray.get(barrier.set_start.remote(time.time() + START_MARGIN_S))
        results = dict(enumerate(await loop.run_in_executor(None, ray.get, refs)))
    finally:
        if started_here:
            ray.shutdown()
    for r in results.values():
        if "error" in r:
            raise UserError(r["error"])
    return _finish(results, n)


def ray_join_error(address: str, e: Exception) -> UserError:
    """The one line for a cluster that can't be joined: the address (and Ray's message, which repeats it)
    redacted, as an address may carry a user, a password or a token."""
    from llmbench.core.redact import mask, redact_url, url_secrets

    first = (str(e).splitlines() or [type(e).__name__])[0]
    return UserError(f"--ray {redact_url(address)}: cannot join the cluster: {mask(first, url_secrets(address))}")


class _Barrier:
    """A Ray actor: counts ready workers and holds the common start time."""

    def __init__(self, n: int) -> None:
        self.n, self.ready = n, 0
        self.start: float | None = None

    def mark_ready(self) -> None:
        self.ready += 1

    def ready_count(self) -> int:
        return self.ready

    def set_start(self, t: float) -> None:
        self.start = t

    def start_time(self) -> float | None:
        return self.start


def _ray_share(share: Share, barrier: Any) -> dict[str, Any]:
    import ray

    def ready() -> float:
        ray.get(barrier.mark_ready.remote())
        while (t := ray.get(barrier.start_time.remote())) is None:
            time.sleep(0.01)
        return float(t)

    return measure_share(share, ready)
