"""Two writers never share an output: claims (an flock'd sidecar held for the process), exclusive first writes,
default names that can't collide, and a second run aimed at the same file refused while the first's file stays
whole. Real processes throughout: the race is between processes."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from llmbench.core.errors import UserError
from llmbench.results.storage import claim, default_dir, default_output_path, release, write_atomic


def _python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


HOLD = """
import sys, time
from llmbench.results.storage import claim
claim(sys.argv[1])
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _holding(path: Path, seconds: float = 30.0) -> subprocess.Popen:
    proc = _python(HOLD, str(path), str(seconds))
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_claiming_twice_in_one_process_is_a_no_op_and_an_existing_file_needs_replace(tmp_path):
    out = tmp_path / "run.json"
    assert claim(out) == claim(out) == out
    release(out)
    out.write_text("{}")
    with pytest.raises(UserError, match="already exists"):
        claim(out)
    assert claim(out, replace=True) == out
    write_atomic(out, b'{"new": 1}')
    assert json.loads(out.read_text()) == {"new": 1}
    release(out)


def test_the_first_write_never_replaces_a_file_that_appeared_after_the_claim(tmp_path):
    out = tmp_path / "run.json"
    claim(out)
    out.write_text("someone else's result")  # not llmbench: it took no lock
    try:
        with pytest.raises(UserError, match="created by someone else"):
            write_atomic(out, b"ours")
        assert out.read_text() == "someone else's result"
        assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []  # no temp file left
    finally:
        release(out)


def test_after_the_first_write_a_claimed_file_is_replaced_atomically(tmp_path):
    out = tmp_path / "run.json"
    claim(out)
    write_atomic(out, b"1")
    write_atomic(out, b"2")  # a snapshot of the same run: the claim is ours, so it replaces
    assert out.read_text() == "2"
    release(out)


RACE_DEFAULT = """
import sys, time
from llmbench.results.storage import default_output_path, write_atomic
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))  # all start at the same instant (same second, same name)
p = default_output_path("Qwen/Qwen2.5-0.5B-Instruct", "cpu", sys.argv[1])
write_atomic(p, str(p).encode())
print(p, flush=True)
"""


RACE_DIR = """
import sys, time
from llmbench.results.storage import default_dir
time.sleep(max(0.0, float(sys.argv[2]) - time.time()))
print(default_dir("sweep", "sweep.json", sys.argv[1]), flush=True)
"""


def test_default_output_path_in_one_process_skips_names_it_holds(tmp_path):
    a = default_output_path("m", "cpu", tmp_path)
    b = default_output_path("m", "cpu", tmp_path)
    assert a != b
    release(a)
    release(b)
    d = default_dir("ab", "base.json", tmp_path)
    assert d.is_dir() and d.parent == tmp_path
    release(d / "base.json")
