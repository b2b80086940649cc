"""``llmbench prompts``: the prompt sets llmbench ships, which PROMPTS may name (``llmbench run env_violations``).

Listed in llmbench.cli.COMMANDS; imports nothing heavy (no torch, no transformers).
"""

from __future__ import annotations

import json
from typing import Annotated

import typer


def prompts(
    json_: Annotated[bool, typer.Option("--json", help="One JSON list: name, prompts, description, file.")] = False,
) -> None:
    """The prompt sets llmbench ships: give a name as PROMPTS (run, sweep, load, ab...) instead of a file. A file
    of that name in the current folder wins."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from llmbench.workloads import promptsets

    sets = promptsets.shipped()
    if json_:
        typer.echo(json.dumps([s.as_dict() for s in sets], indent=2, ensure_ascii=False))
        return
    table = Table(title="prompt sets llmbench ships", title_justify="left", box=box.SIMPLE_HEAD)
    table.add_column("name", no_wrap=True)
    table.add_column("prompts", justify="right")
    table.add_column("description")
    for s in sets:
        table.add_row(escape(s.name), str(s.prompts), escape(s.description))
    table.caption = "use one as PROMPTS: llmbench run NAME" if sets else "none in this install"
    Console(highlight=False).print(table)
