"""A server's cold start as its first user sees it (``run --endpoint URL --server-command CMD``): a real
``llmbench serve`` of the tiny model started by the run, measured from its exec to listening, to ready and to its
first request's first token, then warm, then stopped; a server that exits at once or never listens is one line and
exit 2, and no process is left behind. The option checks and the arithmetic: tests/unit/test_server_boot.py."""

from __future__ import annotations

import shlex
import socket
import statistics
import sys
import time

import psutil
import pytest

from llmbench.results.storage import load_run
from tests.servers import free_port

pytestmark = pytest.mark.subprocess


def _processes_with(marker: str) -> list[psutil.Process]:
    """Processes whose command line holds ``marker`` (a port, a tag), this one aside."""
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        if p.info["pid"] != psutil.Process().pid and marker in " ".join(p.info["cmdline"] or []):
            found.append(p)
    return found


def _listens(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _one_line(r) -> str:
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_a_server_the_run_starts_records_its_cold_start_and_is_stopped(cli, tiny_model_dir, prompt_file, tmp_path):
    port = free_port()
    command = shlex.join([sys.executable, "-m", "llmbench", "serve", "-m", str(tiny_model_dir), "--device", "cpu",
                          "--port", str(port)])  # fmt: skip
    # no -o: the run's name is chosen once the server said its model, and the log is renamed beside it
    r = cli("run", prompt_file, "--endpoint", f"http://127.0.0.1:{port}/v1", "--server-command", command,
            "--max-new-tokens", "4", "--repeats", "2", "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    [out] = (tmp_path / "results").glob("*.json")
    run = load_run(out)
    b = run.server_boot
    assert b is not None and b.program.startswith("python") and b.poll_s > 0
    # the phases are ordered and add up
    assert 0 < b.exec_to_listening_s <= b.exec_to_ready_s <= b.exec_to_first_token_s
    assert b.ready_to_first_request_s is not None and b.ready_to_first_request_s >= 0
    assert b.first_request_ttft_ms is not None and b.warm_ttft_p50_ms is not None
    assert b.exec_to_first_token_s == pytest.approx(
        b.exec_to_ready_s + b.ready_to_first_request_s + b.first_request_ttft_ms / 1000, abs=2e-6
    )
    # the first request is the run's first, measured, and the warm-up came after it
    first = run.requests[0]
    assert (first.prompt_index, first.repeat) == (b.first_prompt_index, b.first_repeat) == (0, 0)
    assert first.ttft_ms == b.first_request_ttft_ms and len(run.warmup_requests) == 1
    assert first.started_s < 0.01 < run.requests[1].started_s
    warm = [x.ttft_ms for x in run.requests[1:]]
    assert b.warm_requests == len(warm) == 5 and b.warm_ttft_p50_ms == pytest.approx(statistics.median(warm))
    assert b.first_request_penalty_ms == pytest.approx(b.first_request_ttft_ms - b.warm_ttft_p50_ms, abs=1e-3)
    # the log, beside the run under its name; no temporary log left
    log = out.with_suffix(".server.log")
    assert b.log == log.name and "serving" in log.read_text(encoding="utf-8")
    assert sorted(p.name for p in (tmp_path / "results").iterdir() if p.suffix == ".log") == [log.name]
    # the server is gone: nothing listens on its port, no process of it is left
    assert not _listens(port) and not _processes_with(f"--port {port}")
    # the command's arguments are in config.spec (redacted like any command line), its program alone in the boot
    assert run.config.spec["server"]["server_command"] == command
    shown = cli("show", out)
    line = next(x for x in shown.stdout.splitlines() if x.startswith("server cold start ("))
    assert f"ready {b.exec_to_ready_s:.2f} s" in line and "the first request's TTFT" in line


def test_a_server_that_exits_at_once_is_one_line_naming_its_status(cli, prompt_file, tmp_path):
    port = free_port()
    command = shlex.join([sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"])
    t0 = time.monotonic()
    r = cli("run", prompt_file, "--endpoint", f"http://127.0.0.1:{port}/v1", "--server-command", command,
            "-o", tmp_path / "run.json", "-q")  # fmt: skip
    line = _one_line(r)
    assert time.monotonic() - t0 < 15
    log = tmp_path / "run.server.log"
    assert "exited with status 3 before it was ready" in line and str(log) in line and "no model here" in line
    assert log.read_text(encoding="utf-8").strip() == "no model here" and not (tmp_path / "run.json").exists()


def test_a_server_that_never_listens_is_stopped_at_the_boot_timeout(cli, prompt_file, tmp_path):
    port = free_port()
    tag = f"llmbench-boot-test-{port}"
    command = shlex.join([sys.executable, "-c", f"import time; time.sleep(60)  # {tag}"])
    t0 = time.monotonic()
    r = cli("run", prompt_file, "--endpoint", f"http://127.0.0.1:{port}/v1", "--server-command", command,
            "--boot-timeout", "2", "-o", tmp_path / "run.json", "-q")  # fmt: skip
    line = _one_line(r)
    assert 2 <= time.monotonic() - t0 < 15
    assert "not ready 2 s after its start (--boot-timeout; nothing listened on" in line and "stopped" in line
    assert not _processes_with(tag)  # killed, not left sleeping
