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
from llmbench.options import DEFAULT_MODEL, EndpointOptions, ModelOptions, OpenLoop, RunOptions, default_metrics_url
from llmbench.results.schema import Run
from llmbench.runner.loop import Reporter
from llmbench.workloads.dataset import DatasetSpec
from llmbench.workloads.prompts import PromptSet, as_prompt_set

if TYPE_CHECKING:
    from llmbench.engines.base import EngineModel
    from llmbench.engines.hf.models import LoadedModel

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


def run_options(
    *,
    max_new_tokens: int = 256,
    ignore_eos: bool | None = None,
    weights: str = "pretrained",
    warmup: int = 1,
    repeats: int = 1,
    sample: bool = False,
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    system_prompt: str | None = None,
    chat_template: bool = True,
    truncate: bool = False,
    cache: str = "dynamic",
    compile: bool = False,
    turns: int = 1,
    think_time_s: float = 0.0,
    speculative: str | None = None,
    prefix_cache: str = "none",
) -> RunOptions:
    """:class:`RunOptions` as :func:`measure` and ``llmbench run`` take them: ``ignore_eos`` None is on with random
    ``weights`` (their text is meaningless, so the length is fixed); ``compile`` decodes on the static cache;
    ``speculative`` and ``prefix_cache`` as ``--speculative`` and ``--prefix-cache`` spell them."""
    return RunOptions(
        max_new_tokens=max_new_tokens, ignore_eos=(weights == "random") if ignore_eos is None else ignore_eos,
        warmup=warmup, repeats=repeats, sample=sample, seed=seed, temperature=temperature, top_p=top_p,
        system_prompt=system_prompt, chat_template=chat_template, truncate=truncate,
        cache="static" if compile else cache, compile=compile, turns=turns, think_time_s=think_time_s,
        speculative=speculative, prefix_cache=prefix_cache,
    )  # fmt: skip


