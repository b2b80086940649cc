"""Nothing lost, nothing cryptic: signals, --resume, kill -9, secrets, the writer's cost, and property tests."""

import json
import signal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmbench.core.errors import UserError
from llmbench.results.storage import RunWriter, journal_path, load_run
from llmbench.workloads.prompts import load_prompts
from tests.conftest import N_PROMPTS
from tests.helpers import cli, cli_process, requests_on_disk, synthetic_run, wait_for_requests


def _start(tiny_model_dir, prompts, out, *extra, env_extra=None):
    args = ["run", prompts, "--model", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1",
            "--max-new-tokens", "24", "--ignore-eos", "--warmup", "0", "-q", *extra]  # fmt: skip
    if out is not None:
        args += ["-o", out]
    return cli_process(*args, env=env_extra)


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


def test_writer_rewrites_geometrically_and_is_crash_safe(tmp_path):
    """2,000 requests: every request is in the JSON or its journal at any moment, the full rewrites add up to
    O(n) requests written, and the close compacts. (5,000 x 256 tokens, timed: benchmarks/write_cost.py.)"""
    n = 2000
    run = synthetic_run(n=n, tokens=32)
    requests, run.requests = run.requests, []
    out = tmp_path / "r.json"
    writer = RunWriter(out, run)
    written = 0  # requests serialised by snapshots, in all
    for i, r in enumerate(requests):
        run.requests.append(r)
        if writer.add(run, r):
            written += len(run.requests)
        if i in (10, 999, 1499):  # a crash now: the JSON is valid; with its journal it holds every request
            assert json.loads(out.read_text(encoding="utf-8"))["schema_version"] == 1
            assert len(load_run(out).requests) == i + 1
    assert written <= 12 * n  # ~ (1 + 1/growth) x the final size, not n^2 / 2
    assert writer.snapshots < 100
    writer.close(run)
    assert len(load_run(out).requests) == n and not journal_path(out).exists()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=400), suffix=st.sampled_from([".txt", ".jsonl"]))
def test_prompt_loader_property(tmp_path, data, suffix):
    p = tmp_path / f"p{suffix}"
    p.write_bytes(data)
    try:
        ps = load_prompts(p)
    except UserError as e:
        assert "\n" not in str(e) and str(p) in str(e)
        return
    assert ps.prompts and all(x.strip() and "\n" not in x for x in ps.prompts)
    assert len(ps.prompts) == len(ps.line_numbers)


_json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4),
    max_leaves=20,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(obj=_json_like, cut=st.integers(min_value=0, max_value=200), mutate=st.booleans())
def test_run_reader_property(tmp_path, obj, cut, mutate):
    p = tmp_path / "r.json"
    if mutate:  # a real run, truncated somewhere
        text = synthetic_run(n=2, tokens=3).model_dump_json()
        text = text[: len(text) * cut // 200]
    else:
        text = json.dumps({"schema_version": 1, "requests": obj} if cut % 2 else obj)
    p.write_text(text, encoding="utf-8")
    try:
        run = load_run(p)
    except UserError as e:
        assert "\n" not in str(e) and str(p) in str(e)
        return
    assert run.schema_version == 1
