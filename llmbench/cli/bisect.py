"""``llmbench bisect GOOD BAD``: which commit made it slower, each step measured against GOOD with ab's
statistics until it is decided; ``llmbench bisect-step GOOD``: the same judgement of the checked-out commit as
an exit code for ``git bisect run`` (0 good, 1 bad, 125 skip or still unsure, 128 on errors)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import check_history, history_line, measuring, said, user_errors
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.spec.commands import BisectSpec, BisectStepSpec

GoodArg = Annotated[str, typer.Argument(help="The last commit (or tag, branch) known to be fast.")]


# bisect-step judges the one commit git checked out: it skips no other, and its tree is git's own
STEP = {"max_skips": 1, "keep_trees": True}


def _settings(b: Any, **fixed: Any) -> Any:
    """The bisect's settings from its spec's (``max_skips``/``keep_trees`` absent: bisect-step's one commit)."""
    from llmbench.analysis.compare import GAPS, METRICS
    from llmbench.analysis.startup import PROCESS_METRICS
    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import parse_budget
    from llmbench.drivers.bisect import Settings

    metric, stat, processes, duet = b.metric, b.stat, b.processes, b.duet
    wanted = [m for m in METRICS if m not in PROCESS_METRICS]  # a look's few processes: too few for a load
    if metric not in wanted:
        raise UserError(f"--metric {metric!r}: one of {', '.join(wanted)}")
    stat = stat or (GAPS if metric == "tpot_ms" else "p50")
    if processes is None:
        try:
            design = Design(duet=duet, budget_s=parse_budget(b.look))
        except UserError as e:  # the look's own option, not ab's
            raise UserError(str(e).replace("--budget", "--look", 1)) from None
    else:
        design = Design(processes=processes, repeats=b.repeats, duet=duet)
    settings = Settings(metric=metric, stat=stat, threshold_pct=b.threshold, worker=b.worker, design=design,
                        max_looks=b.max_looks, build=b.build, **fixed)  # fmt: skip
    settings.validate()  # before the output folder is made: a refused option leaves nothing behind
    return settings


def _inputs(spec: Any, settings: Any) -> tuple[Any, Any]:
    """The prompts and run options of every look; UserError, before anything is checked out, when a fixed design
    (--processes) would give each look too few pairs for its statistic's interval: it could never decide."""
    from llmbench.analysis.compare import check_gate_inputs
    from llmbench.drivers import workload
    from llmbench.options import run_options_of

    options = run_options_of(spec.requests, ignore_eos=True)
    prompt_set = workload.prompt_list(workload.Workload(prompts=spec.bisect.prompts), options, None).text_only("bisect")
    design = settings.design
    # a --look budget plans 2 or more processes a side: then only the tokens (gaps need 3) are checked here
    pairs = len(prompt_set.prompts) * design.repeats if design.budget_s is None else sys.maxsize
    check_gate_inputs(settings.stat, {settings.metric: settings.threshold_pct}, options.max_new_tokens, pairs,
                      design.processes)  # fmt: skip
    return prompt_set, options


def _recorder(history: str | None) -> Any:
    """A callback recording each look in the history (its head the commit, its base GOOD), or None."""
    if check_history(history) is None:
        return None
    from llmbench.history.records import ab_result

    def record(base: Any, head: Any, folder: Path, base_sha: str, head_sha: str) -> None:
        history_line(history, [ab_result(base, head, folder, base_ref=base_sha, head_ref=head_sha)], str(folder))

    return record


@from_spec(BisectSpec)
def bisect(
    ctx: typer.Context,
    good: GoodArg,
    bad: Annotated[str, typer.Argument(help="A commit known to be slower (default: HEAD).")] = "HEAD",
    quiet: QuietOpt = False,
    **s: Any,
) -> None:
    """Find the commit between GOOD and BAD that made METRIC slower: each step an ab against GOOD, looked at
    again while its interval straddles half of BAD's change; a commit that can't be built or run is skipped."""
    from llmbench.drivers.bisect import Bisector, prepare_folder
    from llmbench.present.bisect import bisect_lines

    spec, out = ctx.meta["spec"], ctx.meta["spec"].outputs
    with user_errors():
        settings = _settings(spec.bisect, max_skips=spec.bisect.max_skips, keep_trees=out.keep_trees)
        prompt_set, options = _inputs(spec, settings)
        on_look = _recorder(out.history)
        folder = prepare_folder(out.output, out.resume, good, bad, settings)
        with measuring(quiet) as (stop, reporter):
            bisector = Bisector(spec.bisect.repo.resolve(), good, bad, prompt_set, options, settings, folder,
                                reporter=reporter, stop=stop, on_look=on_look)  # fmt: skip
            try:
                record = bisector.run()
            except RunInterrupted as e:
                typer.echo(f"llmbench: interrupted by {e.signal_name}: every finished look is kept in {folder}; go "
                           f"on with the same command and -o {folder} --resume", err=True)  # fmt: skip
                raise typer.Exit(e.exit_code) from None
    for line in bisect_lines(record):
        typer.echo(line)
    raise typer.Exit(1 if record["answer"]["kind"] == "none" else 0)


@from_spec(BisectStepSpec)
def bisect_step(
    ctx: typer.Context,
    good: GoodArg,
    bad: Annotated[
        Optional[str], typer.Option(help="BAD: the cutoff becomes half its measured change (else --threshold/2).")
    ] = None,
    quiet: QuietOpt = False,
    **s: Any,
) -> None:
    """For `git bisect run llmbench bisect-step GOOD ...`: the checked-out commit against GOOD; exit 0 good, 1
    bad, 125 when it can't be built or run or stays unsure (git tries a neighbour), 128 on any other error."""
    from llmbench.drivers.bisect import step

    try:
        with user_errors():
            spec = ctx.meta["spec"]
            settings = _settings(spec.bisect, **STEP)
            prompt_set, options = _inputs(spec, settings)
            with measuring(quiet) as (stop, reporter):
                state, line = step(Path(".").resolve(), good, bad, prompt_set, options, settings, reporter=reporter,
                                   stop=stop)  # fmt: skip
    except typer.Exit as e:
        raise typer.Exit(128 if e.exit_code else 0) from None  # git reads 2 as "bad": an error must abort instead
    except RunInterrupted as e:
        typer.echo(f"llmbench: interrupted by {e.signal_name}: the commit is not judged (the bisect aborts)", err=True)
        raise typer.Exit(128) from None
    typer.echo(line)
    said["verdict"] = True  # main() passes only this exit to git as it is (its errors become 128)
    raise typer.Exit({"good": 0, "bad": 1}.get(state, 125))
