"""``llmbench bisect`` and ``bisect-step`` on a real git repository the tests make: this project's package copied
in, a few commits, one of which makes every model forward 5 ms slower (a ``sitecustomize.py`` at the tree's root,
which the worker, run with the tree first on its path, imports at start-up: a real code change, found only by
measuring), and one whose pyproject.toml asks for a package that can't be installed (skipped, with pip's words).
The search itself, against a simulated measurer with known truth, is tests/test_bisect_rule.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SLOW = """import os, runpy
os.environ["LLMBENCH_INJECT_SLEEP_MS"] = "5"
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks", "inject", "sitecustomize.py"))
"""
pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def _commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", message)
    return _git(repo, "rev-parse", "HEAD").strip()


def _scratch(tmp_path: Path, plan: list[str]) -> tuple[Path, list[str]]:
    """A repository of this project's package; then one commit per ``plan`` item: "ok", "slow" (from then on
    every forward +5 ms) or "broken" (an uninstallable dependency). [GOOD, c1, ...] shas."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "llmbench", repo / "llmbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "benchmarks" / "inject", repo / "benchmarks" / "inject",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    _git(repo, "init", "-q", "-b", "main")
    shas = [_commit(repo, "good", {})]
    pyproject = (repo / "pyproject.toml").read_text(encoding="utf-8")
    for i, kind in enumerate(plan, 1):
        files = {f"notes/{i}.txt": f"commit {i}\n"}
        if kind == "slow":
            files["sitecustomize.py"] = SLOW
        if kind == "broken":
            files["pyproject.toml"] = pyproject.replace(
                "dependencies = [\n", 'dependencies = [\n    "llmbench-no-such-package>=99",\n', 1
            )
        shas.append(_commit(repo, f"{kind} {i}", files))
        if kind == "broken":  # the next commit mends it
            files = {"pyproject.toml": pyproject}
            _commit(repo, f"mend {i}", files)
            shas.append(_git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def _bisect_args(tiny_model_dir, prompts: Path) -> list[str]:
    """Each look: one process a side, the three prompts 3 times (9 pairs, a bootstrap interval), ABBA. With one
    process a side, two unchanged trees of the tiny model read up to about +-10-15% apart (a process's own
    layout, which pairs within it can't average away), the planted +5 ms about +100%: a 40% threshold (a cutoff
    of 20% for bisect-step, about half of +100% for bisect) parts them."""
    worker = f"-m {tiny_model_dir} --device cpu --dtype float32 --threads 1"
    return ["--worker", worker, "--prompts", str(prompts), "--max-new-tokens", "10", "--processes", "1",
            "--repeats", "3", "--abba", "--threshold", "40", "--max-looks", "3"]  # fmt: skip


def _env(tmp_path: Path) -> dict[str, str]:
    # pip must fail at once on the broken commit (no index, no retries), in a venv cache of the test's own
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "LLMBENCH_CACHE": str(tmp_path / "cache")}


def test_bisect_names_the_slowed_commit_and_skips_one_that_cannot_install(cli, tiny_model_dir, prompt_file,
                                                                           tmp_path):  # fmt: skip
    # GOOD, ok, slow, broken, mend, ok, ok: the first probe (the middle) is the broken one; its neighbour is taken
    repo, shas = _scratch(tmp_path, ["ok", "slow", "broken", "ok", "ok"])
    out = tmp_path / "b"
    r = cli("bisect", shas[0], shas[-1], "--repo", repo, "-o", out, "-q", *_bisect_args(tiny_model_dir, prompt_file),
            env=_env(tmp_path))  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "bisect.json").read_text(encoding="utf-8"))
    assert record["answer"]["kind"] == "commit" and record["commits"][record["answer"]["first"]]["sha"] == shas[2]
    assert f"first bad commit: {shas[2]} slow 2" in r.stdout
    broken = next(c for c in record["commits"] if c["subject"] == "broken 3")
    assert broken["skipped"] and "llmbench-no-such-package" in broken["skipped"] and not broken["looks"]
    assert record["bad_change"]["ci_low"] > 40  # +5 ms on a few-ms TPOT
    assert (out / shas[2][:12] / "look-0" / "head.json").is_file()
    assert not (out / "trees").exists()  # the worktrees are gone, the repository's list too
    assert "llmbench" not in _git(repo, "worktree", "list").split("\n", 1)[-1]


def test_no_commit_is_blamed_when_bad_is_not_slower(cli, tiny_model_dir, prompt_file, tmp_path):
    repo, shas = _scratch(tmp_path, ["ok", "ok"])
    r = cli("bisect", shas[0], shas[-1], "--repo", repo, "-o", tmp_path / "b", "-q",
            *_bisect_args(tiny_model_dir, prompt_file), env=_env(tmp_path))  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "nothing to bisect: BAD against GOOD" in r.stdout and "first bad commit" not in r.stdout


def test_git_bisect_run_ends_on_the_same_commit(tiny_model_dir, prompt_file, tmp_path):
    repo, shas = _scratch(tmp_path, ["ok", "slow", "ok", "ok"])
    # the judge is this checkout's installed llmbench (a console script: never the checked-out tree's package,
    # which `python -m` from the repository's folder would import instead)
    judge = [str(Path(sys.executable).parent / "llmbench"), "bisect-step", shas[0], "-q",
             *_bisect_args(tiny_model_dir, prompt_file)]  # fmt: skip
    env = {**os.environ, **_env(tmp_path)}
    subprocess.run(["git", "-C", str(repo), "bisect", "start", shas[-1], shas[0]], check=True, capture_output=True)
    out = subprocess.run(["git", "-C", str(repo), "bisect", "run", *judge], capture_output=True, text=True, env=env,
                         cwd=repo, timeout=900)  # fmt: skip
    assert f"{shas[2]} is the first bad commit" in out.stdout, out.stdout + out.stderr


def test_bad_inputs_are_one_line(cli, tmp_path):
    repo, shas = _scratch(tmp_path, ["ok"])
    cases = [
        (("bisect", shas[1], shas[0], "--repo", repo), "is not an ancestor of"),
        (("bisect", shas[0], shas[0], "--repo", repo), "nothing to bisect"),
        (("bisect", "no-such-ref", shas[1], "--repo", repo), "git rev-parse"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--threshold", "nan"), "--threshold must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--threshold", "-1"), "--threshold must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--max-looks", "0"), "--max-looks must be"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--metric", "speed"), "--metric 'speed'"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--look", "0s"), "--look '0s'"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", tmp_path / "none"), "--resume goes on"),
    ]
    other = tmp_path / "other"
    other.mkdir()
    record = {"bisect_version": 1, "good": "0" * 40, "bad": "1" * 40, "metric": "tpot_ms", "stat": "gaps",
              "threshold_pct": 2.0}  # fmt: skip
    (other / "bisect.json").write_text(json.dumps(record))
    cut = tmp_path / "cut"
    cut.mkdir()
    (cut / "bisect.json").write_text('{"bisect_version": 1, "good": ')
    cases += [
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", other), "holds a bisect of 000000000000"),
        (("bisect", shas[0], shas[1], "--repo", repo, "--resume", "-o", cut), "can't be read"),
    ]
    for args, said in cases:
        r = cli(*args)
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    # bisect-step's errors abort git bisect run (128), never read as "bad"
    r = cli("bisect-step", "no-such-ref", cwd=repo)
    assert r.returncode == 128 and "llmbench: error:" in r.stderr
