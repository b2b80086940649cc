"""--rate's open loop as ``run`` and ``load`` parse it. Where the prompts come from (a prompt file, --synthetic, a
dataset, --prefix-groups or a --trace) is decided once, in :mod:`llmbench.drivers.workload`."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import refuse_given as _refuse_given


def _open_loop(ctx: typer.Context, args: dict[str, Any]) -> Any:
    """--rate's schedule (or --trace's), or None (a closed loop: then its companions are refused)."""
    from llmbench.options import OpenLoop

    if args.get("trace_rows") is not None:
        _refuse_given(ctx, ("arrival", "requests", "duration", "workers", "ray"), "options of --rate, not --trace")
        return OpenLoop(rate_rps=1.0, trace=args["trace_rows"])
    if args["rate"] is None:
        _refuse_given(ctx, ("arrival", "requests", "duration", "workers", "ray"), "options of an open loop (--rate)")
        return None
    duration = args["duration"] if args["duration"] is not None or args["requests"] is not None else 30.0
    return OpenLoop(rate_rps=args["rate"], arrival=args["arrival"], requests=args["requests"], duration_s=duration,
                    seed=args["seed"], workers=args["workers"], ray=args["ray"])  # fmt: skip
