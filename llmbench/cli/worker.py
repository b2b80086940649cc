"""``llmbench worker``: one side of ``llmbench ab``, a model in a process of its own."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import WorkerSpec

LEVERS = ("speculative", "prefix_cache")  # this side's own lever (ab can measure speculative against plain)


@from_spec(WorkerSpec)  # --config: the spec file a parent writes (worker_main.command)
def worker(ctx: typer.Context, **shared: Any) -> None:
    """A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of
    `llmbench ab`. Not for typing at: ab starts it."""
    from llmbench import engines
    from llmbench.backends import worker_main as w
    from llmbench.options import RunOptions

    compile_, cache = ctx.params["compile"], ctx.params["cache"]
    own: dict[str, Any] = {"cache": "static" if compile_ else cache, "compile": compile_}
    for name in LEVERS:  # set: this side's own lever (ab can measure speculative against plain)
        if ctx.params.get(name) not in (None, "none"):
            own[name] = ctx.params[name]
    with user_errors():
        spec = model_options(ctx.params)
        engines.validate(spec)
        RunOptions(**own).check_levers()
        if not spec.is_transformers:
            engines.check_levers(spec.engine, RunOptions(**own))
    raise typer.Exit(w.main(spec, own, ctx.meta["spec"].setup() if ctx.params.get("config") else None))
