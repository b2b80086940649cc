"""Tool calls, structured output and agent tasks through the commands a user types: ``llmbench serve`` as its own
process (the tiny random-weights Qwen2, ``--test-tool-calls`` scripting its calls, llguidance holding its JSON),
``llmbench run`` of the shipped sets, then ``compare`` gating on a tool metric, ``export --format trace``,
``report`` and ``show``; and bad workload files refused in one line."""

from __future__ import annotations

import json
import sys

import pytest

from llmbench.results.storage import load_run
from tests.servers import free_port, serve_process


@pytest.fixture(scope="module")
def long_tiny_dir(tmp_path_factory, qwen_tokenizer):
    """The tiny random Qwen2 with a context of 4,096: the shipped sets' four tools take ~500 prompt tokens."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from tests.conftest import TINY

    path = tmp_path_factory.mktemp("tiny-qwen2-4k")
    torch.manual_seed(1)
    AutoModelForCausalLM.from_config(Qwen2Config(**{**TINY, "max_position_embeddings": 4096})).save_pretrained(path)
    qwen_tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def served(long_tiny_dir):
    port = free_port()
    args = [sys.executable, "-m", "llmbench", "serve", "-m", str(long_tiny_dir), "--device", "cpu", "--port",
            str(port), "--test-tool-calls", "2"]  # fmt: skip
    proc = serve_process(args, port, 120.0)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.subprocess
def test_agent_tasks_and_structured_output_through_the_commands(cli, served, tmp_path):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    for out in (a, b):
        r = cli("run", "agent_tasks", "--endpoint", served, "--max-new-tokens", "24", "-o", out, "-q")
        assert r.returncode == 0, r.stderr
        assert "agent tasks: 6 whole" in r.stdout and "tool calls:" in r.stdout
    run = load_run(a)
    assert run.schema_version == 3 and run.complete and not run.failed_requests
    t = run.summary.tasks
    assert t.tasks == 6 and t.e2e_ms.mean == pytest.approx(t.model_ms.mean + t.tool_ms.mean, abs=0.01)
    assert t.tool_set_ms.mean > 0 and t.tool_ms.mean >= t.tool_set_ms.mean
    # the gate reads the tool metrics as it reads TTFT (the same server twice: no significant change, a pass)
    r = cli("compare", a, b, "--fail-on", "tool_args_ms=500")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "tool args ms" in r.stdout
    trace = tmp_path / "t.json"
    assert cli("export", a, "--format", "trace", "-o", trace).returncode == 0
    events = json.loads(trace.read_text())["traceEvents"]
    names = {e["name"] for e in events}
    assert {"tool", "until the tool call's name", "tool call arguments"} <= names
    assert cli("report", a, "-o", tmp_path / "r.html").returncode == 0
    shown = cli("show", a)
    assert shown.returncode == 0 and "model" in shown.stdout and "tool" in shown.stdout

    s = tmp_path / "s.json"
    r = cli("run", "structured", "--endpoint", served, "--max-new-tokens", "48", "--warmup", "0", "-o", s, "-q")
    assert r.returncode == 0, r.stderr
    structured = load_run(s)
    assert structured.summary.output_valid.n == 12 and structured.config.tools["constraints"] == 3
    assert sum(bool(q.constraint_first_use) for q in structured.requests) == 3


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            '{"prompt": "p", "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": 3}}}]}',
            "not a valid JSON schema",
        ),
        ('{"prompt": "p", "tool_results": ["x"]}', 'without "tools"'),
        ('{"prompt": "p", "response_format": {"type": "json_schema"}}', 'needs {"name"'),
    ],
)
def test_a_bad_workload_line_is_one_line_and_exit_2(cli, tmp_path, line, why):
    wl = tmp_path / "w.jsonl"
    wl.write_text("# a workload\n" + line + "\n", encoding="utf-8")
    r = cli("run", wl, "--endpoint", "http://127.0.0.1:9/v1", "-o", tmp_path / "o.json")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert f"{wl}:2: " in r.stderr and why in r.stderr and not (tmp_path / "o.json").exists()
