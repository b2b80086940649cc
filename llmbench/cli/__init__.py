"""The command line: parse options, call the core, render. Heavy modules are imported inside commands.

Every command translates flags into llmbench's option types (the public API's), calls a driver or an API
function, and renders the result; nothing is measured here. Each command (or group) has a module of its own;
this one holds the app, its registrations (in the order ``llmbench --help`` lists them) and :func:`main`.
"""

from __future__ import annotations

import errno
import importlib
import sys
import types
from collections.abc import Collection
from typing import Annotated, Any

import typer

from llmbench.cli import common
from llmbench.core.version import __version__

# Every command: its name -> (module, attribute), in the order `llmbench --help` lists them. A command's module
# (and the spec it is generated from) is imported only when the command runs or shows its help: `llmbench
# --help` lists the commands from their summaries (llmbench.cli.listing, generated from them and held by a test).
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("run", "run"),
    "sweep": ("sweep", "sweep"),
    "scan": ("scan", "scan"),
    "load": ("load", "load"),
    "quality": ("quality", "quality"),
    "serve": ("serve", "serve"),
    "paint": ("paint", "paint"),
    "compare": ("compare", "compare"),
    "ab": ("ab", "ab"),
    "worker": ("worker", "worker"),
    "bisect": ("bisect", "bisect"),
    "bisect-step": ("bisect", "bisect_step"),
    "engines": ("engines", "engines"),
    "trend": ("history", "trend"),
    "show": ("show", "show"),
    "export": ("files", "export"),
    "report": ("files", "report"),
    "convert": ("files", "convert"),
    "prompts": ("prompts", "prompts"),  # the prompt sets llmbench ships
    "history": ("history", "history_app"),  # a group: Typer lists groups after the commands
}


def _version(value: bool) -> None:
    if value:
        typer.echo(f"llmbench {__version__}")
        raise typer.Exit()


def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """llmbench: TTFT and TPOT you can defend."""


