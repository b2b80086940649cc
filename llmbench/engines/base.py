"""What an engine runner does, and an engine's model loaded and ready: the tokenizer that makes the ids, the runner
that generates from them, and what loading and converting found out."""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from llmbench.core.process import cold_clock
from llmbench.options import ModelOptions
from llmbench.results.schema import LoadInfo
from llmbench.spec import Weights, default_threads


@dataclass
class EngineTimers:
    """One request as the engine itself saw it (``ENGINE_METRIC_FORMULAS`` in the schema)."""

    prompt_tokens_evaluated: int | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    # --speculative: tokens per forward pass of the target, in order (they share their bundle's stamp), what the
    # drafter proposed and the target kept, the drafter's own time
    bundles: list[int] | None = None
    drafted: int | None = None
    accepted: int | None = None
    draft_ms: float | None = None
    # --prefix-cache: this request computed the prefix (cold) or reused it, and how many prompt tokens it reused
    cold: bool | None = None
    cached_tokens: int | None = None


class Runner(Protocol):
    """An engine with a model loaded, generating from token ids on the calling thread."""

    def generate(
        self, ids: list[int], max_new_tokens: int, eos: frozenset[int] | None, on_token: Callable[[int], bool]
    ) -> EngineTimers:
        """Greedy: ``on_token(id)`` for each new token the moment the engine hands it over (it stamps it;
        False: stop after this token). Exactly ``max_new_tokens`` tokens when ``eos`` is None (the engine's own
        way of ignoring EOS), else up to the first id in ``eos``. No prefix of an earlier request is reused."""
        ...

    def detokenize(self, ids: list[int]) -> str:
        """The engine's own text of ``ids`` (special tokens kept): the vocabulary check compares it."""
        ...

    # A runner whose engine has --speculative or --prefix-cache (core.engine_registry says which) also has
    # ``set_levers(speculative, prefix_ids)`` and takes ``generate(..., plain=False, reuse_prefix=True)``:
    # plain=True generates without either lever and leaves the measured context as it was (the lossless
    # check's reference); reuse_prefix=False prefills in full (warm-ups).

    def vocab_size(self) -> int: ...

    def logprobs(self, ids: list[int]) -> Any:
        """log softmax of the next-token logits at every position but the last (numpy, float32), or None when the
        engine exposes no logits."""
        ...

    def facts(self) -> dict[str, Any]:
        """The settings that shape the timing (thread counts per phase, context, attention, ...)."""
        ...

    def precision(self) -> dict[str, Any]:
        """{format, weights, activations, kv_cache}: what was traded for speed."""
        ...

    def close(self) -> None: ...


@dataclass
class EngineModel:
    """An engine with its model loaded, and the Hugging Face tokenizer that makes every prompt's ids."""

    engine: str
    version: str  # "<package> <version>"
    runner: Runner
    tokenizer: Any
    hf_config: Any  # the model's transformers config (context, layers, KV heads: the roofline and scan need it)
    name: str
    weights: Weights
    source: str
    path: str  # the files the engine loaded
    dtype: str  # a short label of the weights' precision (compare shows it beside the engine's)
    threads: int
    load: LoadInfo
    max_positions: int | None
    warnings: list[str] = field(default_factory=list)
    auto: list[str] = field(default_factory=list)
    device: str = "cpu"
    quantization: str | None = None

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the thread this engine generates on (as :meth:`LoadedModel.call`)."""
        from llmbench.engines.hf.generation import generation_thread

        return generation_thread().run(fn, *args, **kwargs)


def load(spec: ModelOptions, on_status: Callable[[str], None] | None = None) -> EngineModel:
    """Load ``spec.model`` on ``spec.engine``: the tokenizer and config, the engine's files (converted and cached
    when the source is not what the engine reads), the runner. UserError for anything the user can fix."""
    from llmbench.engines import check_precision, engine_info, validate
    from llmbench.engines import convert as cv
    from llmbench.engines.hf import models

    info = engine_info(validate(spec))
    source, path = models.classify_source(spec.model, spec.weights)
    precision = check_precision(info.name, spec.precision, source)
    threads = spec.threads if spec.threads is not None else default_threads()
    status = on_status or (lambda text: None)
    before_load = cold_clock()
    t0 = time.perf_counter()
    config, tokenizer = cv.config_and_tokenizer(spec, source, path)
    t_config = time.perf_counter()
    prepared = cv.prepare(info.name, spec, source, path, precision, status)
    t_files = time.perf_counter()
    status(f"loading {prepared.path.name} on {info.name} ...")
    module = importlib.import_module(f"llmbench.engines.{info.module}")
    context = int(getattr(config, "max_position_embeddings", 0) or 0) or None
    t1 = time.perf_counter()
    runner = module.load(prepared.path, threads=threads, context=context, precision=precision)
    seconds = time.perf_counter() - t1
    warnings = ["RANDOM WEIGHTS: the architecture is real, the outputs are meaningless; timings only"] if (
        spec.weights == "random") else []  # fmt: skip
    prec = runner.precision()
    load_info = LoadInfo(
        seconds=round(seconds, 3),
        parameters=prepared.parameters,
        weights_bytes=prepared.weights_bytes,
        decode_weight_bytes=prepared.decode_weight_bytes,
        convert_s=round(prepared.convert_s, 3),
        converted=prepared.record(),
        # the engine reads its files itself, so building the runner (seconds) is its whole load; before it, the
        # engine's files found or made (files_s: hashing the source, a cached conversion's look-up, or
        # convert_s of converting) and the engine's package imported
        phases={
            "before_load_s": before_load,
            "config_tokenizer_s": round(t_config - t0, 3),
            "files_s": round(t_files - t_config, 3),
            "engine_import_s": round(t1 - t_files, 3),
            "weights_s": None,
            "build_s": round(seconds, 3),
        },
    )
    return EngineModel(
        engine=info.name,
        version=f"{info.distribution} {cv.package_version(info.distribution)}",
        runner=runner,
        tokenizer=tokenizer,
        hf_config=config,
        name=spec.model,
        weights=spec.weights,
        source=source,
        path=str(prepared.path),
        dtype=str(prec.get("weights") or precision or "?").split(" ")[0],
        threads=threads,
        load=load_info,
        max_positions=context,
        warnings=warnings + prepared.warnings,
        auto=["threads"] if spec.threads is None else [],
    )
