"""Nothing lost, nothing cryptic: signals, --resume, kill -9, secrets, the writer's cost, and property tests.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_robustness.py."""

import json

import pytest

from tests.helpers import cli


@pytest.mark.slow
def test_resume_refuses_a_different_setup_in_one_line(tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "r.json"
    base = ["run", prompt_file, "--model", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "3", "-q"]
    assert cli(*base, "-o", out).returncode == 0
    r = cli(*base, "--resume", out)
    assert r.returncode == 2 and "already complete" in r.stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    data["complete"] = False
    data["requests"] = data["requests"][:1]
    out.write_text(json.dumps(data), encoding="utf-8")
    r = cli(*[a if a != "3" else "4" for a in base], "--resume", out)
    assert r.returncode == 2 and "max_new_tokens 3 -> 4" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    other = tmp_path / "other.txt"
    other.write_text("a different prompt\n", encoding="utf-8")
    r = cli(*[other if a == prompt_file else a for a in base], "--resume", out)
    assert r.returncode == 2 and "prompt_sha256" in r.stderr
    r = cli(*base, "--resume", out, "-o", tmp_path / "elsewhere.json")
    assert r.returncode == 2 and "drop -o" in r.stderr
    assert json.loads(out.read_text(encoding="utf-8"))["requests"] == data["requests"]  # untouched
    r = cli(*base, "--resume", out)
    assert r.returncode == 0
    done = json.loads(out.read_text(encoding="utf-8"))
    assert done["complete"] and len(done["requests"]) == 3
