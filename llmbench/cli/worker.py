"""``llmbench worker``: one side of ``llmbench ab``, a model in a process of its own."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import WorkerSpec


@from_spec(WorkerSpec)  # --config: the spec file a parent writes (worker_main.command)
def worker(ctx: typer.Context, **shared: Any) -> None:
    """A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of
    `llmbench ab`. Not for typing at: ab starts it."""
    from llmbench import engines
    from llmbench.backends import worker_main as w
    from llmbench.options import RunOptions

    asked = ctx.meta["spec"]
    levers = asked.levers  # the spec resolved --compile's static cache
    own: dict[str, Any] = {"cache": levers.cache, "compile": levers.compile}
    if levers.speculative not in (None, "none"):  # this side's own lever (ab can measure speculative against plain)
        own["speculative"] = levers.speculative
    if levers.prefix_cache != "none":
        own["prefix_cache"] = levers.prefix_cache
    with user_errors():
        spec = model_options(asked)
        engines.validate(spec)  # the levers' own rules ran when the spec was made (llmbench.spec.rules)
        if not spec.is_transformers:
            engines.check_levers(spec.engine, RunOptions(**own))
    raise typer.Exit(w.main(spec, own, ctx.meta["spec"].setup() if ctx.params.get("config") else None))
