"""The Python API: what the CLI, the benchmarks and a notebook call. A sync and an async face over one core.

    import llmbench
    run = llmbench.measure(["Why is the sky blue?"], weights="random", max_new_tokens=16)
    run.summary.ttft_ms.mean

``measure`` writes no file unless ``output`` is given, installs no signal handler and leaves the garbage
collector alone (see :func:`llmbench.stop_on_signals` and :func:`llmbench.frozen_gc` to opt in).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.options import (
    EndpointOptions,
    ModelOptions,
    RunOptions,
    endpoint_options_of,
    model_options_of,
    open_loop_of,
    run_options_of,
)
from llmbench.results.schema import Run
from llmbench.runner.loop import Reporter
from llmbench.spec import DEFAULT_DURATION_S, RunSpec
from llmbench.spec.commands import LoadTestSpec, QualitySpec
from llmbench.workloads.dataset import DatasetSpec
from llmbench.workloads.prompts import PromptSet, as_prompt_set

if TYPE_CHECKING:
    from llmbench.engines.base import EngineModel
    from llmbench.engines.hf.models import LoadedModel

# the quality and load commands' defaults, as their specs declare them (one declaration: the keywords below read it)
_QUALITY: Any = QualitySpec.defaults()
_LOAD: Any = LoadTestSpec.defaults()

P = ParamSpec("P")
R = TypeVar("R")


def _sync(coro_fn: Callable[P, Awaitable[R]]) -> Callable[P, R]:
    """The blocking face of ``coro_fn``: its own event loop, or, when called inside a running one (a
    notebook), a helper thread with one."""

    @functools.wraps(coro_fn)
    def run(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(coro_fn(*args, **kwargs))  # type: ignore[arg-type]
        with ThreadPoolExecutor(1, thread_name_prefix="llmbench-measure") as ex:
            return ex.submit(asyncio.run, coro_fn(*args, **kwargs)).result()  # type: ignore[arg-type]

    return run


def run_options(**settings: Any) -> RunOptions:
    """:class:`RunOptions` from spec settings by name (:class:`llmbench.spec.RunSpec`'s fields; the rest keep the
    spec's defaults): ``ignore_eos`` unset is on with random ``weights``; ``compile`` decodes on the static cache."""
    spec = RunSpec.of(settings)
    return run_options_of(spec.requests, spec.levers, spec.reader)


def model_options(model: str | None = None, **settings: Any) -> ModelOptions:
    """:class:`ModelOptions` from spec settings by name: ``model`` None is the default model, ``quantize`` None is
    "none"; ``device_map`` may also be a dict (accelerate's, kept as its JSON text), ``isolate`` runs an engine in
    this process (False)."""
    isolate = settings.pop("isolate", None)
    return model_options_of(RunSpec.of({"model": model, **settings}).model, isolate=isolate)


async def ameasure(
    prompts: Sequence[str] | str | Path | PromptSet | DatasetSpec | None = None,
    spec: RunSpec | None = None,
    *,
    model: str | LoadedModel | EngineModel | None = None,
    endpoint: str | EndpointOptions | None = None,
    server_metrics: bool | str = False,
    isolate: bool | None = None,
    device_map: str | dict[str, Any] | None = None,
    output: str | Path | None = None,
    overwrite: bool = False,
    resume: str | Path | None = None,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
    **settings: Any,
) -> Run:
    """Measure TTFT and TPOT of every prompt, in this process or (``endpoint``) on a server; the run.

    ``spec``: everything ``llmbench run`` takes (:class:`llmbench.spec.RunSpec`, e.g. read from a config file
    with :func:`load_spec`); ``settings``: any of its fields by name, over it (``max_new_tokens=16``,
    ``dtype="bfloat16"``, ``turns=3``, ``think_time_s=0.5``, ``rate=2.0``, ...). ``prompts``: a list of strings, a
    prompt file's path, a prompt set or a dataset spec; None: the spec's own (a file, ``synthetic``, a dataset,
    prefix groups or a trace). ``model``: a hub id, a folder or a .gguf file (default Qwen/Qwen2.5-0.5B-Instruct),
    or a model :func:`load_model` loaded (measured again without loading; the loading settings then don't apply);
    with ``endpoint``, the model name to send. ``ignore_eos`` unset: on with random weights (their text is
    meaningless, so the length is fixed). A file is written only at ``output`` (or ``resume``, an incomplete run to
    continue); ``history`` (a URL or .db file) records the written run there, as ``run --history`` does. Safe
    inside a running event loop: an in-process model generates on its own thread. ``engine``s
    other than transformers run in a worker process unless ``isolate=False``. ``server_metrics`` (endpoint runs):
    True scrapes the server's ``/metrics`` during the run, a URL scrapes that page (``run.server_metrics``).
    Raises :class:`~llmbench.core.errors.UserError` for bad input (a setting no spec has, a value out of its
    bounds) and :class:`~llmbench.core.errors.RunInterrupted` when ``stop`` was requested.
    """
    from llmbench.drivers import workload
    from llmbench.drivers.run import run as run_driver

    named = dict(settings)
    if device_map is not None:  # a dict is kept as its JSON text (the spec's model section)
        named["device_map"] = device_map
    if isinstance(model, str):
        named["model"] = model
    if isinstance(endpoint, str):
        named["endpoint"] = endpoint
    if server_metrics:
        named["server_metrics"] = True
        named |= {"metrics_url": server_metrics} if isinstance(server_metrics, str) else {}
    base = spec or RunSpec()
    full = RunSpec.of({k: v for k, v in base.flat().items() if k in base.given()} | named)  # what was given
    out = full.outputs  # a spec's [outputs] where the keywords leave them
    output, resume = output if output is not None else out.output, resume if resume is not None else out.resume
    overwrite = overwrite or out.overwrite
    if out.history is not None:
        from llmbench.history.recording import check_url

        check_url(out.history)  # a typo fails before anything is measured
    options = run_options_of(full.requests, full.levers, full.reader)
    w = workload.Workload.of(full)
    trace = workload.read_trace(w) if prompts is None else None
    target: ModelOptions | EndpointOptions | LoadedModel | EngineModel
    if isinstance(endpoint, EndpointOptions):
        target = endpoint
    elif full.server.endpoint is not None:
        if model is not None and not isinstance(model, str):
            raise UserError("with endpoint, model names the model to send (a string)")
        open_loop = open_loop_of(full.arrivals, trace)
        target = endpoint_options_of(full.server, full.model, full.arrivals, open_loop=open_loop)
    elif model is not None and not isinstance(model, str):
        target = model  # a LoadedModel
    else:
        target = model_options_of(full.model, isolate=isolate)
    # the one prompt-source ladder: a dataset is chosen once the model is loaded
    source = workload.as_source(prompts) if prompts is not None else workload.source(w, trace)
    run, path = await run_driver(
        source, target, options, output=output, overwrite=overwrite, resume=resume, stop=stop, reporter=reporter,
        spec=full.setup(),
    )  # fmt: skip
    if out.history is not None and path is not None:
        from llmbench.history.recording import after_write
        from llmbench.history.records import run_result

        after_write(out.history, [run_result(run, path)], str(path))
    return run


def load_spec(path: str | Path) -> RunSpec:
    """A config file (``llmbench run --print-config``'s TOML) as the spec :func:`measure` takes; UserError in one
    line for an unknown key or a value of the wrong type (none is coerced). A relative path in it is read from the
    file's folder."""
    from llmbench.spec import read_toml

    where = str(path)
    tables = RunSpec.checked(read_toml(Path(path)), where=where, base=Path(path).resolve().parent)
    return RunSpec.validated(tables, where=where)


def _with_settings(fn: Callable[P, R]) -> Callable[P, R]:
    """``fn``'s signature with every setting of the spec spelled out (name, type, default: the spec's), so that
    ``help()``, an IDE and ``inspect.signature`` show what ``**settings`` takes: generated, never written twice."""
    import inspect

    sig = inspect.signature(fn)
    own = [q for q in sig.parameters.values() if q.kind is not q.VAR_KEYWORD]
    named = {q.name for q in own}
    extra = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=fi.default, annotation=fi.annotation)
             for name, (_t, fi) in RunSpec.fields().items() if name not in named and name != "prompts"]  # fmt: skip
    fn.__signature__ = sig.replace(parameters=[*own, *extra])  # type: ignore[attr-defined]
    return fn