def model_options(
    model: str | None = None,
    *,
    weights: str = "pretrained",
    device: str = "auto",
    dtype: str = "auto",
    reprobe: bool = False,
    threads: int | None = None,
    attn: str | None = None,
    quantize: str | None = None,
    engine: str = "transformers",
    precision: str | None = None,
    isolate: bool | None = None,
    device_map: str | dict[str, Any] | None = None,
    allow_offload: bool = False,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> ModelOptions:
    """:class:`ModelOptions` as :func:`measure` and the CLI take them: ``model`` None is the default model,
    ``quantize`` "none" is None."""
    return ModelOptions(
        model=model or DEFAULT_MODEL, weights=weights, device=device, dtype=dtype, reprobe=reprobe, threads=threads,
        device_map=device_map, allow_offload=allow_offload, allow_pickle=allow_pickle,
        trust_remote_code=trust_remote_code, attn=attn, quantize=None if quantize in (None, "none") else quantize,
        engine=engine, precision=precision, isolate=isolate,
    )  # fmt: skip


def endpoint_options(
    url: str,
    *,
    model: str | None = None,
    api_key_env: str | None = None,
    concurrency: int = 1,
    timeout_s: float = 600.0,
    tokenizer: str | None = None,
    open_loop: OpenLoop | None = None,
    metrics_url: str | None = None,
) -> EndpointOptions:
    """:class:`EndpointOptions` of the server at ``url`` as :func:`measure` and the CLI name it."""
    return EndpointOptions(url=url, model=model, api_key_env=api_key_env, concurrency=concurrency, timeout_s=timeout_s,
                           tokenizer=tokenizer, open_loop=open_loop, metrics_url=metrics_url)  # fmt: skip


async def ameasure(
    prompts: Sequence[str] | str | Path | PromptSet | DatasetSpec,
    *,
    model: str | LoadedModel | EngineModel | None = None,
    weights: str = "pretrained",
    device: str = "auto",
    dtype: str = "auto",
    reprobe: bool = False,
    threads: int | None = None,
    endpoint: str | EndpointOptions | None = None,
    max_new_tokens: int = 256,
    ignore_eos: bool | None = None,
    warmup: int = 1,
    repeats: int = 1,
    sample: bool = False,
    seed: int = 0,
    temperature: float = 1.0,
    top_p: float = 1.0,
    system_prompt: str | None = None,
    chat_template: bool = True,
    truncate: bool = False,
    attn: str | None = None,
    cache: str = "dynamic",
    compile: bool = False,
    quantize: str | None = None,
    engine: str = "transformers",
    precision: str | None = None,
    speculative: str | None = None,
    prefix_cache: str = "none",
    isolate: bool | None = None,
    device_map: str | dict[str, Any] | None = None,
    allow_offload: bool = False,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
    concurrency: int = 1,
    api_key_env: str | None = None,
    tokenizer: str | None = None,
    server_metrics: bool | str = False,
    output: str | Path | None = None,
    overwrite: bool = False,
    resume: str | Path | None = None,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
) -> Run:
    """Measure TTFT and TPOT of every prompt, in this process or (``endpoint``) on a server; the run.

    ``prompts``: a list of strings, or a prompt file's path. ``model``: a hub id, a folder or a .gguf file
    (default Qwen/Qwen2.5-0.5B-Instruct), or a model :func:`load_model` loaded (measure it again without loading;
    the loading options then don't apply); with ``endpoint``, the model name to send. ``ignore_eos`` None:
    on with random weights (their text is meaningless, so the length is fixed). A file is written only at
    ``output`` (or ``resume``, an incomplete run to continue). Safe inside a running event loop: an
    in-process model generates on its own thread. ``engine``: transformers, llama.cpp, openvino or
    onnxruntime (``precision``: the latter's weight format); the latter run in a worker process unless
    ``isolate=False``. ``server_metrics`` (endpoint runs): True scrapes the server's ``/metrics`` during the run,
    a URL scrapes that page (``run.server_metrics``). ``speculative`` (``prompt-lookup[:N[:MAX_NGRAM]]``,
    ``draft:MODEL[:K]``) and ``prefix_cache`` (``system``): the levers of ``--speculative`` and ``--prefix-cache``.
    Raises :class:`~llmbench.core.errors.UserError` for bad input and :class:`~llmbench.core.errors.RunInterrupted`
    when ``stop`` was requested.
    """
    from llmbench.drivers.run import run as run_driver

    options = run_options(
        max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, weights=weights, warmup=warmup, repeats=repeats,
        sample=sample, seed=seed, temperature=temperature, top_p=top_p, system_prompt=system_prompt,
        chat_template=chat_template, truncate=truncate, cache=cache, compile=compile, speculative=speculative,
        prefix_cache=prefix_cache,
    )  # fmt: skip
    target: ModelOptions | EndpointOptions | LoadedModel | EngineModel
    if isinstance(endpoint, EndpointOptions):
        target = endpoint
    elif endpoint is not None:
        if model is not None and not isinstance(model, str):
            raise UserError("with endpoint, model names the model to send (a string)")
        metrics = default_metrics_url(endpoint) if server_metrics is True else server_metrics or None
        target = endpoint_options(endpoint, model=model, api_key_env=api_key_env, concurrency=concurrency,
                                  tokenizer=tokenizer, metrics_url=metrics)  # fmt: skip
    elif model is not None and not isinstance(model, str):
        target = model  # a LoadedModel
    else:
        target = model_options(
            model, weights=weights, device=device, dtype=dtype, reprobe=reprobe, threads=threads, attn=attn,
            quantize=quantize, engine=engine, precision=precision, isolate=isolate, device_map=device_map,
            allow_offload=allow_offload, allow_pickle=allow_pickle, trust_remote_code=trust_remote_code,
        )  # fmt: skip
    from llmbench.drivers.workload import as_source

    source = as_source(prompts)  # the one prompt-source ladder: a dataset is chosen once the model is loaded
    run, _path = await run_driver(
        source, target, options, output=output, overwrite=overwrite, resume=resume, stop=stop, reporter=reporter,
    )  # fmt: skip
    return run


measure = _sync(ameasure)
measure.__doc__ = "The blocking form of :func:`ameasure` (same arguments): measure and return the run."


def load_model(
    model: str = DEFAULT_MODEL,
    *,
    weights: str = "pretrained",
    device: str = "auto",
    dtype: str = "auto",
    reprobe: bool = False,
    threads: int | None = None,
    attn: str | None = None,
    quantize: str | None = None,
    engine: str = "transformers",
    precision: str | None = None,
    device_map: str | dict[str, Any] | None = None,
    allow_offload: bool = False,
    allow_pickle: bool = False,
    trust_remote_code: bool = False,
) -> LoadedModel | EngineModel:
    """Load a model as ``measure`` would (offload check included), on the generation thread it will run on;
    pass it to :func:`measure` as ``model`` to measure it several times without loading it again. With another
    ``engine`` it is that engine's model (converted first when needed), loaded in this process."""
    from llmbench import engines
    from llmbench.core.process import freeze_now
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    spec = model_options(model, weights=weights, device=device, dtype=dtype, reprobe=reprobe, threads=threads,
                         attn=attn, quantize=quantize, device_map=device_map, allow_offload=allow_offload,
                         allow_pickle=allow_pickle, trust_remote_code=trust_remote_code, engine=engine,
                         precision=precision)  # fmt: skip
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
    reference_dtype: str = "float32",
    reference_model: str | None = None,
    text: str | Path | None = None,
    prompts: Sequence[str] | str | Path | PromptSet | None = None,
    chunk_tokens: int = 512,
    reference_cache: str | Path | None = None,
    output: str | Path | None = None,
) -> dict[str, Any]:
    """``candidate`` against a reference setup of the same model (float32, no quantization, by default): KL
    divergence, top-1 agreement and perplexity teacher-forced on ``text`` (default: the one llmbench ships), and
    where greedy continuations of ``prompts`` part. Returns the quality record (see ``llmbench quality``)."""
    from llmbench.drivers.quality import quality

    return await quality(
        candidate, options or RunOptions(max_new_tokens=32), reference_dtype=reference_dtype,
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
    duration_s: float | None = 30.0,
    requests: int | None = None,
    arrival: str = "poisson",
    seed: int = 0,
    workers: int = 1,
    min_attainment: float = 0.9,
    one_token_passes: bool = False,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
) -> dict[str, Any]:
    """``endpoint`` under open-loop load at each of ``rates`` (None: search for the saturation point) against
    ``slos`` (``"ttft_ms:p90=1000"``, ...): the load.json record (written into the folder ``output``, with a
    run file per rate). See ``llmbench load``."""
    from llmbench.drivers import load as ld

    spec = ld.LoadSpec(
        rates=sorted(rates) if rates is not None else None, slos=[ld.Slo.parse(s) for s in slos], arrival=arrival,
        duration_s=None if requests is not None else duration_s, requests=requests, seed=seed, workers=workers,
        min_attainment=min_attainment, one_token_passes=one_token_passes,
    )  # fmt: skip
    target = endpoint if isinstance(endpoint, EndpointOptions) else EndpointOptions(url=endpoint)
    record, _path = await ld.load(as_prompt_set(prompts), target, options or RunOptions(max_new_tokens=64), spec,
                                  output, stop=stop, reporter=reporter)  # fmt: skip
    return record


measure_load = _sync(ameasure_load)
measure_load.__doc__ = "The blocking form of :func:`ameasure_load` (same arguments)."
