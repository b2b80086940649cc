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


def _remake(monkeypatch) -> None:
    """Write help_baseline.json from today's commands."""
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
