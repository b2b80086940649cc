"""The prompt sets llmbench ships (llmbench/data/prompts): PROMPTS may name one, a file that exists wins, an
unknown name is one clear error line, and ``llmbench prompts`` lists them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads import promptsets
from llmbench.workloads.prompts import load_prompts

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "llmbench" / "data" / "prompts" / "env_violations.txt"
SHA256 = "6b3986b877da5c92cc05811c13b6c0dc1242719a768ab2e24af206b97a98766b"  # tests/data/run-0.1.0.json's


def test_the_shipped_file_is_package_data_and_unchanged():
    """Its bytes are its identity (compare pairs runs by prompt_sha256): moving it changed nothing."""
    assert hashlib.sha256(SHIPPED.read_bytes()).hexdigest() == SHA256
    assert hashlib.sha256((ROOT / "prompts" / "env_violations.txt").read_bytes()).hexdigest() == SHA256  # the link


def test_names_resolve_with_or_without_txt():
    assert "env_violations" in promptsets.names()
    for name in ("env_violations", "env_violations.txt", Path("env_violations")):
        found = promptsets.find(name)
        assert found is not None and found.samefile(SHIPPED)
    for name in ("nope", "x/env_violations", "data/prompts/env_violations.txt", "", ".", "env_violations.jsonl"):
        assert promptsets.find(name) is None, name


def test_listing_counts_like_load_prompts_and_describes_each_set():
    sets = {s.name: s for s in promptsets.shipped()}
    s = sets["env_violations"]
    assert s.prompts == len(load_prompts(s.path).prompts) == 20
    assert s.description and "\n" not in s.description
    assert set(s.as_dict()) == {"name", "prompts", "description", "file"}


def test_a_first_comment_line_is_the_description(tmp_path, monkeypatch):
    (tmp_path / "mine.txt").write_text("# My own set\n\none\n# not a prompt\ntwo\n", encoding="utf-8")
    (tmp_path / "bare.txt").write_text("alpha\n", encoding="utf-8")
    (tmp_path / "tools.jsonl").write_text('# Calls\n{"prompt": "x"}\n', encoding="utf-8")
    (tmp_path / "skipped.json").write_text('[{"prompt": "x"}]\n', encoding="utf-8")  # a dataset: never a set
    monkeypatch.setattr(promptsets, "_folder", lambda: tmp_path)
    sets = {s.name: (s.prompts, s.description) for s in promptsets.shipped()}
    assert sets == {"mine": (2, "My own set"), "bare": (1, ""), "tools": (1, "Calls")}
    assert promptsets.find("tools.jsonl") == tmp_path / "tools.jsonl" and promptsets.find("tools.txt") is None


def test_the_shipped_tool_structured_and_agent_sets_ask_what_they_say():
    from llmbench.workloads.sessions import expand_tasks
    from llmbench.workloads.tools import record

    tools, structured, agent = (load_prompts(n) for n in ("tool_calls", "structured", "agent_tasks"))
    assert tools.path == "shipped:tool_calls" and len(tools.prompts) == 12
    assert record(tools)["prompts_with_tools"] == 12 and record(structured)["prompts_with_response_format"] == 12
    assert {a.tool_choice if isinstance(a.tool_choice, str) else "named" for a in tools.asks} == {
        "auto", "required", "named"}  # fmt: skip
    steps = expand_tasks(agent, 1)
    assert record(steps)["tasks"] == 6 and len(steps.prompts) == 6 + sum(len(a.results) for a in agent.asks)


def test_a_name_loads_the_shipped_set_from_any_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no prompts/ folder here: what a pip user has
    for name in ("env_violations", "env_violations.txt"):
        ps = load_prompts(name)
        assert ps.path == "shipped:env_violations"  # the same on every machine, wherever the package lives
        assert ps.sha256 == SHA256 and len(ps.prompts) == 20
        assert ps.where(0) == "shipped:env_violations:1"
    assert load_prompts("env_violations", as_lines=True).prompts == load_prompts(SHIPPED).prompts


def test_a_file_that_exists_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    Path("env_violations").write_text("mine, no suffix\n", encoding="utf-8")
    Path("env_violations.txt").write_text("mine one\nmine two\n", encoding="utf-8")
    bare, txt = load_prompts("env_violations"), load_prompts("env_violations.txt")
    assert (bare.path, bare.prompts) == ("env_violations", ("mine, no suffix",))
    assert (txt.path, txt.prompts) == ("env_violations.txt", ("mine one", "mine two"))
    assert load_prompts(ROOT / "prompts" / "env_violations.txt").path == str(ROOT / "prompts" / "env_violations.txt")


def test_an_unknown_name_lists_the_shipped_sets(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("env_violation", "nope.txt"):
        with pytest.raises(UserError, match=r"not found: .*env_violations.*llmbench prompts") as e:
            load_prompts(name)
        assert name in str(e.value)
    # a path with a folder is a path: no name lookup, the plain message
    with pytest.raises(UserError, match=r"^prompt file not found: [^()]*$"):
        load_prompts(tmp_path / "env_violations")
    with pytest.raises(UserError, match="is a dataset"):  # the dataset refusal is unchanged
        load_prompts("data.json")


def test_an_unknown_name_is_one_error_line_and_exit_2(cli, tmp_path):
    r = cli("run", "env_violation", "--weights", "random", "-q", cwd=tmp_path)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("llmbench: error: prompt file not found: env_violation")
    assert "env_violations" in lines[0] and "llmbench prompts" in lines[0]
    assert not (tmp_path / "results").exists()


def test_the_prompts_command_runs_in_an_app_built_for_it():
    from typer.testing import CliRunner

    from llmbench.cli import build

    app = build({"prompts"})  # the others listed by their summaries only

    table = CliRunner().invoke(app, ["prompts"])
    assert table.exit_code == 0, table.output
    assert "env_violations" in table.output and "20" in table.output
    listed = CliRunner().invoke(app, ["prompts", "--json"])
    assert listed.exit_code == 0, listed.output
    sets = {x["name"]: x for x in json.loads(listed.output)}
    assert list(sets) == sorted(sets) and sets["env_violations"]["prompts"] == 20
    assert sets["copy_edit"]["prompts"] == 24


def test_llmbench_prompts_lists_the_sets(cli):
    """Through the app itself (llmbench.cli registers llmbench.cli.prompts)."""
    r = cli("prompts")
    assert r.returncode == 0, r.stderr
    assert "env_violations" in r.stdout and "20" in r.stdout and "Chinese" in r.stdout
    r = cli("prompts", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    row = next(x for x in rows if x["name"] == "env_violations")
    assert row["prompts"] == 20 and row["description"] and Path(row["file"]).samefile(SHIPPED)
