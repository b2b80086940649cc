"""Tool calls, agent tasks and structured output, end to end against real uvicorn servers on loopback.

``llmbench serve``'s app runs a model whose forward passes take known times (tests/delayed_model.py), its
template the built-in Qwen2.5 one (tools included), and ``tool_calls=N`` scripts a conversation's first N answers
as a call streamed over the model's own tokens: the call's name with the first token, its arguments a fragment
a token. So the stamps have a floor the code controls, and the arguments are known. The grammar server compiles a
schema once (a known delay) and keeps it.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import pytest

from llmbench.drivers.run import run as run_driver
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.agents import task_times
from llmbench.results.storage import load_run
from llmbench.serve import FRAGMENT_CHARS, create_app
from llmbench.workloads.prompts import load_prompts
from llmbench.workloads.tools import example_arguments
from tests.delayed_model import delayed_loaded
from tests.servers import BackgroundServer, grammar_server

PREFILL_MS, DECODE_MS = 20.0, 10.0
WEATHER = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                            "days": {"type": "integer", "minimum": 1}},
                          "required": ["city"]}}}  # fmt: skip
ARGUMENTS = json.dumps(example_arguments(WEATHER["function"]["parameters"]))  # what serve's script sends


@pytest.fixture(scope="module")
def server(qwen_tokenizer):
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=PREFILL_MS, decode_ms=DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=4, tool_calls=2)) as url:
        yield url


def _workload(tmp_path, *lines: dict) -> str:
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return str(path)


def test_a_run_with_tools_records_each_calls_stamps_and_arguments_and_no_content_failure(server, tmp_path):
    wl = _workload(tmp_path, {"prompt": "The weather in Paris?", "tools": [WEATHER], "tool_choice": "auto"},
                   {"prompt": "A plain question"})  # fmt: skip
    out = tmp_path / "r.json"
    run, _ = asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=server),
                                    RunOptions(max_new_tokens=32, repeats=2), output=out))  # fmt: skip
    assert not run.failed_requests and run.complete
    calls = [r for r in run.requests if r.prompt_index == 0]
    assert len(calls) == 2
    fragments = -(-len(ARGUMENTS) // FRAGMENT_CHARS)
    for r in calls:
        assert r.tool_call_names == ["get_weather"] and r.tool_call_arguments == [ARGUMENTS]
        assert r.tool_args_valid is True and r.tool_calls == 1 and r.tool_call_events == 1 + fragments
        # the name comes with the first token, the arguments a fragment a token: a floor of one decode step each
        assert r.tool_args_ms - r.tool_name_ms >= fragments * DECODE_MS * 0.9
        assert r.tool_name_ms >= PREFILL_MS * 0.9 and r.tool_calls_ms == r.tool_args_ms
        # no visible text: TTFT is not the call; the call's tokens are counted apart
        assert r.ttft_ms is None and r.output_tokens == 0 and r.tool_call_tokens >= 1 + fragments
        assert r.e2e_ms >= r.tool_args_ms
    plain = [r for r in run.requests if r.prompt_index == 1]
    assert all(r.ttft_ms is not None and r.tool_calls is None for r in plain)
    saved = load_run(out)
    assert saved.schema_version == 3 and saved.summary == run.summary
    s = saved.summary
    assert s.ttft_ms.n == 2 and (s.tool_answers.k, s.tool_answers.n) == (2, 2) and s.tool_args_valid.share == 1.0
    assert s.tool_name_ms.n == 2 and saved.config.tools["tool_names"] == ["get_weather"]


def test_an_agent_task_sends_each_result_back_and_its_model_and_tool_time_add_up(server, qwen_tokenizer, tmp_path):
    results = [{"content": '{"temp_c": 21}', "latency_ms": 120}, {"content": '{"rain": false}', "latency_ms": 60}]
    wl = _workload(tmp_path, {"prompt": "Plan my trip to Paris.", "tools": [WEATHER], "tool_results": results})
    run, _ = asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=server),
                                    RunOptions(max_new_tokens=24)))  # fmt: skip
    steps = sorted(run.requests, key=lambda r: r.turn)
    assert [r.turn for r in steps] == [0, 1, 2] and not run.failed_requests and run.complete
    assert [r.tool_calls for r in steps] == [1, 1, 0]  # the server's script: two calls, then its own text
    assert steps[2].ttft_ms is not None and steps[2].output_text
    for r, res in zip(steps[1:], results, strict=True):
        assert r.tool_wait_set_ms == res["latency_ms"] and r.tool_wait_ms >= res["latency_ms"]
    # what step 1 sent, as the server templated it: the question, the call as streamed, the result
    call = {"id": "x", "type": "function", "function": {"name": "get_weather", "arguments": ARGUMENTS}}
    messages = [{"role": "user", "content": "Plan my trip to Paris."},
                {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "x", "content": results[0]["content"]}]  # fmt: skip
    text = qwen_tokenizer.apply_chat_template(messages, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert steps[1].prompt_tokens == len(qwen_tokenizer(text, add_special_tokens=False)["input_ids"])
    e2e, model, tool, tool_set, first = task_times(steps)
    assert first == pytest.approx(sum(r.ttft_ms if r.ttft_ms is not None else r.tool_name_ms for r in steps))
    assert model + tool == pytest.approx(e2e, abs=0.01) and tool >= tool_set == 180.0
    t = run.summary.tasks
    assert (t.tasks, t.tasks_partial, t.ended_by_answer, t.steps.mean) == (1, 0, 1, 3)
    assert t.e2e_ms.mean == e2e and run.config.sessions["tasks"] == 1


def test_a_schemas_first_use_pays_the_compile_and_later_uses_do_not(tmp_path):
    def fmt(severities):
        schema = {"type": "object", "properties": {"severity": {"enum": severities}}, "required": ["severity"]}
        return {"type": "json_schema", "json_schema": {"name": "report", "schema": schema}}

    wl = _workload(
        tmp_path,
        *({"prompt": f"report {k}", "response_format": fmt(["low", "high"])} for k in range(3)),
        *({"prompt": f"other {k}", "response_format": fmt(["minor", "major"])} for k in range(2)),
    )
    app = grammar_server(compile_ms=150.0)
    with BackgroundServer(app) as url:
        run, _ = asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=url),
                                        RunOptions(max_new_tokens=8, warmup=0, repeats=2)))  # fmt: skip
    assert app.state.compiled == 2 and not run.failed_requests
    first = sorted((r for r in run.requests if r.constraint_first_use), key=lambda r: r.prompt_index)
    assert [(r.prompt_index, r.repeat) for r in first] == [(0, 0), (3, 0)]
    assert len({r.constraint_sha256 for r in run.requests}) == 2
    assert all(r.output_valid for r in run.requests)
    s = run.summary
    assert s.constraint_first_use_ms.n == 2 and s.constraint_reuse_ms.n == 8
    assert s.constraint_first_use_ms.min - s.constraint_reuse_ms.max >= 150.0 * 0.9 - 20  # the compile, and noise


def test_serve_without_grammars_refuses_a_response_format_in_one_line(server, tmp_path):
    wl = _workload(tmp_path, {"prompt": "p", "response_format": {"type": "json_object"}})
    with pytest.raises(Exception) as e:
        asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=server), RunOptions(max_new_tokens=4)))
    assert "no constrained decoder" in str(e.value) and "\n" not in str(e.value)


@pytest.fixture(scope="module")
def constrained(tiny_model_dir):
    """serve with the tiny random-weights Qwen2 (its whole vocabulary) and llguidance's grammars, built by the first
    request that asks (serve's default, --grammars first-use)."""
    from llmbench.engines.hf.models import load_model
    from llmbench.options import ModelOptions

    lm = load_model(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="float32"))
    app = create_app(lm, max_queue=4, grammars="first-use")
    with BackgroundServer(app) as url:
        yield url, app.state.server


