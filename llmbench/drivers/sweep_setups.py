"""``llmbench sweep``'s setups: the knobs of one combination (:class:`Setup`), and the CLI's comma lists made into
every valid combination, each checked before any model loads (:func:`plan`), with why the others were left out.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmbench.core.errors import UserError
from llmbench.engines.hf import models
from llmbench.engines.hf.quantize import forced_dtype
from llmbench.options import ModelOptions, RunOptions
from llmbench.spec import comma_list, default_threads
from llmbench.workloads.limits import check_planned
from llmbench.workloads.prompts import PromptSet

MAX_SETUPS = 1_000  # setups of one sweep: each loads its model, and the rounds go round them all


@dataclass(frozen=True)
class Setup:
    """One combination of knobs. ``engine`` other than transformers: ``precision`` is its weight format (None: the
    .gguf as it is) and the transformers knobs stay at their defaults."""

    dtype: str | None
    threads: int
    attn: str | None = None  # None: the model's default kernel
    cache: str = "dynamic"
    compile: bool = False
    quantize: str | None = None
    engine: str = "transformers"
    precision: str | None = None
    speculative: str | None = None  # core.speculative's label (None: plain decoding)
    prefix_cache: str = "none"

    @property
    def is_transformers(self) -> bool:
        return self.engine == "transformers"

    @property
    def lever(self) -> str | None:
        """The speculative method's label, or 'prefix-cache' (None: neither)."""
        return self.speculative or ("prefix-cache" if self.prefix_cache != "none" else None)

    def label(self) -> str:
        """Short human name, e.g. ``bfloat16 2t sdpa static compiled``, ``bfloat16+int8 2t``, ``llama.cpp q8_0
        2t``, ``float32 2t prompt-lookup:3:2``."""
        return self._label() + (f" {self.lever}" if self.lever else "")

    def _label(self) -> str:
        if not self.is_transformers:
            return f"{self.engine} {self.precision or 'gguf'} {self.threads}t"
        if self.quantize is None:
            weights = self.dtype
        elif forced_dtype(self.quantize) is not None:  # int8-dynamic: float32 goes without saying
            weights = self.quantize
        else:
            weights = f"{self.dtype}+{self.quantize}"
        parts = [weights or "?", f"{self.threads}t"]
        if self.attn:
            parts.append(self.attn)
        if self.cache != "dynamic":
            parts.append(self.cache)
        if self.compile:
            parts.append("compiled")
        return " ".join(parts)

    def slug(self) -> str:
        """A file name stem (a draft model's path loses its folders)."""
        return self.label().replace(" ", "-").replace(".", "").replace("/", "_").replace(":", "_")

    def as_dict(self) -> dict[str, Any]:
        """The knobs as JSON fields."""
        return dataclasses.asdict(self)


