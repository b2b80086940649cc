"""What ``pip install llmbench`` gives a user who never cloned the repository: the wheel carries its package data
(the shipped prompt sets among them), and the quick start runs by prompt-set name from any folder.

The wheel is built from a copy of the sources (the working tree is left alone), installed with ``--no-deps`` into
a fresh venv outside the repository, and the test venv's site-packages are made visible to it by a ``.pth`` line
(no network: the dependencies are the ones already installed; a path line in a ``.pth`` adds the folder but runs
none of its own ``.pth`` files, so the editable install of the repository cannot leak in).
"""

from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SHA256 = "6b3986b877da5c92cc05811c13b6c0dc1242719a768ab2e24af206b97a98766b"  # prompts of env_violations.txt

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


def _sh(*args: str | Path, cwd: Path, env: dict[str, str], timeout: int = 600) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, args))}\nstdout: {r.stdout}\nstderr: {r.stderr}"
    return r


def _build_wheel(tmp: Path, env: dict[str, str]) -> Path:
    """llmbench's wheel, built offline from a copy of pyproject.toml, README.md and llmbench/."""
    src = tmp / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(ROOT / "llmbench", src / "llmbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp / "dist"
    _sh(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", dist,
        src, cwd=tmp, env=env)  # fmt: skip
    (wheel,) = dist.glob("llmbench-*.whl")
    return wheel


def _fresh_venv(tmp: Path, wheel: Path, env: dict[str, str]) -> Path:
    """A venv outside the repository with the wheel installed (``--no-deps``), the test venv's packages visible."""
    venv = tmp / "venv"
    _sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=tmp, env=env)
    python = venv / "bin" / "python"
    _sh(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel,
        cwd=tmp, env=env)  # fmt: skip
    # after the install: pip must not find the repository's editable llmbench and call the wheel installed
    theirs = _sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=tmp, env=env)
    ours = dict.fromkeys([*site.getsitepackages(), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]])
    Path(theirs.stdout.strip(), "test-venv-dependencies.pth").write_text("".join(f"{p}\n" for p in ours),
                                                                         encoding="utf-8")  # fmt: skip
    return venv


def test_the_wheel_carries_the_prompt_sets_and_the_quick_start_runs_by_name(tmp_path, tiny_model_dir):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env |= {"HF_HUB_OFFLINE": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}
    wheel = _build_wheel(tmp_path, env)
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("llmbench/data/prompts/env_violations.txt", "llmbench/data/corpus.txt", "llmbench/page.html",
                 "llmbench/py.typed", "llmbench/data/paint.html"):  # fmt: skip
        assert data in names, data
    assert not any(n.startswith(("prompts/", "tests/")) for n in names)

    venv = _fresh_venv(tmp_path, wheel, env)
    work = tmp_path / "elsewhere"  # no prompts/ folder, no repository: where a pip user stands
    work.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    llmbench = venv / "bin" / "llmbench"

    where = _sh(venv / "bin" / "python", "-c", "import llmbench; print(llmbench.__file__)", cwd=work, env=env)
    module = Path(where.stdout.strip()).resolve()
    assert module.is_relative_to(venv.resolve()), module  # the wheel's, not the repository's editable install
    assert not module.is_relative_to(ROOT)

    listed = _sh(llmbench, "prompts", cwd=work, env=env)
    assert "env_violations" in listed.stdout and "20" in listed.stdout
    rows = json.loads(_sh(llmbench, "prompts", "--json", cwd=work, env=env).stdout)
    row = next(r for r in rows if r["name"] == "env_violations")
    assert row["prompts"] == 20 and Path(row["file"]).resolve().is_relative_to(venv.resolve())

    out = tmp_path / "run.json"
    _sh(llmbench, "run", "env_violations", "--model", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "2",
        "--warmup", "0", "-q", "-o", out, cwd=work, env=env)  # fmt: skip
    run = json.loads(out.read_text(encoding="utf-8"))
    assert run["complete"] and len(run["requests"]) == 20
    assert run["config"]["prompt_file"] == "shipped:env_violations"
    assert run["config"]["prompt_sha256"] == SHA256 and run["config"]["prompt_count"] == 20
    assert not (work / "results").exists()  # -o was honoured
