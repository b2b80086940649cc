"""A command's options generated from its spec (:mod:`llmbench.spec`), and the config file behind them.

Each spec field becomes one typer option (or argument) with the field's type, default and help, so an option's
default or help is changed in the spec and nowhere else. :func:`from_spec` adds three options to a command:

- ``--config FILE.toml``: the file's settings become the command's defaults (click's ``default_map``), so a flag
  on the command line overrides the file; the file is checked against the spec before anything runs (an unknown
  table or key, or a value of the wrong type, is one line naming the file and the key);
- ``--print-config``: the effective spec as TOML, to commit (nothing is measured);
- ``--config-from RUN.json`` (``run``): the spec a run recorded, as a config file.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer

from llmbench.core.errors import UserError
from llmbench.spec import Section, Spec, is_comma, option_of, read_toml

if TYPE_CHECKING:
    from llmbench.drivers.workload import Replay

F = TypeVar("F", bound=Callable[..., Any])
KW = inspect.Parameter.KEYWORD_ONLY
CONFIG_OPTIONS = ("config", "print_config", "config_from")


def parameter(name: str, fi: Any) -> inspect.Parameter:
    """The typer parameter of one spec field."""
    extra = fi.json_schema_extra or {}
    default = inspect.Parameter.empty if fi.is_required() else fi.default
    if extra.get("comma") and isinstance(default, list):  # shown as it is typed: float32,bfloat16
        default = ",".join(map(str, default))
    kwargs: dict[str, Any] = {"help": fi.description}
    if extra.get("panel"):
        kwargs["rich_help_panel"] = extra["panel"]
    if extra.get("argument"):
        return inspect.Parameter(
            name, KW, default=default, annotation=Annotated[fi.annotation, typer.Argument(**kwargs)]
        )
    decls = [extra.get("flag") or option_of(name, fi)] + ([extra["short"]] if extra.get("short") else [])
    if extra.get("envvar"):
        kwargs |= {"envvar": extra["envvar"], "show_envvar": True}
    if extra.get("hidden"):
        kwargs["hidden"] = True
    typed = Optional[str] if extra.get("comma") else fi.annotation  # "1,2": the spec splits it (comma_items)
    return inspect.Parameter(name, KW, default=default,
                             annotation=Annotated[typed, typer.Option(*decls, **kwargs)])  # fmt: skip


def section_option(section: type[Section], name: str) -> tuple[Any, Any]:
    """(annotation, default) of ``section``'s field ``name``: a command that is no spec's (``compare``) taking one
    of a spec's options."""
    p = parameter(name, section.model_fields[name])
    return p.annotation, p.default


def _config_options(spec: type[Spec], config_from: bool) -> list[inspect.Parameter]:
    def loader(read: Callable[[Path, type[Spec]], dict[str, dict[str, Any]]]) -> Callable[..., Path | None]:
        """An eager option's callback: the file's settings become the command's defaults."""

        def load(ctx: typer.Context, _param: Any, value: Path | None) -> Path | None:
            if value is not None:
                _set_defaults(ctx, spec, _one_line(read, value, spec))
            return value

        return load

    params = [
        inspect.Parameter("config", KW, default=None, annotation=Annotated[Optional[Path], typer.Option(
            "--config", is_eager=True, callback=loader(read_config), rich_help_panel="Config",
            help="A TOML file of settings (see --print-config); flags given here override it.")]),
        inspect.Parameter("print_config", KW, default=False, annotation=Annotated[bool, typer.Option(
            "--print-config", rich_help_panel="Config",
            help="Print the effective settings as TOML (to commit, then --config) and exit; nothing is measured.")]),
    ]  # fmt: skip
    if config_from:

        def replay(ctx: typer.Context, _param: Any, value: Path | None) -> Path | None:
            """--config-from's callback: the run's settings become the defaults; what it recorded of its prompts
            is kept (``ctx.meta["replay"]``) to refuse prompts it can't measure again."""
            if value is not None:
                tables, ctx.meta["replay"] = _one_line(config_of_run, value, spec)
                _set_defaults(ctx, spec, tables)
            return value

        option = typer.Option(
            "--config-from",
            is_eager=True,
            callback=replay,
            rich_help_panel="Config",
            help="Measure the setup a run JSON recorded (its config.spec); flags override it.",
        )
        params.append(inspect.Parameter("config_from", KW, default=None, annotation=Annotated[Optional[Path], option]))
    return params


