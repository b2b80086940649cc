"""``llmbench export`` and ``report``: what a saved file holds, as a tidy file or a page (``show``: its own module)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmbench.cli.common import user_errors, written_record
from llmbench.cli.params import OverwriteOpt, RunExportFormat
from llmbench.core.errors import UserError


def export(
    run_file: Annotated[Path, typer.Argument(help="A run JSON.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    fmt: Annotated[
        RunExportFormat,
        typer.Option("--format", help="File format (trace: a timeline for ui.perfetto.dev and chrome://tracing)."),
    ] = RunExportFormat.csv,
    tokens: Annotated[bool, typer.Option("--tokens", help="One row per token instead of per request.")] = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """A tidy table of a run (pandas): one row per request, or per token with --tokens; or a trace.

    --format trace: the run's requests on a timeline (Chrome Trace Event Format), for ui.perfetto.dev and
    chrome://tracing."""
    from llmbench.results.storage import load_run, prepare_output

    if fmt is RunExportFormat.trace:
        with user_errors():
            if tokens:
                raise UserError("--tokens is for csv and parquet: a trace holds every token's stamp already")
            from llmbench.present.trace import write_trace

            run = load_run(run_file)
            path = prepare_output(output, overwrite)
            events = write_trace(run, path)
        typer.echo(f"wrote {events} trace events to {path}")
        return
    with user_errors():
        from llmbench.core.errors import require

        require("llmbench export", "export", "pandas")
        from llmbench.present import export as ex

        # each table reads the fields it shows: the request table no token stamps (a 10,000 x 256 run 4x faster)
        run = load_run(run_file, scalars_only=True, request_fields=ex.TOKEN_FIELDS if tokens else ex.REQUEST_FIELDS)
        path = prepare_output(output, overwrite)
        rows = ex.export(run, path, fmt.value, tokens)
    typer.echo(f"wrote {rows} rows to {path}")


def report(
    runs: Annotated[
        list[Path], typer.Argument(help="RUN.json [MORE.json ...]; the first is the base. Or a scan.json.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    overwrite: OverwriteOpt = False,
) -> None:
    """One self-contained HTML file: tables, token timelines, ITL histogram, TTFT vs prompt length, compare; for a
    scan.json, its curves with their fits."""
    from llmbench.results.kinds import kind_of
    from llmbench.results.storage import load_run, prepare_output, write_text

    with user_errors():
        from llmbench.core.errors import require

        require("llmbench report", "report", "matplotlib")
        from llmbench.present.html import REPORT_FIELDS, build_load_report, build_report, build_scan_report
        from llmbench.results.storage import rate_runs

        first = kind_of(runs[0], among=("scan", "load")) if len(runs) == 1 else None
        scan_record = first.record if first is not None and first.kind == "scan" else None
        loads = [(p, found.record or {}) for p in runs if (found := kind_of(p, among=("load",))).kind == "load"]
        if scan_record is not None or loads:
            if loads and len(loads) != len(runs):
                raise UserError("report draws load.json files alone, or run files alone: not both at once")
            with written_record(runs[0] if scan_record is not None else ", ".join(str(p) for p, _ in loads)):
                page = build_scan_report(scan_record) if scan_record is not None else build_load_report(
                    [(_short_name(p, runs), r) for p, r in loads],
                    {_short_name(p, runs): rate_runs(p, r) for p, r in loads})  # fmt: skip
            path = prepare_output(output, overwrite)
            write_text(path, page)
            typer.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
            return
        loaded = [(_short_name(p, runs), load_run(p, scalars_only=True, request_fields=REPORT_FIELDS)) for p in runs]
        for name, run in loaded:
            if not run.requests:
                raise UserError(f"{name} has no finished requests: nothing to report")
        path = prepare_output(output, overwrite)
        write_text(path, build_report(loaded))
    typer.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def convert(
    run_file: Annotated[Path, typer.Argument(help="A run JSON: one file, or JSON plus columns.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The run JSON to write.")],
    columns: Annotated[
        bool,
        typer.Option(
            "--columns/--one-file",
            help="Write the requests as columns beside the JSON (what a large "
            "run gets), or inline: one file, for sharing and for llmbench before 0.3.0.",
        ),
    ] = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """Write a run as one JSON file (for sharing and older readers), or as JSON plus an Arrow columns file.

    A run is written as one file up to a million token stamps, and as JSON plus columns past that (docs/schema.md).
    The columns file is named in the JSON by its sha256: copy the two together."""
    from llmbench.results.storage import convert_run, prepare_output

    with user_errors():
        path = prepare_output(output, overwrite)
        run = convert_run(run_file, path, columns=columns)
    size = path.stat().st_size
    form = "one file, schema version 1" if not columns else "JSON plus columns, schema version 2"
    typer.echo(f"wrote {path} ({form}; {len(run.requests) + len(run.ttft_requests)} requests, {size / 1e6:.1f} MB"
               f"{_sidecar_size(path) if columns else ''})")  # fmt: skip


def _sidecar_size(path: Path) -> str:
    from llmbench.results.storage import named_sidecar

    name = named_sidecar(path)
    return f" + {name}, {(path.parent / name).stat().st_size / 1e6:.1f} MB" if name else ""


def _short_name(path: Path, others: list[Path]) -> str:
    """How a report names a file in its legends and headings: the run's file stem, or for a file every result
    folder has (load.json, base.json, ...) its folder's name too; never the full (temporary) path. Two files
    that would get the same name keep more of their path."""
    generic = path.name in ("load.json", "scan.json", "sweep.json", "base.json", "head.json", "run.json")
    name = f"{path.parent.name}/{path.stem}" if generic else path.stem
    clash = [
        o for o in others if o != path and (o.stem == path.stem and (not generic or o.parent.name == path.parent.name))
    ]
    return str(path) if clash else name
