"""Every command's --help, as a user sees it, equals the baseline captured before the CLI was split into modules
(tests/data/help_baseline.json, made with COLUMNS=120, NO_COLOR=1, TERM=dumb): no command, option, help text or
exit code changed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer.main
import typer.rich_utils
from typer.testing import CliRunner

from llmbench.cli import app

BASELINE: dict[str, dict] = json.loads(
    (Path(__file__).resolve().parents[1] / "data" / "help_baseline.json").read_text("utf-8")
)
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
