"""``llmbench history ...`` (the history database: add, list, show, prune, export) and ``llmbench trend``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from llmbench.cli.common import print_lines, since_time, user_errors
from llmbench.cli.params import CompareFormat, DbOpt, ExportFormat, FormatOpt, OverwriteOpt, SinceOpt
from llmbench.core.errors import UserError
from llmbench.workloads.limits import MAX_RESULT_ID

history_app = typer.Typer(help="The history database: results over time, per machine (see --history).",
                          no_args_is_help=True)  # fmt: skip


@history_app.command("add")
def history_add(
    files: Annotated[
        list[Path], typer.Argument(help="Run JSONs, sweep/scan/load folders or files, quality.json, ab folders.")
    ],
    history: DbOpt = None,
) -> None:
    """Record results already on disk (idempotent: a run recorded before, by its bytes or its run id, is not
    recorded twice; a partial run is recorded as such and replaced when its complete file is added)."""
    from llmbench.history.recording import record_files

    with user_errors():
        done = record_files(history if history is not None else "default", files)
    new = sum(1 for d in done if d.new)
    partial = sum(1 for d in done if d.new and d.partial)
    note = f"; {partial} of a partial run (replaced when its complete file is added)" if partial else ""
    typer.echo(f"{new} new, {len(done) - new} already recorded ({len(done)} results from {len(files)} paths){note}")


@history_app.command("list")
def history_list(
    since: SinceOpt = None,
    machine: Annotated[Optional[str], typer.Option(help="A machine id (or its start).")] = None,
    config: Annotated[Optional[str], typer.Option(help="A setup hash (or its start).")] = None,
    commit: Annotated[Optional[str], typer.Option(help="A commit (or its start).")] = None,
    kind: Annotated[Optional[str], typer.Option(help="run, ab, sweep, scan, load or quality.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="The newest N only.")] = None,
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """The recorded results, oldest first (by when they were measured)."""
    from llmbench.history.db import KINDS, dumps
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with user_errors():
        if kind is not None and kind not in KINDS:  # refused before the database is opened
            raise UserError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
        if limit is not None and not 1 <= limit <= MAX_RESULT_ID:  # SQLite's integers: a larger one overflows
            raise UserError(f"--limit must be 1 to {MAX_RESULT_ID:,}, not {limit}")
        after = since_time(since)
        h = get_history(history)
        try:
            rows = h.list(since=after, machine=machine, config=config, commit=commit, kind=kind, limit=limit)
        finally:
            h.close()
    if fmt is CompareFormat.json:
        typer.echo(dumps(rows))
    else:
        display.print_wide(display.history_table(rows), 140)


@history_app.command("show")
def history_show(
    result_id: Annotated[int, typer.Argument(help="A result's id (history list).")],
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """One result: its code, machine, setup and metrics with intervals."""
    from llmbench.history.db import dumps
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with user_errors():
        if not 1 <= result_id <= MAX_RESULT_ID:  # refused before the database is opened (SQLite's integers)
            raise UserError(f"RESULT_ID {result_id}: expected 1 to {MAX_RESULT_ID:,}")
        h = get_history(history)
        r = h.get(result_id)
        h.close()
        if r is None:
            raise UserError(f"no result {result_id} in the history")
    if fmt is CompareFormat.json:
        typer.echo(dumps(r))
    else:
        for line in display.history_result_lines(r):
            display.out.print(line, markup=False, soft_wrap=True)


@history_app.command("prune")
def history_prune(
    keep: Annotated[
        int, typer.Option(help="Results to keep per machine, setup, kind, label and anchor (the newest measured).")
    ],
    machine: Annotated[Optional[str], typer.Option(help="Prune this machine's results only (its id or start).")] = None,
    history: DbOpt = None,
) -> None:
    """Delete all but the newest results of each series (their JSON files are left alone; an ab record that moved
    an anchor is kept: trend --anchor chains through it)."""
    from llmbench.history.recording import get_history

    with user_errors():
        if not 1 <= keep <= MAX_RESULT_ID:
            raise UserError(f"--keep must be 1 to {MAX_RESULT_ID:,}, not {keep}")
        h = get_history(history)
        try:
            n = h.prune(keep, machine)
        finally:
            h.close()
    typer.echo(f"deleted {n} results")


@history_app.command("export")
def history_export(
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="File format.")] = ExportFormat.csv,
    overwrite: OverwriteOpt = False,
    history: DbOpt = None,
) -> None:
    """The history as a table: one row per (result, metric, statistic)."""
    from llmbench.core.errors import require
    from llmbench.history.recording import get_history
    from llmbench.results.storage import prepare_output

    with user_errors():
        require("llmbench history export", "export", "pandas")
        from llmbench.present.export import export_history

        path = prepare_output(output, overwrite)
        h = get_history(history)
        rows = export_history(h, path, fmt.value)
        h.close()
    typer.echo(f"wrote {rows} rows to {path}")


def trend(
    metric: Annotated[str, typer.Argument(help="ttft_ms, tpot_ms, e2e_ms, decode_tokens_per_s, ...")],
    stat: Annotated[str, typer.Option(help="mean, p50, p90 or p99.")] = "p50",
    since: SinceOpt = None,
    machine: Annotated[Optional[str], typer.Option(help="A machine id (or its start).")] = None,
    config: Annotated[Optional[str], typer.Option(help="A setup hash (or its start).")] = None,
    anchor: Annotated[
        Optional[str], typer.Option(help="The series of ab results against this pinned ref (percent change).")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="With --anchor: exit 1 when the series is significantly over --budget.")
    ] = False,
    budget: Annotated[
        Optional[float], typer.Option(help="--check: the allowed slowdown against the anchor, % (default 5).")
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="An HTML page of the series.")] = None,
    overwrite: OverwriteOpt = False,
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """A metric over time: the series with its intervals, commits on the axis, change points; against an anchor,
    the creep a change of runner can't hide."""
    import json

    from llmbench.analysis.gate import BudgetVerdict
    from llmbench.history import trend as tr
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with user_errors():
        if stat not in ("mean", "p50", "p90", "p99"):
            raise UserError(f"--stat {stat}: expected mean, p50, p90 or p99")
        if check and anchor is None:
            raise UserError("--check compares against an anchor's budget: give --anchor REF")
        if budget is not None and (anchor is None or not (check or output)):
            raise UserError("--budget goes with --anchor REF and --check (or -o, whose page draws it)")
        budget = tr.valid_budget(5.0 if budget is None else budget)  # NaN, inf, < 0: refused before any work
        after = since_time(since)
        path = _trend_page(output, overwrite)
        h = get_history(history)
        try:
            t = (tr.anchored(h, metric, stat, anchor, since=after, machine=machine, config=config) if anchor else
                 tr.series(h, metric, stat, since=after, machine=machine, config=config))  # fmt: skip
        finally:
            h.close()
        verdict = BudgetVerdict(tr.check(t, budget), budget, anchor, tr.bisect_hints(t, budget)) if check else None
        if path is not None:
            from llmbench.present.html import build_trend_report
            from llmbench.results.storage import write_text

            write_text(path, build_trend_report(t, budget if anchor else None))
    if fmt is CompareFormat.json:
        checked = {"budget": budget, "problems": verdict.problems, "bisect": verdict.bisect} if verdict else None
        typer.echo(json.dumps({**t.as_dict(), "check": checked}, indent=2, default=str))
    else:
        display.out.print(display.trend_table(t))
        print_lines(display.trend_lines(t))
        if path is not None:
            display.out.print(f"wrote {path}", markup=False)
    if verdict is not None:
        for line in verdict.lines:
            display.err.print(line, markup=False, soft_wrap=bool(verdict.problems))
        raise typer.Exit(verdict.exit_code)


def _trend_page(output: Path | None, overwrite: bool) -> Path | None:
    """trend -o's page, checked before the history is read (matplotlib installed, the file writable)."""
    if output is None:
        return None
    from llmbench.core.errors import require
    from llmbench.results.storage import prepare_output

    require("trend -o", "report", "matplotlib")
    return prepare_output(output, overwrite)
