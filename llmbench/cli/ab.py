"""``llmbench ab``: base and head measured side by side, request by request, and gated on the pair."""

from __future__ import annotations

import sys
from typing import Any

import typer

from llmbench.cli.common import check_history, history_line, measuring, run_async, run_options, user_errors
from llmbench.cli.common import given as was_given
from llmbench.cli.compare import render_verdict
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.core.errors import UserError
from llmbench.spec.commands import AbSpec


@from_spec(AbSpec)
def ab(ctx: typer.Context, quiet: QuietOpt = False, **s: Any) -> None:
    """Base and head side by side, request by request (ABBA), so machine drift cancels; compare's verdict and
    gate on the pair."""
    from llmbench.analysis.compare import check_gate_inputs, compare_runs, gate_options
    from llmbench.analysis.gate import gate
    from llmbench.drivers import workload
    from llmbench.drivers.ab import ab as ab_driver

    spec = ctx.meta["spec"]
    base, head, out, g, d = spec.sides.base, spec.sides.head, spec.outputs, spec.gate, spec.design
    output, resume, history = out.output, out.resume, out.history
    fail_on_regression, fail_on, gate_stat, require_mdc = g.fail_on_regression, g.fail_on, g.gate_stat, g.require_mdc
    anchor, head_ref, move_anchor, repeats = out.anchor, out.head_ref, out.move_anchor, spec.requests.repeats
    with user_errors():
        # Everything that could refuse the options or the result is checked before a worker starts: the gates,
        # the history URL (here); the sides' commands, the output folder and a resume (the driver, before start).
        gates = gate_options(fail_on_regression, fail_on, require_mdc)
        recording = check_history(history) is not None
        if resume and output is None:
            raise UserError("--resume continues the ab run in a folder: give it with -o")
        if (anchor or head_ref or move_anchor) and not recording:
            raise UserError("--anchor, --head-ref and --move-anchor record into the history: give --history")
        if move_anchor and not (anchor and head_ref):
            raise UserError("--move-anchor needs --anchor OLD and --head-ref NEW (the new anchor's ref)")
        options = run_options(spec)
        design = _design(ctx, d.processes, repeats, d.ttft_pairs, d.duet, d.budget, d.spawn, d.calibrate)
        _check_cold_gate(gates, design)
        prompt_set = workload.prompt_list(workload.Workload.of(spec), options, spec.server.tokenizer).text_only("ab")
        # a budget plans its pairs later (and says when they fall short): then only the tokens are checked here
        pairs = len(prompt_set.prompts) * repeats if design.budget_s is None else sys.maxsize
        check_gate_inputs(gate_stat, gates, options.max_new_tokens, pairs, design.processes, design.ttft_pairs)
        with measuring(quiet) as (stop, reporter):
            coro = ab_driver(prompt_set, base, head, options, output, resume=resume, stop=stop, reporter=reporter,
                             design=design)  # fmt: skip
            base_run, head_run, folder = run_async(coro)
        comp = compare_runs(base_run, head_run, base_name=str(folder / "base.json"), new_name=str(folder / "head.json"))
        verdict = gate([comp], fail_on_regression, fail_on, gate_stat, require_mdc)
        if recording:
            from llmbench.history.records import ab_result

            result = ab_result(base_run, head_run, folder, anchor=anchor, head_ref=head_ref, moves_anchor=move_anchor)
            history_line(history, [result], str(folder))
    from llmbench.drivers.ab_budget import shortfall
    from llmbench.present.terminal import warn

    if (short := shortfall(comp, design.budget_s, base_run.config.ab and base_run.config.ab.budget_plan)) is not None:
        warn(short)
    render_verdict([comp], verdict, out.fmt)


def _design(
    ctx: typer.Context, processes: int, repeats: int, ttft_pairs: int, duet: bool, budget: str | None, spawn: Any,
    calibrate: bool = False,
) -> Any:  # fmt: skip
    """The ab design the options give; --budget leaves processes, rounds and TTFT-only pairs to the planner."""
    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import parse_budget

    if budget is None:
        if calibrate:
            raise UserError("calibrate chooses the workers' setup to fill a --budget: give --budget")
        design = Design(processes=processes, repeats=repeats, ttft_pairs=ttft_pairs, duet=duet, spawn=spawn)
        design.validate()
        return design
    given = [f"--{k.replace('_', '-')}" for k in ("processes", "repeats", "ttft_pairs") if was_given(ctx, k)]
    if given:
        raise UserError(f"--budget chooses {', '.join(given)} itself: give one or the other")
    return Design(duet=duet, budget_s=parse_budget(budget), spawn=spawn, calibrate=calibrate)


def _check_cold_gate(gates: dict[str, float], design: Any) -> None:
    """A gate on the cold start needs 2 or more processes a side (each one is a sample): refused before anything
    starts when the design fixes fewer (a budget chooses its processes later, and compare refuses then)."""
    from llmbench.analysis.startup import MIN_PROCESSES, PROCESS_METRICS

    cold = [m for m in PROCESS_METRICS if m in gates]
    if cold and design.spawn != "exec":
        raise UserError(f"--fail-on {cold[0]}: a forked process does not load (--spawn {design.spawn}), so it is no "
                        "sample of the cold start; measure it with --spawn exec")  # fmt: skip
    if cold and design.budget_s is None and design.processes < MIN_PROCESSES:
        raise UserError(f"--fail-on {cold[0]}: each worker process is one sample of its cold start; give "
                        f"--processes {MIN_PROCESSES} or more")  # fmt: skip
