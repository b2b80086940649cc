"""--rate's open loop as ``run`` and ``load`` parse it. Where the prompts come from (a prompt file, --synthetic, a
dataset, --prefix-groups or a --trace) is decided once, in :mod:`llmbench.drivers.workload`."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import refuse_given as _refuse_given


def _open_loop(ctx: typer.Context, args: dict[str, Any]) -> Any:
    """--rate's schedule (or --trace's), or None (a closed loop: then its companions are refused)."""
    from llmbench.options import open_loop_of

    if args.get("trace_rows") is not None:
        _refuse_given(ctx, ("arrival", "requests", "duration_s", "workers", "ray"), "options of --rate, not --trace")
    elif args["rate"] is None:  # --workers splits a closed loop's streams too
        _refuse_given(ctx, ("arrival", "requests", "duration_s", "ray"), "options of an open loop (--rate)")
    return open_loop_of(args, args.get("trace_rows"))
