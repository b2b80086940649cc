"""``llmbench bisect GOOD BAD``: which commit made it slower, each step measured against GOOD with ab's
statistics until it is decided; ``llmbench bisect-step GOOD``: the same judgement of the checked-out commit as
an exit code for ``git bisect run`` (0 good, 1 bad, 125 skip or still unsure, 128 on errors)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import check_history, history_line, measuring, said, user_errors
from llmbench.cli.params import HistoryOpt, MaxNewTokensOpt, QuietOpt, WarmupOpt
from llmbench.core.errors import RunInterrupted, UserError

GoodArg = Annotated[str, typer.Argument(help="The last commit (or tag, branch) known to be fast.")]
MetricOpt = Annotated[str, typer.Option(help="The metric to bisect on: tpot_ms, ttft_ms, e2e_ms.")]
StatOpt = Annotated[
    Optional[str], typer.Option(help="Its statistic (the gate's: gaps for tpot_ms, p50 otherwise, by default).")
]
ThresholdOpt = Annotated[
    float, typer.Option(help="BAD must be slower than GOOD by more than this, %, for there to be anything to find.")
]
WorkerOpt = Annotated[
    str, typer.Option(help="The options of each commit's `llmbench worker` (the model, dtype, threads).")
]
PromptsOpt = Annotated[str, typer.Option(help="A prompt file or a shipped set's name.")]
ProcessesOpt = Annotated[
    Optional[int], typer.Option(help="Worker processes a side in each look (default: --look chooses).")
]
RepeatsOpt = Annotated[int, typer.Option(help="With --processes: rounds of the prompts in each look.")]
LookOpt = Annotated[str, typer.Option(help="Each look's wall time (ab --budget), unless --processes fixes its design.")]
DuetOpt = Annotated[bool, typer.Option("--duet/--abba", help="Both sides at once on their own CPUs (ab --duet).")]
MaxLooksOpt = Annotated[int, typer.Option(help="Looks one commit may take before it is decided by its estimate.")]
MaxSkipsOpt = Annotated[int, typer.Option(help="Commits that may fail to build or run before bisect gives up.")]
BuildOpt = Annotated[
    Optional[str], typer.Option(help="A shell command run in each commit's tree first; failing skips the commit.")
]
RepoOpt = Annotated[Path, typer.Option(help="The git repository (default: the current folder's).")]


def _settings(
    metric: str,
    stat: str | None,
    threshold: float,
    worker: str,
    processes: int | None,
    repeats: int,
    look: str,
    duet: bool,
    max_looks: int,
    max_skips: int,
    build: str | None,
    keep_trees: bool,
) -> Any:
    from llmbench.analysis.compare import GAPS, METRICS
    from llmbench.analysis.startup import PROCESS_METRICS
    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import parse_budget
    from llmbench.drivers.bisect import Settings

    wanted = [m for m in METRICS if m not in PROCESS_METRICS]  # a look's few processes: too few for a load
    if metric not in wanted:
        raise UserError(f"--metric {metric!r}: one of {', '.join(wanted)}")
    stat = stat or (GAPS if metric == "tpot_ms" else "p50")
    if processes is None:
        try:
            design = Design(duet=duet, budget_s=parse_budget(look))
        except UserError as e:  # the look's own option, not ab's
            raise UserError(str(e).replace("--budget", "--look", 1)) from None
    else:
        design = Design(processes=processes, repeats=repeats, duet=duet)
    settings = Settings(metric=metric, stat=stat, threshold_pct=threshold, worker=worker, design=design,
                        max_looks=max_looks, max_skips=max_skips, build=build, keep_trees=keep_trees)  # fmt: skip
    settings.validate()  # before the output folder is made: a refused option leaves nothing behind
    return settings


def _inputs(prompts: str, max_new_tokens: int, warmup: int, settings: Any) -> tuple[Any, Any]:
    """The prompts and run options of every look; UserError, before anything is checked out, when a fixed design
    (--processes) would give each look too few pairs for its statistic's interval: it could never decide."""
    from llmbench.analysis.compare import check_gate_inputs
    from llmbench.drivers import workload
    from llmbench.options import RunOptions

    options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=True, warmup=warmup)
    options.validate()
    prompt_set = workload.prompt_list(workload.Workload(prompts=prompts), options, None)
    design = settings.design
    # a --look budget plans 2 or more processes a side: then only the tokens (gaps need 3) are checked here
    pairs = len(prompt_set.prompts) * design.repeats if design.budget_s is None else sys.maxsize
    check_gate_inputs(settings.stat, {settings.metric: settings.threshold_pct}, max_new_tokens, pairs,
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


def bisect(
    good: GoodArg,
    bad: Annotated[str, typer.Argument(help="A commit known to be slower (default: HEAD).")] = "HEAD",
    metric: MetricOpt = "tpot_ms",
    stat: StatOpt = None,
    threshold: ThresholdOpt = 2.0,
    worker: WorkerOpt = "--weights random --dtype bfloat16 --threads 1",
    prompts: PromptsOpt = "env_violations",
    max_new_tokens: MaxNewTokensOpt = 32,
    warmup: WarmupOpt = 1,
    processes: ProcessesOpt = None,
    repeats: RepeatsOpt = 1,
    look: LookOpt = "5m",
    duet: DuetOpt = True,
    max_looks: MaxLooksOpt = 3,
    max_skips: MaxSkipsOpt = 5,
    build: BuildOpt = None,
    repo: RepoOpt = Path("."),
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The bisect's folder.")] = None,
    resume: Annotated[bool, typer.Option("--resume", help="Go on with the bisect in -o's folder.")] = False,
    keep_trees: Annotated[bool, typer.Option("--keep-trees", help="Keep each commit's worktree.")] = False,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Find the commit between GOOD and BAD that made METRIC slower: each step an ab against GOOD, looked at
    again while its interval straddles half of BAD's change; a commit that can't be built or run is skipped."""
    from llmbench.drivers.bisect import Bisector, prepare_folder
    from llmbench.present.bisect import bisect_lines

    with user_errors():
        settings = _settings(metric, stat, threshold, worker, processes, repeats, look, duet, max_looks, max_skips,
                             build, keep_trees)  # fmt: skip
        prompt_set, options = _inputs(prompts, max_new_tokens, warmup, settings)
        on_look = _recorder(history)
        folder = prepare_folder(output, resume, good, bad, settings)
        with measuring(quiet) as (stop, reporter):
            bisector = Bisector(repo.resolve(), good, bad, prompt_set, options, settings, folder, reporter=reporter,
                                stop=stop, on_look=on_look)  # fmt: skip
            try:
                record = bisector.run()
            except RunInterrupted as e:
                typer.echo(f"llmbench: interrupted by {e.signal_name}: every finished look is kept in {folder}; go "
                           f"on with the same command and -o {folder} --resume", err=True)  # fmt: skip
                raise typer.Exit(e.exit_code) from None
    for line in bisect_lines(record):
        typer.echo(line)
    raise typer.Exit(1 if record["answer"]["kind"] == "none" else 0)


def bisect_step(
    good: GoodArg,
    bad: Annotated[
        Optional[str], typer.Option(help="BAD: the cutoff becomes half its measured change (else --threshold/2).")
    ] = None,
    metric: MetricOpt = "tpot_ms",
    stat: StatOpt = None,
    threshold: ThresholdOpt = 2.0,
    worker: WorkerOpt = "--weights random --dtype bfloat16 --threads 1",
    prompts: PromptsOpt = "env_violations",
    max_new_tokens: MaxNewTokensOpt = 32,
    warmup: WarmupOpt = 1,
    processes: ProcessesOpt = None,
    repeats: RepeatsOpt = 1,
    look: LookOpt = "5m",
    duet: DuetOpt = True,
    max_looks: MaxLooksOpt = 3,
    build: BuildOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """For `git bisect run llmbench bisect-step GOOD ...`: the checked-out commit against GOOD; exit 0 good, 1
    bad, 125 when it can't be built or run or stays unsure (git tries a neighbour), 128 on any other error."""
    from llmbench.drivers.bisect import step

    try:
        with user_errors():
            settings = _settings(metric, stat, threshold, worker, processes, repeats, look, duet, max_looks, 1,
                                 build, True)  # fmt: skip
            prompt_set, options = _inputs(prompts, max_new_tokens, warmup, settings)
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
