"""bisect's per-requirements venvs (llmbench/drivers/checkout.py): a venv is made from, and sees the packages of,
the interpreter that built it, so its cache key must name that interpreter as well as the requirements. pip and
venv are faked here (a unit test starts no process): what is checked is which venv is reused."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmbench.drivers import checkout


def test_a_venv_is_not_reused_by_another_interpreter(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(checkout, "requirements", lambda repo, sha: ["torch>=99"])
    monkeypatch.setattr(checkout, "unmet", lambda reqs: reqs)
    made: list[str] = []

    def run(step, **kw):
        if step[1:3] == ["-m", "venv"]:
            made.append(step[-1])
            Path(step[-1], "bin").mkdir(parents=True, exist_ok=True)
        return subprocess.CompletedProcess(step, 0, "", "")

    monkeypatch.setattr(checkout.subprocess, "run", run)
    first = checkout.ensure_python(tmp_path, "a" * 40)
    assert checkout.ensure_python(tmp_path, "b" * 40) == first and len(made) == 1  # the same: built once
    monkeypatch.setattr(sys, "executable", str(tmp_path / "other-python"))
    monkeypatch.setattr(sys, "version", "3.99.0 (another)")
    assert checkout.ensure_python(tmp_path, "c" * 40) != first and len(made) == 2