def from_spec(spec: type[Spec]) -> Callable[[F], F]:
    """The command's options: its spec's fields (in the spec's order), then its own parameters, then the config
    options its spec has (``Spec.config_file``, ``Spec.config_from``). The function gets every value by name and
    the validated spec as ``ctx.meta["spec"]``."""
    config, config_from = spec.config_file, spec.config_from

    def wrap(fn: F) -> F:
        own = inspect.signature(fn, eval_str=True).parameters
        # the context, whether fn takes it or not: the spec is made of the settings the user gave
        wants_ctx = "ctx" in own
        params = [own["ctx"].replace(kind=KW) if wants_ctx else inspect.Parameter("ctx", KW, annotation=typer.Context)]
        params += [parameter(name, fi) for name, (_t, fi) in spec.fields().items()]
        params += [q.replace(kind=KW) for n, q in own.items() if n != "ctx" and q.kind is not q.VAR_KEYWORD]
        params += _config_options(spec, config_from) if config else []

        @functools.wraps(fn)
        def command(**kwargs: Any) -> Any:
            from llmbench.cli.common import given, user_errors

            ctx = kwargs["ctx"] if wants_ctx else kwargs.pop("ctx")
            printing = kwargs.pop("print_config", False)
            for name in ("config", "config_from"):
                kwargs.pop(name, None)
            with user_errors():  # the settings given (a flag, a config file's value, an environment variable)
                made = spec.of({k: kwargs[k] for k in spec.fields() if given(ctx, k)})
            if printing:
                typer.echo(to_toml(made.setup(), spec.command), nl=False)
                return None
            ctx.meta["spec"] = made
            return fn(**kwargs)

        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        command.__annotations__ = {q.name: q.annotation for q in params}
        return command  # type: ignore[return-value]

    return wrap


def _set_defaults(ctx: typer.Context, spec: type[Spec], tables: dict[str, dict[str, Any]]) -> None:
    """A config's settings as the command's defaults: a flag given on the command line still wins."""
    fields = spec.fields()
    values = {k: _as_option(fields[k][1], v) for t in tables.values() for k, v in t.items() if k in fields}
    ctx.default_map = {**(ctx.default_map or {}), **values}


def _as_option(fi: Any, v: Any) -> Any:
    """A config file's value as its option's default: a path as text, a comma list's items as ``1,2``."""
    if isinstance(v, Path):
        return str(v)
    if is_comma(fi) and isinstance(v, list):
        return ",".join(map(str, v))
    return v


def read_config(path: Path, spec: type[Spec]) -> dict[str, dict[str, Any]]:
    """A config file's tables, checked against ``spec`` (only the keys the file sets); UserError in one line."""
    return spec.checked(read_toml(path), where=str(path), base=Path(path).resolve().parent)


def config_of_run(path: Path, spec: type[Spec]) -> tuple[dict[str, dict[str, Any]], Replay]:
    """The spec a run JSON recorded (``config.spec``), checked against ``spec``, and what the run recorded of its
    prompts; UserError in one line."""
    from llmbench.drivers.workload import Replay
    from llmbench.results.storage import load_run

    config = load_run(path, scalars_only=True).config
    if not config.spec:
        raise UserError(f"--config-from {path}: the run recorded no settings (written before llmbench recorded "
                        "config.spec); repeat its setup with flags")  # fmt: skip
    return spec.checked(config.spec, where=str(path)), Replay.of(path, config)


def _one_line(read: Callable[[Path, type[Spec]], Any], path: Path, spec: type[Spec]) -> Any:
    """``read(path, spec)``, its UserError the one-line exit 2 (in an eager option's callback click would print a
    usage block around it)."""
    try:
        return read(path, spec)
    except UserError as e:
        from llmbench.cli.common import die

        die(str(e), 2)


def to_toml(tables: dict[str, dict[str, Any]], command: str) -> str:
    """The spec's tables as a TOML config file (``tomli_w``), headed by the command that reads it."""
    import tomli_w

    head = f"# llmbench {command} settings: --config FILE.toml reads them back\n"
    return head + tomli_w.dumps({t: v for t, v in tables.items() if v})
