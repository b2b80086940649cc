"""``llmbench worker``: one side of ``llmbench ab``, a model in a process of its own."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.shared import DEVICE, ENGINE, LOADING, MODEL, takes


@takes(*MODEL, *ENGINE, *DEVICE, "attn", "cache", "compile_", "quantize", *LOADING)  # fmt: skip
def worker(
    ctx: typer.Context,
    **shared: Any,
) -> None:
    """A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of
    `llmbench ab`. Not for typing at: ab starts it."""
    from llmbench import engines
    from llmbench.backends import worker_main as w

    with user_errors():
        spec = model_options(ctx.params)
        engines.validate(spec)
    compile_, cache = ctx.params["compile_"], ctx.params["cache"]
    raise typer.Exit(w.main(spec, "static" if compile_ else cache.value, compile_))
