"""A server's cold start (``run --endpoint URL --server-command CMD``): the options' checks, the command's secrets
in every place it is shown, the loop's first request before any warm-up, and the phases' arithmetic. No process
is started here and no socket opened (the boot of a real ``llmbench serve``: tests/integration/test_boot.py)."""

from __future__ import annotations

import asyncio
import statistics
import sys

import pytest
import tomllib

from llmbench.backends.boot import BootedServer, _hidden_words, models_url
from llmbench.core.redact import mask
from llmbench.results.metrics import request_result, text_sha256
from llmbench.results.schema import Run
from llmbench.runner.loop import execute, new_track, round_robin
from llmbench.spec import RunSpec
from tests.helpers import cli
from tests.unit.test_loop import PROMPTS, FakeBackend

EP = ["--endpoint", "http://127.0.0.1:9/v1"]  # never reached: every case ends before a connection
SECRET = "env HF_TOKEN=abc123 llmbench serve -m M --api-key s3cr3tkey --port 8123"
SHOWN = "env HF_TOKEN=redacted llmbench serve -m M --api-key redacted --port 8123"


@pytest.fixture
def refused(prompt_file):
    """``refused(*ARGS)``: ``llmbench run PROMPTS ARGS`` refused, exit 2 and one line on stderr; that line."""
    return lambda *args: _refused(str(prompt_file), *args)


def _refused(*args: str) -> str:
    r = cli("run", *args)
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    assert lines[0].startswith("llmbench: error: ")
    return lines[0]


def test_server_command_without_endpoint_is_refused(refused):
    assert "--server-command: options of --endpoint runs only" in refused("--server-command", "llmbench serve")


@pytest.mark.parametrize("value", ["0", "nan", "-1", "inf", "86401", "x"])
def test_a_bad_boot_timeout_is_one_line(refused, value):
    assert "--boot-timeout" in refused(*EP, "--server-command", "llmbench serve", "--boot-timeout", value)


def test_the_option_checks_that_need_a_server_command(refused):
    assert "--boot-timeout" in refused(*EP, "--boot-timeout", "5")  # a limit with nothing to start
    assert "no closing quotation" in refused(*EP, "--server-command", "llmbench serve 'M")
    assert "is empty" in refused(*EP, "--server-command", "  ")
    line = refused(*EP, "--server-command", "llmbench serve", "--rate", "2")  # an open loop: not the first request
    assert "closed loop" in line and "--rate" in line


def test_print_config_and_the_recorded_spec_redact_the_command():
    r = cli("run", "p.txt", *EP, "--server-command", SECRET, "--boot-timeout", "20", "--print-config")
    assert r.returncode == 0, r.stderr
    assert "abc123" not in r.stdout and "s3cr3tkey" not in r.stdout
    server = tomllib.loads(r.stdout)["server"]
    assert server["server_command"] == SHOWN and server["boot_timeout_s"] == 20
    spec = RunSpec.of({"endpoint": "http://127.0.0.1:9/v1", "server_command": SECRET})
    assert spec.setup()["server"]["server_command"] == SHOWN  # config.spec in the run JSON


def test_the_resume_line_redacts_the_command(monkeypatch, tmp_path):
    from llmbench.cli.common import resume_command

    for given in (["--server-command", SECRET], [f"--server-command={SECRET}"]):
        monkeypatch.setattr(sys, "argv", ["llmbench", "run", "p.txt", *EP, *given, "-o", "x.json"])
        line = resume_command(tmp_path / "x.json")
        assert "abc123" not in line and "s3cr3tkey" not in line and SHOWN in line and "--resume" in line


def test_what_a_log_line_may_show_of_the_command():
    hidden = _hidden_words(["env", "HF_TOKEN=abc123", "srv", "--api-key", "s3cr3tkey", "--token=tok456",
                            "--upstream", "http://u:pw1234@h/v1?key=q9q9q9"])  # fmt: skip
    line = mask("started with --api-key s3cr3tkey token tok456 and abc123 pw1234 q9q9q9", hidden)
    assert not any(s in line for s in ("s3cr3tkey", "tok456", "abc123", "pw1234", "q9q9q9")), line
    assert models_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/v1/models"
    assert models_url("http://127.0.0.1:8000") == "http://127.0.0.1:8000/v1/models"
    assert models_url("http://h:1/v1/chat/completions?x=1") == "http://h:1/v1/models"