ameasure = _with_settings(ameasure)
measure = _sync(ameasure)
measure.__doc__ = "The blocking form of :func:`ameasure` (same arguments): measure and return the run."


def load_model(model: str | None = None, **settings: Any) -> LoadedModel | EngineModel:
    """Load a model as ``measure`` would (offload check included), on the generation thread it will run on;
    pass it to :func:`measure` as ``model`` to measure it several times without loading it again. With another
    ``engine`` it is that engine's model (converted first when needed), loaded in this process. ``settings``: the
    spec's model settings by name (``weights``, ``device``, ``dtype``, ``threads``, ``engine``, ...)."""
    from llmbench import engines
    from llmbench.core.process import freeze_now
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    spec = model_options(model, **settings)
    if not spec.is_transformers:
        from llmbench.engines.base import load

        engines.validate(spec)
        em = generation_thread().run(load, spec)
        freeze_now()
        return em
    loaded = generation_thread().run(models.load_model, spec)
    freeze_now()
    return loaded


async def ameasure_quality(
    candidate: ModelOptions,
    options: RunOptions | None = None,
    *,
    reference_dtype: str = _QUALITY.reference.reference_dtype,
    reference_model: str | None = None,
    text: str | Path | None = None,
    prompts: Sequence[str] | str | Path | PromptSet | None = None,
    chunk_tokens: int = _QUALITY.reference.chunk_tokens,
    reference_cache: str | Path | None = None,
    output: str | Path | None = None,
) -> dict[str, Any]:
    """``candidate`` against a reference setup of the same model (float32, no quantization, by default): KL
    divergence, top-1 agreement and perplexity teacher-forced on ``text`` (default: the one llmbench ships), and
    where greedy continuations of ``prompts`` part. Returns the quality record (see ``llmbench quality``)."""
    from llmbench.drivers.quality import quality

    return await quality(
        candidate, options or run_options_of(_QUALITY.requests), reference_dtype=reference_dtype,
        reference_model=reference_model, text=text, prompts=as_prompt_set(prompts) if prompts is not None else None,
        chunk_tokens=chunk_tokens, reference_cache=Path(reference_cache) if reference_cache else None,
        output=Path(output) if output else None,
    )  # fmt: skip


