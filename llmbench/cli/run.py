"""``llmbench run``: every prompt through a model in this process or a server, every token stamped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from llmbench.cli.common import check_history, history_line, measuring, run_async, user_errors
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.spec import RunSpec


@from_spec(RunSpec)
def run(ctx: typer.Context, quiet: QuietOpt = False, **settings: Any) -> None:
    """Stream every prompt through a model in this process (or a server: --endpoint), stamp every token, write a
    run JSON."""
    from llmbench.drivers import workload
    from llmbench.drivers.run import run as run_driver
    from llmbench.options import run_options_of

    spec: RunSpec = ctx.meta["spec"]
    out = spec.outputs
    # --config-from RUN.json whose prompts no flag replaces: the run's own, refused when they can't be measured again
    on_line = getattr(ctx.get_parameter_source("prompts"), "name", None) == "COMMANDLINE"
    replay = None if on_line else ctx.meta.get("replay")
    with user_errors():
        w = workload.Workload.of(spec)
        if replay is not None:
            replay.check_given(w)
        trace = workload.read_trace(w)
        target = _run_target(spec, trace)
        options = run_options_of(spec.requests, spec.levers, spec.reader)
        prompt_set = workload.source(w, trace)
        if replay is not None:
            replay.check_same(prompt_set)
        check_history(out.history)
        with measuring(quiet) as (stop, reporter):
            coro = run_driver(prompt_set, target, options, output=out.output, overwrite=out.overwrite,
                              default_dir="results", resume=out.resume, stop=stop, reporter=reporter,
                              spec=spec.setup())  # fmt: skip
            result, path = run_async(coro, resumable=True)
    _show_run(result, path, out.history)


def _show_run(result: Any, path: Path | None, history: str | None) -> None:
    """What `run` prints once the run is written: the summary, the client's line, the history entry."""
    from llmbench.present import terminal as display
    from llmbench.present.summary import print_summary

    print_summary(result)
    if result.client:
        display.info(display.client_line(result.client))
    display.out.print(f"wrote {path}", markup=False)
    with user_errors():
        from llmbench.history.records import run_result

        history_line(history, [run_result(result, path)] if path else [], str(path))


def _run_target(spec: RunSpec, trace: Any) -> Any:
    """What `run` measures: a server (--endpoint) or a model here (the spec refused the other mode's options)."""
    from llmbench.options import endpoint_options_of, model_options_of, open_loop_of

    if spec.server.endpoint is not None:
        open_loop = open_loop_of(spec.arrivals, trace)
        return endpoint_options_of(spec.server, spec.model, spec.arrivals, open_loop=open_loop)
    return model_options_of(spec.model)
