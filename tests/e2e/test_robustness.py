"""Nothing lost, nothing cryptic: signals, --resume, kill -9, secrets, the writer's cost, and property tests.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_robustness.py."""

import json
import signal

import pytest

from llmbench.results.storage import journal_path, load_run
from tests.conftest import N_PROMPTS
from tests.helpers import cli, requests_on_disk, wait_for_requests
from tests.unit.test_robustness import _start


@pytest.mark.subprocess
@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signal_saves_what_finished_and_resume_completes_it(tiny_model_dir, many_prompts, tmp_path, sig, code):
    out = tmp_path / "run.json"
    proc = _start(tiny_model_dir, many_prompts, out)
    wait_for_requests(out, 3, proc)
    proc.send_signal(sig)
    _stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == code, stderr
    assert "Resume with:" in stderr and f"--resume {out}" in stderr and "Traceback" not in stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["complete"] is False and 3 <= len(data["requests"]) < N_PROMPTS
    assert data["sessions"][0]["interrupted_by"] == signal.Signals(sig).name
    assert not journal_path(out).exists()  # compacted on the way out
    first = len(data["requests"])

    proc = _start(tiny_model_dir, many_prompts, None, "--resume", str(out))
    _stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 0, stderr
    data = json.loads(out.read_text(encoding="utf-8"))
    keys = [(r["prompt_index"], r["repeat"]) for r in data["requests"]]
    assert data["complete"] is True and sorted(keys) == [(i, 0) for i in range(N_PROMPTS)]  # each exactly once
    assert len(data["sessions"]) == 2 and data["sessions"][1]["interrupted_by"] is None
    assert {r["session"] for r in data["requests"][:first]} == {0}
    assert {r["session"] for r in data["requests"][first:]} == {1}
    assert data["summary"]["requests"] == N_PROMPTS


@pytest.mark.subprocess
def test_kill_9_leaves_valid_json_and_loses_at_most_the_request_in_flight(tiny_model_dir, many_prompts, tmp_path):
    out = tmp_path / "run.json"
    proc = _start(tiny_model_dir, many_prompts, out)
    wait_for_requests(out, 30, proc)  # past the writer's always-snapshot phase, so the journal is in play
    before = requests_on_disk(out)
    proc.kill()
    proc.wait(timeout=30)
    data = json.loads(out.read_text(encoding="utf-8"))  # the JSON itself is valid
    assert data["complete"] is False
    in_json = len(data["requests"])
    assert journal_path(out).exists() and requests_on_disk(out) > in_json  # the journal held the newest ones
    run = load_run(out)  # llmbench's reader merges the journal
    keys = [(r.prompt_index, r.repeat) for r in run.requests]
    # nothing lost in between: the prompts went in order, so what survived is exactly the first k of them
    assert keys == [(i, 0) for i in range(len(keys))] and len(keys) >= before
    assert run.summary.requests == len(keys)


@pytest.mark.subprocess
def test_secrets_in_the_environment_never_reach_the_json_or_the_terminal(tiny_model_dir, prompt_file, tmp_path):
    secret = "hf_SECRETtoken1234567890"
    out = tmp_path / "r.json"
    env = {"HF_TOKEN": secret, "OPENAI_API_KEY": secret + "x", "LLMBENCH_API_KEY": secret + "y"}
    r = cli("run", prompt_file, "--model", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "2", "-o", out,
            env=env, process=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for text in (out.read_text(encoding="utf-8"), r.stdout, r.stderr):
        assert "SECRET" not in text
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prompts.txt", "r.json"]  # nothing else written