def test_serve_holds_random_weights_to_a_schema_and_compiles_each_schema_once(constrained, tmp_path):
    url, server = constrained
    assert server.grammars is None  # nothing built before a request asks
    schema = {"type": "object", "properties": {"severity": {"enum": ["low", "high"]}, "urgent": {"type": "boolean"}},
              "required": ["severity", "urgent"], "additionalProperties": False}  # fmt: skip
    rf = {"type": "json_schema", "json_schema": {"name": "report", "schema": schema}}
    other = {"type": "json_object", "schema": {"type": "object", "properties": {"n": {"enum": [1, 2]}},
                                               "required": ["n"], "additionalProperties": False}}  # fmt: skip
    wl = _workload(tmp_path, *({"prompt": f"report {k}", "response_format": rf} for k in range(3)),
                   {"prompt": "a number", "response_format": other})  # fmt: skip

    run, _ = asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=url),
                                    RunOptions(max_new_tokens=40, warmup=0)))  # fmt: skip
    assert not run.failed_requests and server.grammars.compiles == 2
    for r in run.requests:  # random weights write only what the grammar allows, and end where it does
        assert r.output_valid is True, (r.output_text, r.output_error)
        assert json.loads(r.output_text)
    assert sorted(r.prompt_index for r in run.requests if r.constraint_first_use) == [0, 3]
    assert run.summary.output_valid.share == 1.0 and run.config.tools["constraints"] == 2
    bad = _workload(tmp_path, {"prompt": "p", "response_format": rf})
    with pytest.raises(Exception) as e:  # ignore_eos would write past the grammar's end
        asyncio.run(run_driver(load_prompts(bad), EndpointOptions(endpoint=url),
                               RunOptions(max_new_tokens=8, ignore_eos=True)))  # fmt: skip
    assert "ignore_eos with response_format" in str(e.value)


