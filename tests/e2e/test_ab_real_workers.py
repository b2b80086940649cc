"""llmbench ab and its worker: the real worker's protocol and one ab of two real `llmbench worker` processes on a
tiny real Qwen2, and ab's plan and interval logic. ab's behaviour against known delays (orders, gates, failures,
resume, processes, duet, budget) is tests/integration/test_ab_logic_on_fake_workers.py; the A/A under a load that
comes and goes is tests/nightly/test_measured_claims.py.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_ab_plan.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from llmbench.backends.worker_main import PROTOCOL
from llmbench.results.storage import load_run
from tests.helpers import check_an_abba_run, real_worker


@pytest.mark.subprocess
def test_the_worker_protocol(tiny_model_dir):
    proc = subprocess.Popen([sys.executable, "-m", "llmbench", "worker", "-m", str(tiny_model_dir), "--device", "cpu",
                             "--dtype", "float32", "--threads", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip

    def ask(**msg):
        proc.stdin.write(json.dumps({"v": PROTOCOL, **msg}) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready" and ready["v"] == PROTOCOL and ready["pid"] == proc.pid
        options = {"max_new_tokens": 5, "ignore_eos": True, "warmup": 0, "repeats": 1}
        prepared = ask(op="prepare", prompts=["one", "two"], prompt_file="p.txt", prompt_sha256="ab" * 32,
                       options=options)  # fmt: skip
        run = prepared["run"]
        assert prepared["event"] == "prepared" and run["config"]["prompt_sha256"] == "ab" * 32
        assert run["config"]["max_new_tokens"] == 5 and run["load"]["parameters"] > 0
        result = ask(op="measure", prompt_index=1, repeat=0)
        r = result["result"]
        assert result["event"] == "result" and r["prompt_index"] == 1 and r["output_tokens"] == 5
        assert r["token_times_ms"][0] == r["ttft_ms"] and result["warnings"] == []  # stamped in the worker
        probe = ask(op="probe")
        assert probe["event"] == "probe" and probe["probe"]["threads"] == 1
        bad = ask(op="dance")
        assert bad["event"] == "error" and "unknown op" in bad["message"]
        proc.stdin.write(json.dumps({"v": PROTOCOL + 1, "op": "probe"}) + "\n")
        proc.stdin.flush()
        newer = json.loads(proc.stdout.readline())
        assert newer["event"] == "error" and "protocol" in newer["message"]
        assert proc.wait(30) == 2  # it refuses a protocol it doesn't speak, and says so first
    finally:
        proc.kill()


def test_ab_interleaves_pairs_and_gates_like_compare(cli, tiny_model_dir, prompt_file, tmp_path, probe_on):
    """Two real workers: ABBA pairs, and each worker's own probe on its own thread. The gate is not the subject (two
    twins of a tiny model read up to +-25% apart in 6 pairs on a busy day): 200% only asks that it is printed."""
    out = tmp_path / "ab"
    r = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir),
            "--max-new-tokens", "6", "--repeats", "2", "-o", out, "--fail-on-regression", "200", "-q")  # fmt: skip
    check_an_abba_run(cli, r, out, prompt_file, tmp_path, "llmbench worker")
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert base.machine.probe_before.threads == 1 and head.machine.probe_after is not None
