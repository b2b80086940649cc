"""Every command's --help, as a user sees it, equals the baseline (tests/data/help_baseline.json, made with
COLUMNS=120, NO_COLOR=1, TERM=dumb; remade, after a deliberate change, with ``python -m tests.unit.test_help``):
no command, option, help text or exit code changes by accident. And no option a user had goes away:
tests/data/option_baseline.json holds every command's flags as they were when the options were first generated
from the spec (issue 45), and each must still be there."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from llmbench.cli import app

DATA = Path(__file__).resolve().parents[1] / "data"
BASELINE: dict[str, dict] = json.loads((DATA / "help_baseline.json").read_text("utf-8"))
OPTIONS: dict[str, list[str]] = json.loads((DATA / "option_baseline.json").read_text("utf-8"))
ENV = {"COLUMNS": "120", "NO_COLOR": "1", "TERM": "dumb", "_TYPER_FORCE_DISABLE_TERMINAL": "1"}


def _commands(cmd, path: list[str]):
    yield path
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        yield from _commands(sub, [*path, name])


def _help(path: list[str], monkeypatch) -> tuple[int, str]:
    monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", False)  # as the baseline's _TYPER_FORCE_DISABLE_TERMINAL
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    r = CliRunner().invoke(app, [*path, "--help"], env=ENV)
    return r.exit_code, r.output


def _ignoring_prompts(text: str) -> list[str]:
    """The root listing without a `prompts` command's lines (another change adds that command)."""
    out: list[str] = []
    skipping = False
    for line in text.splitlines():
        if line.startswith("│ prompts "):
            skipping = True
        elif not (skipping and line.startswith("│" + " " * 10)):  # not the wrapped rest of its line
            skipping = False
            out.append(line)
    return out


def test_the_commands_are_the_baselines():
    names = {" ".join(["llmbench", *p]) for p in _commands(typer.main.get_command(app), [])}
    assert names - {"llmbench prompts"} - {n for n in names if n.startswith("llmbench prompts ")} == set(BASELINE)


@pytest.mark.parametrize("name", sorted(BASELINE))
def test_help_is_unchanged(name, monkeypatch):
    code, text = _help(name.split()[1:], monkeypatch)
    want = BASELINE[name]
    assert code == want["exit"]
    if name == "llmbench":
        assert _ignoring_prompts(text) == _ignoring_prompts(want["help"])
    else:
        assert text == want["help"]


@pytest.mark.parametrize("name", sorted(OPTIONS))
def test_every_option_a_user_had_is_still_there(name):
    cmd = typer.main.get_command(app)
    for part in name.split()[1:]:
        cmd = cmd.commands[part]  # type: ignore[attr-defined]
    now = {o for p in cmd.params for o in (*p.opts, *getattr(p, "secondary_opts", []))}
    assert set(OPTIONS[name]) <= now, sorted(set(OPTIONS[name]) - now)


def _summaries() -> dict[str, str]:
    """Each command's listed help (what llmbench.cli.listing holds), read from the commands (all imported)."""
    from llmbench.cli import COMMANDS

    group = typer.main.get_command(app)
    return {name: (group.commands[name].help or "").split("\n\n")[0].strip() for name in COMMANDS}  # type: ignore[attr-defined]


def _write_listing() -> None:
    """llmbench/cli/listing.py's SUMMARIES from the commands."""
    import llmbench.cli.listing as listing

    path = Path(listing.__file__)
    head = path.read_text(encoding="utf-8").partition("SUMMARIES: dict[str, str] = ")[0]
    body = "".join(f"    {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)},\n" for k, v in _summaries().items())
    path.write_text(f"{head}SUMMARIES: dict[str, str] = {{\n{body}}}\n", encoding="utf-8")


def _remake(monkeypatch) -> None:
    """Write help_baseline.json and llmbench/cli/listing.py from today's commands."""
    _write_listing()
    out = {}
    for path in _commands(typer.main.get_command(app), []):
        if path[:1] == ["prompts"]:
            continue  # another change's command, left out of the baseline (see _ignoring_prompts)
        code, text = _help(path, monkeypatch)
        out[" ".join(["llmbench", *path])] = {"exit": code, "help": text}
    (DATA / "help_baseline.json").write_text(json.dumps(out, indent=1, sort_keys=True) + "\n", "utf-8")


if __name__ == "__main__":
    import os

    os.environ.update(ENV)
    with pytest.MonkeyPatch.context() as mp:
        _remake(mp)


def test_the_root_help_lists_every_command_without_importing_one(monkeypatch):
    """`llmbench --help` is built from the summaries alone (no command module, no spec, no pydantic: the start a
    user waits for) and shows exactly what the app with every command shows; the summaries are the commands' own
    (regenerated with the baseline: ``python -m tests.unit.test_help``)."""
    from llmbench.cli import COMMANDS, build, listing

    assert _summaries() == listing.SUMMARIES, "regenerate: python -m tests.unit.test_help"
    assert list(listing.SUMMARIES) == list(COMMANDS)
    monkeypatch.setattr(typer.rich_utils, "FORCE_TERMINAL", False)
    monkeypatch.setattr(typer.rich_utils, "MAX_WIDTH", None)
    full, listed = (CliRunner().invoke(a, ["--help"], env=ENV) for a in (build(), build(())))
    assert listed.exit_code == full.exit_code == 0 and listed.output == full.output
    assert BASELINE["llmbench"]["help"] == listed.output  # the baseline's root help, as users saw it