def test_an_open_loop_sends_tasks_at_their_arrivals_and_each_later_step_after_its_tool(server, tmp_path):
    from llmbench.options import OpenLoop

    results = [{"content": "21 C", "latency_ms": 80}, {"content": "dry", "latency_ms": 40}]
    wl = _workload(tmp_path, {"prompt": "Trip to Paris?", "tools": [WEATHER], "tool_results": results},
                   {"prompt": "Trip to Oslo?", "tools": [WEATHER], "tool_results": results[:1]})  # fmt: skip
    ol = OpenLoop(rate=4.0, arrival="constant", requests=3)  # 3 tasks: Paris, Oslo, Paris again, 0.25 s apart
    run, _ = asyncio.run(run_driver(load_prompts(wl), EndpointOptions(endpoint=server, open_loop=ol),
                                    RunOptions(max_new_tokens=24, warmup=0)))  # fmt: skip
    assert not run.failed_requests and run.complete and len(run.requests) == 3 + 2 + 3
    firsts = sorted((r for r in run.requests if r.turn == 0), key=lambda r: r.scheduled_s)
    assert [r.scheduled_s for r in firsts] == pytest.approx([0.0, 0.25, 0.5])
    assert all(r.scheduled_s is None for r in run.requests if r.turn)  # a later step is sent by its answer
    by_task: dict[tuple[int, int], list] = {}
    for r in run.requests:
        by_task.setdefault((r.conversation, r.repeat), []).append(r)
    for steps in by_task.values():
        steps.sort(key=lambda r: r.turn)
        for prev, r in itertools.pairwise(steps):
            assert r.started_s * 1000 >= prev.started_s * 1000 + prev.stream_end_ms + r.tool_wait_set_ms - 0.01
    assert run.summary.tasks.tasks == 3 and run.config.endpoint.arrival.requests == 3


def test_the_api_measures_a_tool_workload_by_its_shipped_name(server):
    import llmbench

    run = asyncio.run(llmbench.ameasure("tool_calls", endpoint=server, max_new_tokens=48, warmup=0))
    assert run.config.prompt_file == "shipped:tool_calls" and len(run.requests) == 12 and not run.failed_requests
    assert run.summary.tool_answers.k == 12 and run.summary.tool_args_valid.share == 1.0
    named = [r for r in run.requests if r.prompt_index == 3]  # the line that names schedule_inspection
    assert named[0].tool_call_names == ["schedule_inspection"]


def test_a_tool_run_past_the_line_is_version_3_with_columns_and_every_reader_reads_it(cli, server, tmp_path,
                                                                                        monkeypatch):  # fmt: skip
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", "0")  # every run past the line: its requests in an Arrow file
    out = tmp_path / "c.json"
    r = cli("run", "agent_tasks", "--endpoint", server, "--max-new-tokens", "24", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    head = json.loads(out.read_text())
    assert head["schema_version"] == 3 and head["columns"] is not None and head["requests"] == []
    run = load_run(out)
    assert run.summary.tasks.tasks == 6 and any(q.ttft_ms is None for q in run.requests)
    for command in (("show", out), ("report", out, "-o", tmp_path / "r.html"), ("compare", out, out),
                    ("export", out, "--format", "trace", "-o", tmp_path / "t.json"),
                    ("convert", out, "-o", tmp_path / "one.json", "--one-file")):  # fmt: skip
        done = cli(*command)
        assert done.returncode == 0, (command, done.stderr)
    assert json.loads((tmp_path / "one.json").read_text())["schema_version"] == 3  # still a tool run: 3, inline


def test_serve_answers_malformed_tools_with_a_400(server):
    import httpx

    url = f"{server}/v1/chat/completions"
    for tools, choice in (([{"type": "function", "function": "x"}], None), ([WEATHER], {"function": 7})):
        body = {"messages": [{"role": "user", "content": "hi"}], "tools": tools, "max_tokens": 4}
        r = httpx.post(url, json={**body, **({"tool_choice": choice} if choice else {})}, timeout=30)
        # a name-less function is a 400; a malformed choice names no tool: the first one is scripted
        assert r.status_code == (400 if choice is None else 200), r.text
        if choice is not None:
            assert r.json()["choices"][0]["message"]["tool_calls"][0]["function"]["name"] == "get_weather"
