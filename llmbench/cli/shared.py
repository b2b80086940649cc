"""Parameters several commands take, declared once: each is a name with its type (help included) and default, and
a command lists where each of them goes in its own ``--help`` with :func:`takes`.

Typer reads a command's parameters from its signature, so :func:`takes` gives the command a signature made of its
own parameters and the shared ones, in the order named; the shared values reach the function as keyword
arguments (``**shared``), and the option builders read them from ``ctx.params``.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from llmbench.cli import params as p
from llmbench.cli import params_workload as pw

F = TypeVar("F", bound=Callable[..., Any])

# name -> (type with its typer.Option, default): the same in every command that takes it
SHARED: dict[str, tuple[Any, Any]] = {
    "model": (p.ModelOpt, None),
    "weights": (p.WeightsOpt, p.Weights.pretrained),
    "engine": (p.EngineOpt, "transformers"),
    "precision": (p.PrecisionOpt, None),
    "device": (p.DeviceOpt, "auto"),
    "dtype": (p.DTypeOpt, p.DType.auto),
    "reprobe": (p.ReprobeOpt, False),
    "threads": (p.ThreadsOpt, None),
    "attn": (p.AttnOpt, None),
    "cache": (p.CacheOpt, p.Cache.dynamic),
    "compile_": (p.CompileOpt, False),
    "speculative": (p.SpeculativeOpt, None),
    "prefix_cache": (p.PrefixCacheOpt, "none"),
    "quantize": (p.QuantizeOpt, p.Quantize.none),
    "device_map": (p.DeviceMapOpt, None),
    "allow_offload": (p.AllowOffloadOpt, False),
    "allow_pickle": (p.AllowPickleOpt, False),
    "trust_remote_code": (p.TrustRemoteCodeOpt, False),
    "prompt_format": (pw.PromptFormatOpt, None),
    "prompt_column": (pw.PromptColumnOpt, None),
    "output_len_column": (pw.OutputLenColumnOpt, None),
    "min_prompt_tokens": (pw.MinPromptTokensOpt, None),
    "max_prompt_tokens": (pw.MaxPromptTokensOpt, None),
    "num_prompts": (pw.NumPromptsOpt, None),
}

# the groups commands take together
MODEL = ("model", "weights")
ENGINE = ("engine", "precision")
DEVICE = ("device", "dtype", "reprobe", "threads")
LOADING = ("device_map", "allow_offload", "allow_pickle", "trust_remote_code")
LEVERS = ("speculative", "prefix_cache")
DATASET = ("prompt_format", "prompt_column", "output_len_column", "min_prompt_tokens", "max_prompt_tokens",
           "num_prompts")  # fmt: skip


def takes(*layout: str) -> Callable[[F], F]:
    """The command's parameters in ``--help`` order (after ``ctx``): its own, by name, and shared ones
    (:data:`SHARED`) it does not declare; the function takes the shared ones as ``**shared``."""

    def wrap(fn: F) -> F:
        own = inspect.signature(fn, eval_str=True).parameters
        kw = inspect.Parameter.KEYWORD_ONLY  # keyword-only: a required one may follow one with a default
        params = [own["ctx"].replace(kind=kw)] if "ctx" in own else []
        for name in layout:
            if name in own:
                params.append(own[name].replace(kind=kw))
            else:
                annotation, default = SHARED[name]
                params.append(inspect.Parameter(name, kw, default=default, annotation=annotation))
        named = {q.name for q in params}
        left = [n for n, q in own.items() if q.kind is not inspect.Parameter.VAR_KEYWORD and n not in named]
        if left:
            raise TypeError(f"{fn.__name__}: {', '.join(left)} not placed in its layout")

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            return fn(**kwargs)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {q.name: q.annotation for q in params}
        return command  # type: ignore[return-value]

    return wrap
