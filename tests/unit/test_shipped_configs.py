"""Every config file the repository ships reads as its command reads it: its keys exist, its values are of their
types, and every file it names is there, read from the config file's own folder as `--config` reads it (issue 62:
regression.toml named prompts/env_violations.txt, which became benchmarks/prompts/... when relative paths started
to be read from the file's folder, and the regression job could not start)."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmbench.spec import read_toml
from llmbench.spec.commands import AbSpec

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = {"benchmarks/regression.toml": AbSpec}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_config_reads_and_names_files_that_are_there(name):
    path = ROOT / name
    tables = SHIPPED[name].checked(read_toml(path), where=str(path), base=path.parent)
    paths = [v for values in tables.values() for v in values.values() if isinstance(v, Path)]
    assert paths, f"{name} names no file: the check would say nothing"
    for p in paths:
        assert p.exists(), f"{name} names {p}, which is not there"


def test_every_toml_the_repository_ships_for_a_command_is_checked_here():
    shipped = {str(p.relative_to(ROOT)) for p in (ROOT / "benchmarks").glob("*.toml")}
    assert shipped <= set(SHIPPED), f"check these too: {sorted(shipped - set(SHIPPED))}"
