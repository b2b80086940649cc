"""``llmbench ab``: base and head measured side by side, request by request, and gated on the pair."""

from __future__ import annotations

import sys
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import check_history, history_line, measuring, run_async, user_errors
from llmbench.cli.compare import render_verdict
from llmbench.cli.params import (
    AbGateStatOpt,
    AbOutputOpt,
    CompareFormat,
    FailOnOpt,
    FailOnRegressionOpt,
    FormatOpt,
    HistoryOpt,
    MaxNewTokensOpt,
    QuietOpt,
    RequireMdcOpt,
    Stat,
    SystemPromptOpt,
    WarmupOpt,
)
from llmbench.cli.params_workload import (
    DataArg,
    DataSeedOpt,
    DataTokenizerOpt,
)
from llmbench.cli.shared import DATASET, takes
from llmbench.core.errors import UserError
from llmbench.drivers import workload

# ab's own design options (declared here, beside the command)
ProcessesOpt = Annotated[
    int,
    typer.Option(
        help="Worker processes per side, one after another, each with its own random hash seed and "
        "environment size: a difference only one process shows stays noise (the interval is taken over the "
        "processes' own changes)."
    ),
]
TtftPairsOpt = Annotated[
    int,
    typer.Option(
        help="Extra pairs of one output token each, spread over the processes: more TTFT samples for the time "
        "(kept in ttft_requests; TTFT rows only)."
    ),
]
DuetOpt = Annotated[
    bool,
    typer.Option(
        "--duet",
        help="Both sides at the same moment, each pinned to its own CPU, the CPUs swapped pair by pair (the "
        "workers need --threads 1): the machine's noise lands on both.",
    ),
]
BudgetOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Wall time to fill (300s, 5m, 1h): processes, rounds and TTFT-only pairs are chosen for the "
        "smallest detectable change, from this run's measured costs; the choice is printed. Replaces "
        "--processes, --repeats and --ttft-pairs."
    ),
]


@takes("prompts", "base", "head", "output", *DATASET, "seed", "tokenizer", "repeats", "warmup", "max_new_tokens",
       "ignore_eos", "system_prompt", "fail_on_regression", "fail_on", "gate_stat", "fmt", "resume", "processes",
       "ttft_pairs", "duet", "budget", "require_mdc", "history", "anchor", "head_ref", "move_anchor",
       "quiet")  # fmt: skip
def ab(
    ctx: typer.Context,
    prompts: DataArg,
    base: Annotated[str, typer.Option(help="A server URL, or a command line starting `llmbench worker ...`.")],
    head: Annotated[str, typer.Option(help="The same, for the side under test.")],
    output: AbOutputOpt = None,
    seed: DataSeedOpt = 0,
    tokenizer: DataTokenizerOpt = None,
    repeats: Annotated[int, typer.Option(help="Times to go round the prompt list (pairs per prompt).")] = 1,
    warmup: WarmupOpt = 1,
    max_new_tokens: MaxNewTokensOpt = 64,
    ignore_eos: Annotated[
        bool, typer.Option("--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens.")
    ] = True,
    system_prompt: SystemPromptOpt = None,
    fail_on_regression: FailOnRegressionOpt = None,
    fail_on: FailOnOpt = None,
    gate_stat: AbGateStatOpt = Stat.p50,
    fmt: FormatOpt = CompareFormat.table,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted ab run in -o's folder.")] = False,
    processes: ProcessesOpt = 1,
    ttft_pairs: TtftPairsOpt = 0,
    duet: DuetOpt = False,
    budget: BudgetOpt = None,
    require_mdc: RequireMdcOpt = None,
    history: HistoryOpt = None,
    anchor: Annotated[
        Optional[str],
        typer.Option(
            help="With --history: the base is this pinned ref's code (a tag or commit); the head is recorded "
            "relative to it, for trend --anchor."
        ),
    ] = None,
    head_ref: Annotated[
        Optional[str], typer.Option(help="With --history: the head's ref (default: this checkout's commit).")
    ] = None,
    move_anchor: Annotated[
        bool,
        typer.Option(
            "--move-anchor",
            help="This ab measures the new anchor (head) against --anchor: later results "
            "against it chain onto the old one's index.",
        ),
    ] = False,
    quiet: QuietOpt = False,
    **shared: Any,
) -> None:
    """Base and head side by side, request by request (ABBA), so machine drift cancels; compare's verdict and
    gate on the pair."""
    from llmbench.analysis.compare import check_gate_inputs, compare_runs, gate_options
    from llmbench.analysis.gate import gate
    from llmbench.drivers.ab import ab as ab_driver
    from llmbench.options import RunOptions

    args = dict(ctx.params)
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
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, warmup=warmup, repeats=repeats,
                             system_prompt=system_prompt)  # fmt: skip
        options.validate()
        design = _design(ctx, processes, repeats, ttft_pairs, duet, budget)
        _check_cold_gate(gates, design)
        prompt_set = workload.prompt_list(workload.Workload.of(args), options, tokenizer)
        # a budget plans its pairs later (and says when they fall short): then only the tokens are checked here
        pairs = len(prompt_set.prompts) * repeats if design.budget_s is None else sys.maxsize
        check_gate_inputs(gate_stat.value, gates, max_new_tokens, pairs, design.processes, design.ttft_pairs)
        with measuring(quiet) as (stop, reporter):
            coro = ab_driver(prompt_set, base, head, options, output, resume=resume, stop=stop, reporter=reporter,
                             design=design)  # fmt: skip
            base_run, head_run, folder = run_async(coro)
        comp = compare_runs(base_run, head_run, base_name=str(folder / "base.json"), new_name=str(folder / "head.json"))
        verdict = gate([comp], fail_on_regression, fail_on, gate_stat.value, require_mdc)
        if recording:
            from llmbench.history.records import ab_result

            result = ab_result(base_run, head_run, folder, anchor=anchor, head_ref=head_ref, moves_anchor=move_anchor)
            history_line(history, [result], str(folder))
    from llmbench.drivers.ab_budget import shortfall
    from llmbench.present.terminal import warn

    if (short := shortfall(comp, design.budget_s)) is not None:
        warn(short)
    render_verdict([comp], verdict, fmt)


def _design(ctx: typer.Context, processes: int, repeats: int, ttft_pairs: int, duet: bool, budget: str | None) -> Any:
    """The ab design the options give; --budget leaves processes, rounds and TTFT-only pairs to the planner."""
    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import parse_budget

    if budget is None:
        design = Design(processes=processes, repeats=repeats, ttft_pairs=ttft_pairs, duet=duet)
        design.validate()
        return design
    given = [f"--{k.replace('_', '-')}" for k in ("processes", "repeats", "ttft_pairs")
             if getattr(ctx.get_parameter_source(k), "name", None) == "COMMANDLINE"]  # fmt: skip
    if given:
        raise UserError(f"--budget chooses {', '.join(given)} itself: give one or the other")
    return Design(duet=duet, budget_s=parse_budget(budget))


def _check_cold_gate(gates: dict[str, float], design: Any) -> None:
    """A gate on the cold start needs 2 or more processes a side (each one is a sample): refused before anything
    starts when the design fixes fewer (a budget chooses its processes later, and compare refuses then)."""
    from llmbench.analysis.startup import MIN_PROCESSES, PROCESS_METRICS

    cold = [m for m in PROCESS_METRICS if m in gates]
    if cold and design.budget_s is None and design.processes < MIN_PROCESSES:
        raise UserError(f"--fail-on {cold[0]}: each worker process is one sample of its cold start; give "
                        f"--processes {MIN_PROCESSES} or more")  # fmt: skip
