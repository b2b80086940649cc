"""``llmbench show``: what a saved file holds, as a table. A module of its own: it reads no spec (the start of a
command typed often, benchmarks/startup.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from llmbench.cli.common import print_lines, user_errors, written_record


def show(
    run_file: Annotated[Path, typer.Argument(help="A run JSON, a scan.json, a load.json or a paint JSON.")],
) -> None:
    """The summary table of a saved run (or a scan's curves and fits, a load test's rates, a paint's requests)."""
    from llmbench.present import terminal as display
    from llmbench.present.summary import print_summary
    from llmbench.results.kinds import kind_of
    from llmbench.results.storage import load_run

    with user_errors():
        found = kind_of(run_file, among=("scan", "load", "paint"))
        record = found.record or {}
        if found.kind == "scan":
            with written_record(run_file):
                print_lines(display.scan_lines(record))
            return
        if found.kind == "load":
            with written_record(run_file):
                display.print_wide(display.load_table(record), display.LOAD_TABLE_WIDTH)
                print_lines(display.load_lines(record))
            return
        if found.kind == "paint":
            with written_record(run_file):
                display.out.print(display.paint_table(record))
                print_lines(display.paint_lines(record))
            return
        run = load_run(run_file, scalars_only=True, requests=False)  # the summary table reads the summary alone
    for w in run.warnings:
        display.warn(w)
    print_summary(run, machine=True)