measure_quality = _sync(ameasure_quality)
measure_quality.__doc__ = "The blocking form of :func:`ameasure_quality` (same arguments)."


async def ameasure_load(
    prompts: Sequence[str] | str | Path | PromptSet,
    endpoint: str | EndpointOptions,
    slos: Sequence[str],
    *,
    rates: Sequence[float] | None = None,
    output: str | Path,
    options: RunOptions | None = None,
    duration_s: float | None = DEFAULT_DURATION_S,
    requests: int | None = None,
    arrival: str = _LOAD.arrivals.arrival,
    seed: int | None = None,
    workers: int | None = _LOAD.arrivals.workers,
    min_attainment: float = _LOAD.arrivals.min_attainment,
    one_token_passes: bool = _LOAD.arrivals.one_token_passes,
    probe_rate: float | None = _LOAD.arrivals.probe_rate,
    stop_saturated: bool | None = _LOAD.arrivals.stop_saturated,
    stop_min_s: float = _LOAD.arrivals.stop_min_s,
    stop_window_s: float = _LOAD.arrivals.stop_window_s,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """``endpoint`` under open-loop load at each of ``rates`` (None: search for the saturation point) against
    ``slos`` (``"ttft_ms:p90=1000"``, ...): the load.json record (written into the folder ``output``, with a
    run file per rate). See ``llmbench load``. ``seed``: the requests' seed, which draws the schedules too (None:
    ``options``' own). ``probe_rate``: probes beside each rate's load; ``stop_saturated`` (None: on for the search)
    ends a rate past saturation early (``stop_min_s``, ``stop_window_s``: the rule's wait and window)."""
    from llmbench.drivers import load as ld

    options = options or run_options_of(_LOAD.requests, _LOAD.reader)  # the load command's request defaults
    if seed is not None:
        options = options.replaced(seed=seed)
    spec = ld.LoadSpec(
        rates=sorted(rates) if rates is not None else None, slos=[ld.Slo.parse(s) for s in slos], arrival=arrival,
        duration_s=None if requests is not None else duration_s, requests=requests, seed=options.seed, workers=workers,
        min_attainment=min_attainment, one_token_passes=one_token_passes, probe_rate=probe_rate,
        stop_saturated=stop_saturated, stop_min_s=stop_min_s, stop_window_s=stop_window_s,
    )  # fmt: skip
    target = endpoint if isinstance(endpoint, EndpointOptions) else EndpointOptions(endpoint=endpoint)
    record, _path = await ld.load(as_prompt_set(prompts), target, options, spec, output, stop=stop, reporter=reporter)
    return record


measure_load = _sync(ameasure_load)
measure_load.__doc__ = "The blocking form of :func:`ameasure_load` (same arguments)."