def plan(
    spec: ModelOptions,
    options: RunOptions,
    *,
    dtype: list[str],
    threads: list[int] | None,
    attn: list[str] | None,
    cache: list[str],
    compile_: bool,
    quantize: list[str],
    engine: Sequence[str] = ("transformers",),
    precision: list[str] | None = None,
    speculative: list[str] | None = None,
    prefix_cache: list[str] | None = None,
) -> tuple[list[Setup], list[str]]:
    """The sweep's grid (lists of each setting's values, as its spec typed them: ``--threads 1,2`` is ``[1, 2]``)
    -> the setups to run and why others were left out. Every knob of every setup is checked here, before any
    model loads (UserError). ``precision``: ``ENGINE=P1,P2`` items (or ``P1,P2`` for every engine other than
    transformers); ``speculative`` and ``prefix_cache``: ``--speculative``/``--prefix-cache`` values, crossed with
    every setup."""
    from llmbench import engines as eng

    engine_list = [eng.engine_info(e).name for e in engine]
    if len(set(engine_list)) != len(engine_list):
        raise UserError(f"--engine '{','.join(engine)}' names an engine twice")
    check_grid(dtype, threads, attn, cache, compile_, quantize, engine_list, precision, speculative, prefix_cache)
    thread_list = list(threads or []) or [default_threads()]  # the spec typed and bounded each
    setups: list[Setup] = []
    skipped: list[str] = []
    if "transformers" in engine_list:
        if "auto" in dtype:
            raise UserError("--dtype auto has no place in a sweep: list the dtypes to compare")
        dtypes = [models.resolve_dtype(d, "cpu", probe=False)[0] for d in dtype]
        setups, skipped = expand(
            dtypes,
            thread_list,
            list[str | None](attn or []) or [None],
            list(cache),
            [False, True] if compile_ else [False],
            [None if q == "none" else q for q in quantize],
        )
    per_engine = engine_precisions(precision or [], [e for e in engine_list if e != "transformers"])
    source, _path = models.classify_source(spec.model, spec.weights)
    for name in engine_list:
        if name == "transformers":
            continue
        eng.require_engine(name)
        asked: list[str | None] = list(per_engine.get(name) or []) or [None]
        for p in asked:
            resolved = eng.check_precision(name, p, source)
            for th in thread_list:
                setups.append(Setup(dtype=None, threads=th, engine=name, precision=resolved))
    setups, lever_skips = with_levers(setups, speculative, prefix_cache)
    skipped = sorted({*skipped, *lever_skips})
    if not setups:
        raise UserError(f"no setup to sweep: every combination was left out ({'; '.join(skipped)})")
    for s in setups:
        if s.is_transformers:
            setup_options(options, s)  # checked as it is made
            models.validate(spec.replaced(dtype=s.dtype or "auto", threads=s.threads, attn=s.attn,
                                          quantize=s.quantize))  # fmt: skip
        else:
            eng.validate(engine_spec(spec, s))
    return setups, skipped


def check_grid(dtype: list[str], threads: list[int] | None, attn: list[str] | None, cache: list[str],
               compile_: bool, quantize: list[str], engines: list[str], precision: list[str] | None,
               speculative: list[str] | None, prefix_cache: list[str] | None) -> None:  # fmt: skip
    """UserError when the lists cross into more than :data:`MAX_SETUPS` setups (each loads a model), counted
    from the lists' lengths before any setup is made: a generous upper bound of what :func:`plan` expands."""

    def n(items: Sequence[Any] | None) -> int:
        return max(1, len(items or []))

    levers = n(speculative) * n(prefix_cache)
    grid = n(dtype) * n(attn) * n(cache) * (2 if compile_ else 1) * n(quantize) + len(engines)
    grid += sum(n((p.partition("=")[2] or p).split(",")) for p in precision or [])
    crossed = n(threads) * grid * levers
    if crossed > MAX_SETUPS:
        raise UserError(f"the sweep's lists cross into up to {crossed:,} setups, each loading a "
                        f"model: more than a sweep runs (at most {MAX_SETUPS:,}); list fewer values")  # fmt: skip


def with_levers(
    setups: list[Setup], speculative: list[str] | None, prefix_cache: list[str] | None
) -> tuple[list[Setup], list[str]]:
    """Every setup crossed with every lever asked (``none`` keeps the plain one), and why combinations were left
    out: an engine without the method, a lever on a static cache, speculative decoding on a prefix cache."""
    from llmbench.core.engine_registry import engine_info
    from llmbench.core.speculative import parse_prefix_cache, parse_speculative

    specs = [parse_speculative(t) for t in speculative or []] or [None]
    prefixes = [parse_prefix_cache(t) for t in prefix_cache or []] or ["none"]
    out: list[Setup] = []
    skipped: list[str] = []
    for s in setups:
        info = engine_info(s.engine)
        for sp, px in itertools.product(specs, prefixes):
            lever = dataclasses.replace(s, speculative=sp.label if sp else None, prefix_cache=px)
            if sp is not None and px != "none":
                skipped.append(f"{lever.label()}: speculative decoding on a prefix cache (measure them apart)")
            elif sp is not None and sp.method not in info.speculative:
                skipped.append(f"{lever.label()}: {s.engine} has no {sp.method} in-process")
            elif px != "none" and not info.prefix_cache:
                skipped.append(f"{lever.label()}: {s.engine} keeps no prefix cache in-process")
            elif lever.lever is not None and s.cache != "dynamic":
                skipped.append(f"{lever.label()}: speculative decoding and a prefix cache need the dynamic cache")
            elif lever not in out:
                out.append(lever)
    return out, skipped


