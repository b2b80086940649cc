"""``llmbench run``: one backend (a model in this process, or a server), the prompt list ``repeats`` times round."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from llmbench.backends import Backend
from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.drivers import workload
from llmbench.options import EndpointOptions, ModelOptions, RunOptions, client_processes
from llmbench.results.schema import Run
from llmbench.results.storage import claim, default_output_path, load_run, prepare_dir, prepare_output, save_run
from llmbench.runner.loop import Reporter, check_resumable, execute, new_track, round_robin, scheduled
from llmbench.workloads import sessions

if TYPE_CHECKING:
    from llmbench.engines.base import EngineModel
    from llmbench.engines.hf.models import LoadedModel

# what a run measures: a model to load, a model loaded already (transformers' or another engine's), or a server
Target = Union[ModelOptions, EndpointOptions, "LoadedModel", "EngineModel"]


def make_backend(
    target: Target, options: RunOptions, label: str = "", *, reporter: Reporter | None = None,
    in_process: bool = False,
) -> Backend:  # fmt: skip
    """The backend for ``target``: a model to load here (or loaded already), or a server to stream from. An engine
    other than transformers runs in a worker process of its own unless ``target.isolate`` is False or
    ``in_process`` (a crash of its native code then ends this process)."""
    if isinstance(target, EndpointOptions):
        from llmbench.backends.endpoint import EndpointBackend

        return EndpointBackend(target, options, label=label)
    if isinstance(target, ModelOptions) and not target.is_transformers:
        from llmbench import engines

        engines.validate(target)
        engines.check_run_options(target.engine, options)
        if target.isolate is False or in_process:
            from llmbench.backends.engine import EngineBackend

            return EngineBackend(target, options, label=label, on_status=reporter.status if reporter else None)
        from llmbench.backends import worker_main as worker
        from llmbench.backends.worker import WorkerBackend

        folder = Path(tempfile.mkdtemp(prefix="llmbench-worker-"))  # its spec file; removed when it closes
        return WorkerBackend(worker.command(target, folder), options, label=label, name=f"the {target.engine} worker",
                             on_stderr=reporter.status if reporter else None, spec_dir=folder)  # fmt: skip
    from llmbench.engines.base import EngineModel

    if isinstance(target, EngineModel):  # an engine loaded already (llmbench.load_model(engine=...))
        from llmbench.backends.engine import EngineBackend

        spec = ModelOptions(model=target.name, weights=target.weights, engine=target.engine)
        return EngineBackend(spec, options, loaded=target, label=label)
    from llmbench.backends.inprocess import InProcessBackend  # torch: imported only for in-process runs

    if isinstance(target, ModelOptions):
        return InProcessBackend(target, options, label=label)
    return InProcessBackend(None, options, loaded=target, label=label)


async def run(
    prompts: workload.Source,
    target: Target,
    options: RunOptions,
    *,
    output: str | Path | None = None,
    overwrite: bool = False,
    default_dir: str | Path | None = None,
    resume: str | Path | None = None,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
    spec: dict | None = None,
) -> tuple[Run, Path | None]:
    """Measure ``prompts`` on ``target``; the run and the file it was written to. Files: ``output`` (or, when
    None, a new name in ``default_dir``; neither: no file), or ``resume``, an incomplete run to continue.
    ``spec``: the settings asked for (:meth:`llmbench.spec.Spec.setup`), recorded as ``config.spec`` with its
    ``[prompts]`` naming ``prompts`` (:func:`llmbench.drivers.workload.recorded`).

    Every bad input is a UserError before anything slow (the prompt file, options, the output place, a
    resume's setup as far as it is known before loading); the rest is checked before the first request.
    """
    options.check()
    options = options.replaced()  # a dataset's output lengths set its own copy's max_new_tokens
    spec = workload.recorded(spec, prompts)  # the prompts measured, over a config file's
    if options.turns > 1 and resume is not None:
        raise UserError("--turns: a conversation's turns send the replies it got, which --resume can't recover")
    if options.turns > 1 and isinstance(target, EndpointOptions) and target.open_loop is not None:
        raise UserError("--turns runs conversations in a closed loop (--concurrency of them): drop --rate/--trace")
    pending = workload.begin(prompts, options)  # a dataset is read now: a bad file fails before anything loads
    known = pending.known
    asks = known.asks if known is not None else None
    if known is not None and not isinstance(target, EndpointOptions):  # before a model loads: a server reads them
        known.text_only("a model in this process")
    if asks is not None and resume is not None and any(a is not None and a.results for a in asks):
        raise UserError("agent tasks send the answers they got (their tool calls), which --resume can't recover")
    if isinstance(target, EndpointOptions):
        target = _dealt(target, options, pending, resume)
        if target.processes > 1 or (target.open_loop is not None and target.open_loop.ray):
            return await _shared(pending, target, options, output, overwrite, default_dir, resume, stop, reporter,
                                 spec)  # fmt: skip
    pending.check_target(target)
    # made or chosen by the tokenizer here: an engine then runs in this process
    backend = make_backend(target, options, reporter=reporter, in_process=pending.counted_here)
    previous = path = None
    if resume is not None:
        if output is not None and Path(output).resolve() != Path(resume).resolve():
            raise UserError("--resume writes into the run it continues: drop -o/--output")
        path = claim(Path(resume), replace=True)  # two resumes of one run would each append the other's requests
        previous = load_run(path)
        if pending.known is not None:  # prompts made by the tokenizer are known once it is: checked then
            check_resumable(previous, path, backend.early_config(pending.known))
    elif output is not None:
        path = prepare_output(output, overwrite)
    elif default_dir is not None:
        prepare_dir(default_dir)  # before loading: a place that can't be written fails now
    prepared = await workload.prepare(pending, backend, options)
    prompts = prepared.prompts
    server = getattr(backend, "server", None)  # --server-command: started, measured and stopped by this run
    try:
        if server is not None:
            await server.boot(path, default_dir, stop or Stop(), reporter.status if reporter else None,
                              append=resume is not None)  # fmt: skip
        await backend.start(prompts)
        try:
            track = new_track(backend, prompts, path, previous)
            if spec is not None and not isinstance(target, (ModelOptions, EndpointOptions)):
                spec = _loaded_model(spec, track.fresh.config)
            for record in (track.fresh, track.run):
                prepared.annotate(record.config)
                record.config.spec = spec if spec is not None else record.config.spec
            if path is None and default_dir is not None:
                track.path = default_output_path(track.fresh.config.model, track.fresh.config.device, default_dir)
                if server is not None:
                    server.move_log_beside(track.path)
            if reporter is not None:
                reporter.status(started_line(track.fresh))
            concurrency = target.concurrency if isinstance(target, EndpointOptions) else 1
            offsets = getattr(backend, "offsets", None)
            plan = scheduled(track, prompts, offsets) if offsets else round_robin([track], prompts, options.repeats)
            plan = sessions.with_think_time(plan, options.think_time_s) if options.turns > 1 else plan
            runs = await execute([track], plan, prompts, warmup=options.warmup, concurrency=concurrency, stop=stop,
                                 reporter=reporter, cold_first=server is not None)  # fmt: skip
        finally:
            await backend.close()
    finally:
        if server is not None:
            server.close()  # whatever the end: SIGTERM to its process group, SIGKILL after a grace period
    return runs[0], track.path


ONE_CLIENT = "--probe-rate sends the probes from the load's own client process: drop --workers/--ray"


async def run_beside(
    prompts: workload.Source,
    target: EndpointOptions,
    beside: EndpointOptions,
    options: RunOptions,
    *,
    output: str | Path | None = None,
    beside_output: str | Path | None = None,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
) -> tuple[Run, Run]:
    """Two open loops against servers (load's rate and its probes, ``load --probe-rate``) on one event loop and one
    clock, each request at its own schedule's due time: the runs of ``target`` and of ``beside``, each written to
    its own file. One client process (its requests must share the clock they are stamped on)."""
    options.check()
    options = options.replaced()
    pending = workload.begin(prompts, options)
    for side in (target, beside):
        if side.open_loop is None or side.open_loop.rate is None:
            raise UserError("requests beside a load need an open loop at a rate on both sides")
        if side.open_loop.ray or (side.open_loop.workers or 1) > 1:
            raise UserError(ONE_CLIENT)
        side.check()
        pending.check_target(side)
    paths = [prepare_output(p, False) if p is not None else None for p in (output, beside_output)]
    backends = [make_backend(t, options, reporter=reporter, in_process=pending.counted_here) for t in (target, beside)]
    prepared = await workload.prepare(pending, backends[0], options)
    prompts = prepared.prompts
    try:
        for b in backends:
            await b.start(prompts)
        tracks = [new_track(b, prompts, p) for b, p in zip(backends, paths, strict=True)]
        for track in tracks:
            for record in (track.fresh, track.run):
                prepared.annotate(record.config)
        if reporter is not None:
            reporter.status(f"{started_line(tracks[0].fresh)}; beside it {started_line(tracks[1].fresh)}")
        plan = [item for track, b in zip(tracks, backends, strict=True)
                for item in scheduled(track, prompts, getattr(b, "offsets", []))]  # fmt: skip
        runs = await execute(tracks, plan, prompts, warmup=options.warmup, concurrency=1, stop=stop,
                             reporter=reporter)  # fmt: skip
    finally:
        for b in backends:
            await b.close()
    return runs[0], runs[1]


def _dealt(target: EndpointOptions, options: RunOptions, pending: workload.Pending, resume: object) -> EndpointOptions:
    """``target`` with its client processes decided (:func:`llmbench.options.client_processes`): ``--workers``, or
    as many as its streams (a closed loop) or its expected events (an open loop) need, where the run can be
    dealt out to processes at all."""
    ol = target.open_loop
    unshared = ("--turns runs each conversation in one process" if options.turns > 1
                else "--resume continues one process's run" if resume is not None
                else "--server-command measures its server's first request from one process" if target.server_command
                else "a trace is replayed from one client process" if ol is not None and ol.replay is not None
                else "prompts made or chosen by the tokenizer are known in one process" if pending.known is None
                else "a workload with tools or response_format is sent from one process" if pending.known.asks
                else None)  # fmt: skip
    if ol is not None:
        events = (ol.rate or 0.0) * options.max_new_tokens  # a replayed trace: one process (unshared)
        n = client_processes(ol.workers, streams=None, events_per_s=events, unshared=None if ol.ray else unshared)
        return target.replaced(open_loop=ol.replaced(workers=n))
    n = client_processes(target.workers, streams=target.concurrency, events_per_s=None, unshared=unshared)
    return target.replaced(workers=n)


def _loaded_model(spec: dict, config: Any) -> dict:
    """The recorded spec of a run of a model loaded before (``measure(model=load_model(...))``): its ``[model]``
    says what was loaded (the spec's loading settings did not apply), so that a replay loads the same."""
    loaded = {"model": config.model, "weights": config.weights, "dtype": config.dtype, "device": config.device,
              "threads": config.threads, "engine": config.engine}  # fmt: skip
    return {**spec, "model": {**spec.get("model", {}), **{k: v for k, v in loaded.items() if v is not None}}}


async def _shared(
    pending: workload.Pending,
    target: EndpointOptions,
    options: RunOptions,
    output: str | Path | None,
    overwrite: bool,
    default_dir: str | Path | None,
    resume: str | Path | None,
    stop: Stop | None,
    reporter: Reporter | None,
    spec: dict | None,
) -> tuple[Run, Path | None]:
    """A run dealt out to client processes (or an open loop's Ray tasks): see :mod:`llmbench.runner.loadgen`."""
    from llmbench.core.errors import RunInterrupted
    from llmbench.runner import loadgen

    target.check()
    if resume is not None:
        raise UserError("--resume continues one process's run; a run over --workers or --ray can't resume")
    prompts = pending.fixed()
    path = prepare_output(output, overwrite) if output is not None else None
    if path is None and default_dir is not None:
        prepare_dir(default_dir)
    ol = target.open_loop
    if reporter is not None:
        from llmbench.core.redact import redact_url

        where = f"Ray tasks on {redact_url(ol.ray)}" if ol is not None and ol.ray else "local client processes"
        what = (f"{target.concurrency} streams at a time" if ol is None else "a trace replayed"
                if ol.rate is None else f"open loop at {ol.rate:g}/s")  # fmt: skip
        reporter.status(f"streaming to {redact_url(target.endpoint)}, {what} over {target.processes} {where}")
    spread = loadgen.run_ray if ol is not None and ol.ray else loadgen.run_local
    run, stopped = await spread(prompts, target, options, stop)
    run.config.spec = spec
    if path is None and default_dir is not None:
        path = default_output_path(run.config.model, run.config.device, default_dir)
    if path is not None:
        save_run(run, path)
    if stopped:
        raise RunInterrupted([run], path, stopped)
    if not run.requests:
        first = run.failed_requests[0].error if run.failed_requests else "none was sent"
        raise UserError(f"every request failed (first: {first})")
    return run, path


def started_line(run: Run) -> str:
    """One line on what is about to be measured."""
    c, load = run.config, run.load
    if c.endpoint is not None and c.endpoint.arrival is not None and c.endpoint.arrival.trace:
        a, t = c.endpoint.arrival, c.endpoint.arrival.trace
        return (f"streaming to {c.endpoint.url} (model {c.model}), replaying {t['path']} ({t['format']}): "
                f"{a.requests} requests over {a.duration_s:g} s (times x{t['time_scale']:g}), expected prefix "
                f"reuse {t['prefix_reuse_expected']:.1%}")  # fmt: skip
    if c.endpoint is not None and c.endpoint.arrival is not None:
        a = c.endpoint.arrival
        return (
            f"streaming to {c.endpoint.url} (model {c.model}), open loop: {a.requests} requests at "
            f"{a.rate_rps:g}/s ({a.process}{f' cv {a.cv:g}' if a.process == 'gamma' else ''}, seed {a.seed})"
        )
    if c.endpoint is not None:
        return f"streaming to {c.endpoint.url} (model {c.model}), {c.endpoint.concurrency} at a time"
    line = f"{c.model} on {c.device}: {c.dtype} ({c.dtype_reason}), {c.threads} threads"
    if load is not None:
        line += f", {(load.parameters or 0) / 1e6:.1f}M parameters, loaded in {load.seconds:.1f} s"
        if load.compile_s is not None:
            line += f", compiled in {load.compile_s:.1f} s (load.compile_s, before the first request)"
    return line
