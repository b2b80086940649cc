"""A real git repository of this project's package for the bisect tests: a few commits, one of which makes every
model forward 5 ms slower (a ``sitecustomize.py`` at the tree's root, which the worker, run with the tree first on
its path, imports at start-up: a real code change, found only by measuring), and one whose pyproject.toml asks for
a package that can't be installed (skipped, with pip's words)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOW = """import os, runpy
os.environ["LLMBENCH_INJECT_SLEEP_MS"] = "5"
runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks", "inject", "sitecustomize.py"))
"""


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def commit(repo: Path, message: str, files: dict[str, str]) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def scratch(tmp_path: Path, plan: list[str]) -> tuple[Path, list[str]]:
    """A repository of this project's package; then one commit per ``plan`` item: "ok", "slow" (from then on
    every forward +5 ms) or "broken" (an uninstallable dependency). [GOOD, c1, ...] shas."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "llmbench", repo / "llmbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "benchmarks" / "inject", repo / "benchmarks" / "inject",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    git(repo, "init", "-q", "-b", "main")
    shas = [commit(repo, "good", {})]
    pyproject = (repo / "pyproject.toml").read_text(encoding="utf-8")
    for i, kind in enumerate(plan, 1):
        files = {f"notes/{i}.txt": f"commit {i}\n"}
        if kind == "slow":
            files["sitecustomize.py"] = SLOW
        if kind == "broken":
            files["pyproject.toml"] = pyproject.replace(
                "dependencies = [\n", 'dependencies = [\n    "llmbench-no-such-package>=99",\n', 1
            )
        shas.append(commit(repo, f"{kind} {i}", files))
        if kind == "broken":  # the next commit mends it
            files = {"pyproject.toml": pyproject}
            commit(repo, f"mend {i}", files)
            shas.append(git(repo, "rev-parse", "HEAD").strip())
    return repo, shas


def bisect_args(tiny_model_dir, prompts: Path) -> list[str]:
    """Each look: one process a side, the three prompts 3 times (9 pairs, a bootstrap interval), ABBA. With one
    process a side, two unchanged trees of the tiny model read up to about +-10-15% apart (a process's own
    layout, which pairs within it can't average away), the planted +5 ms about +100%: a 40% threshold (a cutoff
    of 20% for bisect-step, about half of +100% for bisect) parts them."""
    worker = f"-m {tiny_model_dir} --device cpu --dtype float32 --threads 1"
    return ["--worker", worker, "--prompts", str(prompts), "--max-new-tokens", "10", "--processes", "1",
            "--repeats", "3", "--abba", "--threshold", "40", "--max-looks", "3"]  # fmt: skip


def bisect_env(tmp_path: Path) -> dict[str, str]:
    # pip must fail at once on the broken commit (no index, no retries), in a venv cache of the test's own
    return {"PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "", "LLMBENCH_CACHE": str(tmp_path / "cache")}