def setup_options(options: RunOptions, s: Setup) -> RunOptions:
    """The run options of one setup: its cache, compile and levers over the sweep's own."""
    return options.replaced(cache=s.cache, compile=s.compile, speculative=s.speculative,
                            prefix_cache=s.prefix_cache)  # fmt: skip


def check_gates(setups: list[Setup], options: RunOptions, prompts: PromptSet | None, max_kld: float | None) -> None:
    """UserError for what would refuse (or exhaust memory) only after the models load or the rounds run: a
    --max-kld that is no KL divergence (NaN, negative), a plan of more requests than a run can hold."""
    if max_kld is not None and not max_kld >= 0:  # NaN fails this too; inf: no limit, as asked
        raise UserError(f"--max-kld must be a KL divergence (0 or more), not {max_kld}")
    if prompts is not None:
        check_planned(("--rounds", options.repeats), ("setups", len(setups)), ("prompts", len(prompts.prompts)))


def engine_precisions(items: list[str], engines: list[str]) -> dict[str, list[str]]:
    """``["llama.cpp=q8_0,q4_k_m", "int8"]`` -> per engine its precisions (a bare list: every engine listed)."""
    from llmbench import engines as eng

    out: dict[str, list[str]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep and not engines:  # a bare list is every other engine's: with none, it would change nothing
            raise UserError(f"--precision {item}: a weight format of --engine llama.cpp, openvino or onnxruntime; "
                            "transformers sweeps --dtype and --quantize")  # fmt: skip
        targets = [eng.engine_info(name).name] if sep else engines
        if sep and targets[0] not in engines:
            raise UserError(f"--precision {item}: {targets[0]} is not among --engine {','.join(engines)}")
        for t in targets:
            out.setdefault(t, [])
            out[t] += [v for v in comma_list(values if sep else name, "--precision") if v not in out[t]]
    return out


def engine_spec(spec: ModelOptions, s: Setup) -> ModelOptions:
    """The model options of an engine setup."""
    return spec.replaced(engine=s.engine, precision=s.precision, threads=s.threads, dtype="auto",
                         attn=None, quantize=None)  # fmt: skip


def expand(
    dtypes: list[str],
    threads: list[int],
    attns: list[str | None],
    caches: list[str],
    compiles: list[bool],
    quantizes: list[str | None],
) -> tuple[list[Setup], list[str]]:
    """Every valid combination, in a stable order, and why the invalid ones were left out."""
    setups: list[Setup] = []
    skipped: list[str] = []
    for dt, th, at, ca, co, qu in itertools.product(dtypes, threads, attns, caches, compiles, quantizes):
        s = Setup(dtype=dt, threads=th, attn=at, cache="static" if co else ca, compile=co, quantize=qu)
        if qu is not None and forced_dtype(qu) not in (None, dt):
            skipped.append(f"{qu} with {dt}: {qu} weights compute in {forced_dtype(qu)}")
            continue
        if co and qu == "int8-dynamic":
            skipped.append(f"{s.label()}: torch.compile does not trace torch's dynamic int8 linears")
            continue
        if s not in setups:  # --compile makes dynamic and static cache the same setup
            setups.append(s)
    return setups, sorted(set(skipped))


SETUP_KEYS = tuple(f.name for f in dataclasses.fields(Setup))
