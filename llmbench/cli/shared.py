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

from llmbench.cli.specs import section_option
from llmbench.spec import LeversSection, ModelSection, PromptsSection, RequestsSection

F = TypeVar("F", bound=Callable[..., Any])

DATASET = ("prompt_format", "prompt_column", "output_len_column", "min_prompt_tokens", "max_prompt_tokens",
           "num_prompts")  # fmt: skip

# name -> (type with its typer.Option, default): the same in every command that takes it, generated from the spec
SHARED: dict[str, tuple[Any, Any]] = {
    **{name: section_option(ModelSection, name) for name in ModelSection.model_fields},
    **{name: section_option(LeversSection, name) for name in LeversSection.model_fields},
    **{name: section_option(PromptsSection, name) for name in DATASET},
    "chat_template": section_option(RequestsSection, "chat_template"),
}

# the groups commands take together
MODEL = ("model", "weights")
ENGINE = ("engine", "precision")
DEVICE = ("device", "dtype", "reprobe", "threads")
LOADING = ("device_map", "allow_offload", "allow_pickle", "trust_remote_code")
LEVERS = ("speculative", "prefix_cache")


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