def test_the_first_request_goes_before_any_warm_up(tmp_path):
    """``cold_first``: the plan's first request is the server's first ever; the warm-up follows, then the rest;
    started_s counts from the first one's start."""
    b = FakeBackend()
    t = new_track(b, PROMPTS, tmp_path / "r.json")
    [run] = asyncio.run(execute([t], round_robin([t], PROMPTS, 1), PROMPTS, warmup=2, cold_first=True))
    assert b.calls == [(0, 0), (3, -1), (2, -1), (1, 0), (2, 0), (3, 0)]
    assert [(r.prompt_index, r.repeat) for r in run.requests] == [(0, 0), (1, 0), (2, 0), (3, 0)]
    starts = [r.started_s for r in run.requests]
    assert starts[0] < 0.01 and starts == sorted(starts) and run.complete


def _request(i: int, repeat: int, ttft_ms: float, **extra) -> object:
    start = 10**12
    stamps = [start + int(ttft_ms * 1e6), start + int((ttft_ms + 5) * 1e6)]
    return request_result(prompt_index=i, repeat=repeat, start_ns=start, stamps_ns=stamps, prompt_tokens=3,
                          output_sha256=text_sha256("x"), output_text="x", **extra)  # fmt: skip


def test_the_phases_add_up_and_the_penalty_is_against_the_warm_median():
    s = BootedServer(["/opt/bin/my-server", "--api-key", "k"], "http://127.0.0.1:8123/v1", {}, 30.0)
    assert s.record([]) is None  # never ready: nothing to record
    s.exec_at, s.listening_at, s.ready_at = 100.0, 104.25, 104.5
    s.note_first(0, 0, int(104.75e9), 80.0)
    s.note_first(1, 0, int(105e9), 20.0)  # later requests change nothing
    requests = [_request(0, 0, 80.0), _request(1, 0, 20.0), _request(2, 0, 30.0), _request(0, 1, 10.0),
                _request(1, 1, 999.0, ttft_only=True)]  # fmt: skip
    b = s.record(requests)  # type: ignore[arg-type]
    assert b is not None and b.program == "my-server" and b.poll_s == s.poll_s
    assert (b.exec_to_listening_s, b.exec_to_ready_s, b.ready_to_first_request_s) == (4.25, 4.5, 0.25)
    assert b.exec_to_first_token_s == pytest.approx(4.5 + 0.25 + 0.08, abs=1e-6)
    assert b.exec_to_listening_s <= b.exec_to_ready_s <= b.exec_to_first_token_s
    assert (b.first_prompt_index, b.first_repeat, b.first_request_ttft_ms) == (0, 0, 80.0)
    assert b.warm_requests == 3 and b.warm_ttft_p50_ms == statistics.median([20.0, 30.0, 10.0]) == 20.0
    assert b.first_request_penalty_ms == 60.0
    # the run JSON holds it, and an old reader's run without it reads as None
    run = Run.model_validate({**_minimal_run(), "server_boot": b.model_dump()})
    assert run.server_boot == b and Run.model_validate(_minimal_run()).server_boot is None


def _minimal_run() -> dict:
    from tests.helpers import synthetic_run

    return synthetic_run(n=2).model_dump()


def test_show_prints_the_phases_in_one_line():
    from llmbench.present.summary import server_boot_line

    s = BootedServer(["llmbench", "serve"], "http://127.0.0.1:8123/v1", {}, 30.0)
    s.exec_at, s.listening_at, s.ready_at = 0.0, 8.412, 8.437
    s.note_first(0, 0, int(8.5e9), 61.0)
    run = Run.model_validate(_minimal_run())
    run.server_boot = s.record([_request(0, 0, 61.0), _request(1, 0, 12.0)])  # type: ignore[list-item]
    assert server_boot_line(run) == (
        "server cold start (llmbench, polled every 10 ms): listening 8.41 s, ready 8.44 s, first token 8.56 s "
        "after its exec; the first request's TTFT 61 ms (warm p50 12 ms over 1: +49 ms)"
    )
    assert server_boot_line(Run.model_validate(_minimal_run())) is None