def build(names: Collection[str] | None = None) -> typer.Typer:
    """The app with the commands ``names`` (None: every one), each imported from its module; the others listed by
    their summaries only (what ``llmbench --help`` shows: :mod:`llmbench.cli.listing`)."""
    made = typer.Typer(
        help="Measure how long a language model makes a person wait: time to first token (TTFT) and time per "
        "output token (TPOT).",
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    made.callback()(_root)
    from llmbench.cli.listing import SUMMARIES

    for name, (module, attribute) in COMMANDS.items():
        # the listing's line: the summary's words rewrapped (rich markup keeps a docstring's line breaks)
        short = " ".join(SUMMARIES[name].split())
        if names is not None and name not in names:
            made.command(name=name, short_help=short, add_help_option=False)(_listed_only)
            continue
        command = getattr(importlib.import_module(f"llmbench.cli.{module}"), attribute)
        if isinstance(command, typer.Typer):
            made.add_typer(command, name=name, short_help=short)
        else:
            made.command(name=name, short_help=short)(command)
    return made


def _listed_only() -> None:  # never runs: a command that runs is built from its own module (build's names)
    raise AssertionError("a command listed by its summary only was run")


def __getattr__(name: str) -> Any:
    """``app``: every command, imported (the tests' CliRunner, the docs' generators); built once."""
    if name == "app":
        globals()["app"] = made = build()
        return made
    raise AttributeError(name)


def _bare_history(argv: list[str]) -> list[str]:
    """``--history`` given without a value means the default database: click needs one, so "default" is put in
    (unless what follows is a URL or a .db file)."""
    out: list[str] = []
    for i, a in enumerate(argv):
        out.append(a)
        if a == "--history":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            # a value with credentials (u:pw@host/db) is the option's, refused by it, never echoed as an argument
            if nxt is None or nxt.startswith("-") or not ("://" in nxt or "@" in nxt or nxt == "default" or
                                                          nxt.endswith((".db", ".sqlite", ".sqlite3"))):  # fmt: skip
                out.append("default")
    return out


_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


class _Terminated(SystemExit):
    """SIGTERM in a command without a stop flag of its own: unwinds (a database transaction rolls back), then
    exits 143 with one line."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated(143)


def main() -> None:
    """Console entry point: every way a command ends is one exit code of the contract in docs/exit-codes.md; click's
    usage errors become one line too (exit 2). ``bisect-step``'s own contract is git's: see :func:`_for_git`."""
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)  # the measuring commands replace it with their stop flag
    from llmbench.core.process import arm_cold_start

    arm_cold_start()  # this process was started for the command: its first load's clock starts at its start
    argv = sys.argv[1:]
    _rich_on_first_use()  # before typer's rich help is first imported (it is, lazily, on --help or an error)
    code = _run(argv)
    # the work is done and written: a signal while the interpreter shuts down (handlers back to default) must not
    # turn a finished command into a kill (-15, -2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sys.exit(_for_git(argv, code))


# what `git bisect run` reads: 0 good, 1-124 and 126-127 bad, 125 skip, 128 and above abort the bisect
BISECT_STEP = "bisect-step"
GIT_ABORT = 128


def _for_git(argv: list[str], code: int) -> int:
    """``bisect-step``'s exit code as ``git bisect run`` must read it: only a measured verdict (0 good, 1 bad) or a
    skip (125) passes; a usage error (click's 2, raised before the command's body runs), a user error, an internal
    error (1), an interrupt (130) or SIGTERM (143) becomes 128, which aborts the bisect instead of marking the
    commit bad. Help (0) passes. Every other command's code is returned as it is."""
    if _command(argv) != BISECT_STEP or code == 0 or common.said.get("verdict"):
        return code
    return GIT_ABORT


def _command(argv: list[str]) -> str | None:
    """The command's name: the first argument that is not an option (the root takes no option with a value)."""
    return next((a for a in argv if not a.startswith("-")), None)


def _run(argv: list[str]) -> int:
    """Run the command; its exit code, each failure said in one line on stderr."""
    common.said.clear()  # a process may run several commands (the API's tests, a notebook)
    try:
        name = _command(argv)
        code = build({name} if name in COMMANDS else ())(args=_bare_history(argv), standalone_mode=False)
    except _Terminated:
        typer.echo("llmbench: terminated by SIGTERM (nothing unfinished was written)", err=True)
        return 143
    except SystemExit as e:  # a library's sys.exit: its code, through the contract like any other
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        typer.echo(f"llmbench: internal error: SystemExit: {e.code}", err=True)  # sys.exit("why"): why, said once
        return 1
    except typer.Abort:
        typer.echo("llmbench: aborted", err=True)
        return 130
    except typer.TyperException as e:  # click's usage errors (typer vendors click): bad option, bad value
        ctx = getattr(e, "ctx", None)
        command = f"llmbench {ctx.info_name} --help" if ctx is not None and ctx.parent else "llmbench --help"
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        typer.echo(f"llmbench: error: {' '.join(message.split())} (see {command})", err=True)
        return int(getattr(e, "exit_code", 2))
    except KeyboardInterrupt:
        typer.echo("llmbench: interrupted", err=True)
        return 130
    except Exception as e:  # a bug, not a user error: one line, traceback on request
        from llmbench.core.errors import UserError
        from llmbench.core.settings import settings  # here, not at the top: --help and compare never need it

        try:
            debug = settings().debug
        except UserError:  # another variable is malformed: this error is still the one to report
            debug = False
        if debug:
            import traceback

            # printed, not raised: the exit code stays the contract's (a full disk's 2, bisect-step's 128)
            traceback.print_exc()
        if isinstance(e, OSError) and e.errno in _MACHINE_ERRNOS:
            # the machine's state, not a bug: a full disk, a read-only folder (every finished request is on disk)
            where = f" {e.filename}" if e.filename else ""
            typer.echo(f"llmbench: error: cannot write{where}: {e.strerror or e}", err=True)
            return 2
        from llmbench.core.redact import scrub  # a library's message may hold the URL as given

        hint = "" if debug else " (set LLMBENCH_DEBUG=1 for the traceback)"
        typer.echo(f"llmbench: internal error: {type(e).__name__}: {scrub(str(e))}{hint}", err=True)
        return 1
    if code == 130 and not common.said.get("interrupted"):
        # Typer turns a Ctrl-C in a command without a stop flag (quality, history) into a silent exit 130
        typer.echo("llmbench: interrupted (nothing unfinished was written)", err=True)
    return code if isinstance(code, int) else 0


def _rich_on_first_use() -> None:
    """typer's rich help imports ``rich.markdown`` (markdown-it) and ``rich.traceback`` (pygments, attrs) whatever the
    markup mode, about 60 ms of a 0.3 s ``--help``; llmbench's help is rich markup and its errors are one line. A
    stand-in module each loads the real one the first time anything of it is used (its class made or asked for
    an attribute, any other name read)."""
    for module, cls_name in (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback")):
        if module not in sys.modules:
            sys.modules[module] = _StandIn(module, cls_name)
            setattr(sys.modules["rich"] if "rich" in sys.modules else importlib.import_module("rich"),
                    module.rpartition(".")[2], sys.modules[module])  # fmt: skip


class _StandIn(types.ModuleType):
    """A module not yet imported: the real one is, on first use (:func:`_rich_on_first_use`)."""

    def __init__(self, name: str, cls_name: str) -> None:
        super().__init__(name)
        real = self.real

        class _Late(type):
            def __getattr__(cls, attr: str) -> Any:  # a classmethod (Traceback.from_exception)
                return getattr(getattr(real(), cls_name), attr)

        def made(cls: type, *args: Any, **kwargs: Any) -> Any:
            return getattr(real(), cls_name)(*args, **kwargs)

        setattr(self, cls_name, _Late(cls_name, (), {"__new__": made}))

    def real(self) -> types.ModuleType:
        """The real module, imported now (in this stand-in's place)."""
        if sys.modules.get(self.__name__) is self:
            del sys.modules[self.__name__]
        return importlib.import_module(self.__name__)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):  # the import system's questions (__path__: a package?) are no use
            raise AttributeError(name)
        return getattr(self.real(), name)
