"""What every command shares: a user error as one line (exit 2), the flags as the user spells them, the
measuring context, an interrupted run's resume line, the history's line, and the parsed flags turned into
llmbench's option types (the public API's builders, one place per options class)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from llmbench.core.errors import UserError

if TYPE_CHECKING:
    from llmbench.options import ModelOptions, RunOptions

said: dict[str, bool] = {}  # what main() need not say again


@contextmanager
def user_errors() -> Iterator[None]:
    """UserError -> one line on stderr, exit 2."""
    try:
        yield
    except UserError as e:
        die(str(e), 2)


@contextmanager
def written_record(path: object) -> Iterator[None]:
    """Rendering a scan.json or load.json: a hand-edited or cut record that lacks what llmbench writes is one
    UserError naming the file, not an internal error (its reader checks only its version)."""
    try:
        yield
    except (KeyError, TypeError, IndexError, AttributeError) as e:
        raise UserError(f"{path}: not a complete record as llmbench writes it ({type(e).__name__}: {e})") from None


def die(message: str, code: int) -> None:
    from llmbench.core.redact import scrub  # the last guard: no URL's credentials or query on the error line

    typer.echo(f"llmbench: error: {' '.join(scrub(message).split())}", err=True)
    raise typer.Exit(code)


def given(ctx: typer.Context, name: str) -> bool:
    """Whether the user gave ``name`` (on the command line, in the environment, or in a --config file where it
    differs from the option's default: a printed config lists every setting), not its default."""
    source = getattr(ctx.get_parameter_source(name), "name", None)
    if source == "DEFAULT_MAP":
        param = next((q for q in ctx.command.params if q.name == name), None)
        return param is not None and value(ctx.params.get(name)) != value(param.default)
    return source in ("COMMANDLINE", "ENVIRONMENT")


def value(v: Any) -> Any:
    """An enum choice as its value (``CompareFormat.json`` is ``"json"``), anything else as it is."""
    return v.value if isinstance(v, Enum) else v


def model_options(spec: Any) -> ModelOptions:
    """The model a command names: its spec's model table (sweep's comma lists are its grid's, not these)."""
    from llmbench.options import model_options_of

    return model_options_of(spec.model)


def run_options(spec: Any, **fixed: Any) -> RunOptions:
    """A command's RunOptions from its spec's requests, levers and reader tables, those it has (``fixed``: what a
    command sets itself, e.g. sweep's rounds as repeats); a setting the command does not declare keeps the spec's
    default."""
    from llmbench.options import run_options_of

    tables = spec.sections()
    return run_options_of(*(getattr(spec, t) for t in ("requests", "levers", "reader") if t in tables), **fixed)


def since_time(text: str | None) -> str | None:
    """``30d``/``12h``/``2w`` -> an ISO time that long ago; a date (or ISO time) -> that time in UTC."""
    from llmbench.history import db

    return db.since_time(text)


@contextmanager
def measuring(quiet: bool) -> Iterator[tuple[Any, Any]]:
    """The process-wide effects a measuring command opts into: signal handlers, a frozen gc, the progress bar."""
    from llmbench.core.process import frozen_gc, stop_on_signals
    from llmbench.present import terminal as display

    with stop_on_signals() as stop, frozen_gc(), display.reporter(quiet) as reporter:
        yield stop, reporter


def run_async(coro: Any, resumable: bool = False) -> Any:
    from llmbench.core.errors import RunInterrupted

    try:
        import asyncio  # not at import: --help and the readers start faster without it

        return asyncio.run(coro)
    except RunInterrupted as e:
        interrupted(e, resumable)


def interrupted(e: Any, resumable: bool) -> None:
    from llmbench.present import terminal as display

    done = sum(len(r.requests) for r in e.runs)
    where = f" saved in {e.path}" if e.path else ""
    resume = f" Resume with:\n  {resume_command(e.path)}" if e.path and resumable else ""
    display.err.print(f"llmbench: interrupted by {e.signal_name}: {done} requests{where} (complete: false).{resume}",
                      markup=False, soft_wrap=True)  # fmt: skip
    said["interrupted"] = True
    raise typer.Exit(e.exit_code)


def resume_command(path: Path) -> str:
    """This invocation's command line with --resume PATH instead of -o/--overwrite/--resume."""
    import shlex

    # printed: a --history or --endpoint URL loses its credentials
    from llmbench.core.redact import redact_command, scrub

    def hidden(command: str) -> str:  # --server-command: the values of its secret options go (as config.spec's)
        try:
            return redact_command(shlex.split(command))
        except ValueError:
            return command

    args, skip, command = [], False, False
    for a in sys.argv[1:]:
        if skip or command:
            args += [hidden(a)] if command else []
            skip = command = False
            continue
        if a in ("-o", "--output", "--resume"):
            skip = True
            continue
        if a == "--overwrite" or a.startswith(("--output=", "--resume=")):
            continue
        command = a == "--server-command"
        args.append("--server-command=" + hidden(a[17:]) if a.startswith("--server-command=") else a)

    return scrub(shlex.join(["llmbench", *args, "--resume", str(path)]))


def check_history(url: str | None) -> Any:
    """The history URL checked before anything is measured (None: no history)."""
    from llmbench.history.recording import check_url

    return check_url(url)


def record_file(url: str | None, path: Path) -> None:
    """Record the records a written file gives (a sweep's setups, a scan's points, a load test's rates)."""
    with user_errors():
        from llmbench.history.records import results_of_file

        if check_history(url) is not None:
            history_line(url, results_of_file(path), str(path))


def history_line(url: str | None, results: Any, where: str) -> None:
    """Record a command's result in the history (its files are written already) and say so."""
    from llmbench.history.recording import after_write
    from llmbench.present import terminal as display

    line = after_write(url, results, where)
    if line:  # on stderr: stdout may be a report (ab --format markdown/json)
        display.err.print(line, markup=False, soft_wrap=True)


def print_lines(texts: Any) -> None:
    """Print each line as it is (no markup, no wrapping), skipping the None ones."""
    from llmbench.present import terminal as display

    for line in texts:
        if line is not None:
            display.out.print(line, markup=False, soft_wrap=True)
