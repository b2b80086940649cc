"""``llmbench bisect`` and ``bisect-step`` on a real git repository the tests make: this project's package copied
in, a few commits, one of which makes every model forward 5 ms slower (a ``sitecustomize.py`` at the tree's root,
which the worker, run with the tree first on its path, imports at start-up: a real code change, found only by
measuring), and one whose pyproject.toml asks for a package that can't be installed (skipped, with pip's words).
The search itself, against a simulated measurer with known truth, is tests/unit/test_bisect_rule.py.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/integration/test_bisect_inputs.py."""

from __future__ import annotations

import json

import pytest

from tests.bisect_repo import bisect_args, bisect_env, git, scratch


@pytest.mark.slow
@pytest.mark.subprocess
def test_bisect_names_the_slowed_commit_and_skips_one_that_cannot_install(cli, tiny_model_dir, prompt_file,
                                                                           tmp_path):  # fmt: skip
    # GOOD, ok, slow, broken, mend, ok, ok: the first probe (the middle) is the broken one; its neighbour is taken
    repo, shas = scratch(tmp_path, ["ok", "slow", "broken", "ok", "ok"])
    out = tmp_path / "b"
    r = cli("bisect", shas[0], shas[-1], "--repo", repo, "-o", out, "-q", *bisect_args(tiny_model_dir, prompt_file),
            env=bisect_env(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "bisect.json").read_text(encoding="utf-8"))
    assert record["answer"]["kind"] == "commit" and record["commits"][record["answer"]["first"]]["sha"] == shas[2]
    assert f"first bad commit: {shas[2]} slow 2" in r.stdout
    broken = next(c for c in record["commits"] if c["subject"] == "broken 3")
    assert broken["skipped"] and "llmbench-no-such-package" in broken["skipped"] and not broken["looks"]
    assert record["bad_change"]["ci_low"] > 40  # +5 ms on a few-ms TPOT
    assert (out / shas[2][:12] / "look-0" / "head.json").is_file()
    assert not (out / "trees").exists()  # the worktrees are gone, the repository's list too
    assert "llmbench" not in git(repo, "worktree", "list").split("\n", 1)[-1]
