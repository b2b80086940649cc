"""Tool calls and structured output, in the small: the stream's tool-call events assembled and stamped (bytes with
known arrivals: the ground truth), a workload's fields checked, answers validated by jsonschema, the figures of a
run and of agent tasks, the built-in Qwen template's tools branch and serve's scripted arguments."""

from __future__ import annotations

import json

import pytest

from llmbench.backends.endpoint import answer_checks
from llmbench.backends.http.client import Call, Stream, TokenCounter, parsed
from llmbench.core.errors import RequestFailed, UserError
from llmbench.results.agents import share, task_figures, task_times, tool_figures
from llmbench.results.metrics import request_result, summarize
from llmbench.workloads.tools import Ask, check_value, read_ask

WEATHER = {"type": "function", "function": {"name": "get_weather", "parameters": {
    "type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city"]}}}  # fmt: skip


def _event(delta: dict, finish: str | None = None, index: int = 0) -> bytes:
    chunk = {"choices": [{"index": index, "delta": delta, "finish_reason": finish}]}
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _call(index: int, *, name: str | None = None, args: str | None = None, id: str | None = None) -> dict:
    fn = {k: v for k, v in (("name", name), ("arguments", args)) if v is not None}
    return {"index": index, **({"id": id, "type": "function"} if id else {}), "function": fn}


def _stream(reads: list[tuple[int, bytes]]) -> Stream:
    return parsed(Stream(start_ns=0), reads)


MS = 1_000_000


def test_a_call_split_over_events_is_assembled_and_its_name_and_arguments_are_stamped_when_they_arrived():
    args = '{"city": "Paris", "days": 3}'
    pieces = [args[:7], args[7:15], args[15:27], args[27:]]  # the last piece closes the object
    reads = [(10 * MS, _event({"role": "assistant", "content": ""})),
             (20 * MS, _event({"tool_calls": [_call(0, name="get_weather", args="", id="call_1")]}))]  # fmt: skip
    reads += [((30 + 10 * k) * MS, _event({"tool_calls": [_call(0, args=p)]})) for k, p in enumerate(pieces)]
    reads.append((80 * MS, _event({}, "tool_calls")))
    s = _stream(reads)
    (call,) = s.calls.values()
    assert (call.id, call.name, call.arguments) == ("call_1", "get_weather", args)
    assert call.name_ns == 20 * MS and call.parsed_ns == 60 * MS  # the closing brace's event, not before
    assert s.stamps_ns == [] and s.answered_ns == 60 * MS and s.finish_reason == "tool_calls"
    fields = answer_checks(Ask(tools=(WEATHER,)), s)
    assert fields["tool_calls"] == 1 and fields["tool_call_events"] == 5
    assert (fields["tool_name_ms"], fields["tool_args_ms"], fields["tool_calls_ms"]) == (20.0, 60.0, 60.0)
    assert fields["tool_args_valid"] is True and fields["tool_call_arguments"] == [args]
    # an answer without text: TTFT stays the first *text* (none), E2E ends with the call
    r = request_result(
        prompt_index=0,
        repeat=0,
        start_ns=0,
        stamps_ns=[],
        prompt_tokens=5,
        output_sha256="x",
        output_text="",
        output_tokens=0,
        chunks=0,
        answered_ns=s.answered_ns,
        **fields,
    )
    assert r.ttft_ms is None and r.e2e_ms == 60.0 and r.tpot_ms is None and r.output_tokens == 0


def test_a_server_that_repeats_id_and_name_in_every_fragment_gives_one_call_and_two_calls_stay_apart():
    reads = [(1 * MS, _event({"tool_calls": [_call(0, name="get_weather", args='{"city":', id="a")]})),
             (2 * MS, _event({"tool_calls": [_call(0, name="get_weather", args=' "Rome"}', id="a")]})),
             (3 * MS, _event({"tool_calls": [_call(1, name="get_weather", args='{"city": "Oslo"}', id="b")]})),
             (4 * MS, _event({"content": "done"}))]  # fmt: skip
    s = _stream(reads)
    assert [(c.id, c.name, c.arguments) for c in s.calls.values()] == [
        ("a", "get_weather", '{"city": "Rome"}'), ("b", "get_weather", '{"city": "Oslo"}')]  # fmt: skip
    assert s.stamps_ns == [4 * MS] and s.answered_ns == 4 * MS
    fields = answer_checks(Ask(tools=(WEATHER,)), s)
    assert fields["tool_calls_ms"] == 3.0 and fields["tool_args_ms"] == 2.0


@pytest.mark.parametrize(
    ("calls", "why"),
    [
        ([("get_time", "{}")], "not an offered tool"),
        ([("get_weather", '{"city": 3}')], "at /city: 3 is not of type 'string'"),
        ([("get_weather", '{"days": 2}')], "'city' is a required property"),
        ([("get_weather", '{"city": "x"')], "not JSON"),
        ([("get_weather", '{"city": "x", "days": 0}')], "less than the minimum of 1"),
    ],
)
def test_arguments_that_miss_the_tools_schema_are_invalid_with_the_first_reason(calls, why):
    reads = [(k * MS + MS, _event({"tool_calls": [_call(k, name=n, args=a)]})) for k, (n, a) in enumerate(calls)]
    fields = answer_checks(Ask(tools=(WEATHER,)), _stream(reads))
    assert fields["tool_args_valid"] is False and why in fields["tool_args_error"]
    if why == "not JSON":  # arguments that never parse have no "complete" time
        assert fields["tool_args_ms"] is None and fields["tool_calls_ms"] is None


def test_a_malformed_tool_call_event_fails_the_request_in_one_line():
    for bad in ({"tool_calls": "x"}, {"tool_calls": [{"index": "0", "function": {}}]},
                {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}):  # fmt: skip
        with pytest.raises(RequestFailed) as e:
            _stream([(MS, _event(bad))])
        assert "\n" not in str(e.value) and ("malformed" in str(e.value))


def test_usage_counts_tool_call_tokens_apart_from_the_text():
    s = Stream(start_ns=0, usage={"prompt_tokens": 9, "completion_tokens": 17})
    s.calls[(0, 0)] = Call(name="f")
    c = TokenCounter(None).count(s, [])
    assert (c.output_tokens, c.tool_call_tokens, c.source) == (0, 17, "usage")  # calls alone: every token theirs
    s.stamps_ns, s.pieces = [1], ["hello"]
    c = TokenCounter(None).count(s, [])  # text beside calls, no tokenizer to split usage: the text's events
    assert (c.output_tokens, c.tool_call_tokens, c.source) == (1, None, "chunks")


def test_structured_output_validates_the_answer_against_its_schema():
    schema = {"type": "object", "properties": {"severity": {"enum": ["low", "high"]}}, "required": ["severity"]}
    ask = Ask(response_format={"type": "json_schema", "json_schema": {"name": "r", "schema": schema}})
    for text, ok in (('{"severity": "high"}', True), ('{"severity": "mid"}', False), ("high", False)):
        s = _stream([(MS, _event({"content": text}))])
        fields = answer_checks(ask, s)
        assert fields["output_valid"] is ok and (fields["output_error"] is None) is ok
        assert "tool_calls" not in fields  # no tools offered: no tool figures
    assert check_value("[1]", {"type": "object"}) == "[1] is not of type 'object'"


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ({"tools": []}, '"tools" must be a non-empty list'),
        ({"tools": [{"type": "function", "function": {"parameters": {}}}]}, "tools[0] must be"),
        ({"tools": [WEATHER, WEATHER]}, "given twice"),
        (
            {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "objekt"}}}]},
            "not a valid JSON schema",
        ),
        ({"tool_choice": "auto"}, '"tool_choice" without "tools"'),
        ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}}, "naming one of"),
        ({"tools": [WEATHER], "tool_choice": {"function": 7}}, "naming one of"),
        ({"tools": [WEATHER], "tool_choice": 3}, "naming one of"),
        ({"response_format": {"type": "xml"}}, '"response_format" must have "type"'),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}}, 'needs {"name"'),
        ({"response_format": {"type": "json_object", "schema": {"minimum": "one"}}}, "not a valid JSON schema"),
        ({"tool_results": ["x"]}, 'without "tools"'),
        ({"tools": [WEATHER], "tool_results": []}, "list of 1 to 100 results"),
        ({"tools": [WEATHER], "tool_results": [{"content": "x", "latency_ms": float("nan")}]}, "latency_ms must be"),
        ({"tools": [WEATHER], "tool_results": [{"content": "x", "latency_ms": -1}]}, "latency_ms must be"),
        ({"tools": [WEATHER], "tool_results": [{"content": "x", "latency_ms": 1e308}]}, "from 0 to 86,400,000"),
        ({"tools": [WEATHER], "tool_results": [{"content": "x", "latency_ms": "5"}]}, "latency_ms must be"),
        ({"tools": [WEATHER], "tool_results": [{"latency_ms": 1}]}, "must be a string or"),
    ],
)
def test_a_malformed_workload_line_is_refused_naming_it(line, why):
    with pytest.raises(UserError) as e:
        read_ask("w.jsonl:3", line)
    assert str(e.value).startswith("w.jsonl:3: ") and why in str(e.value)


def test_a_constraint_is_what_a_server_compiles_and_two_equal_ones_share_a_hash():
    rf = {"type": "json_object", "schema": {"type": "object"}}
    assert Ask(tools=(WEATHER,), tool_choice="auto").constraint_sha256() is None  # free choice: nothing forced
    forced = Ask(tools=(WEATHER,), tool_choice="required").constraint_sha256()
    assert forced is not None and forced != Ask(response_format=rf).constraint_sha256()
    assert Ask(response_format=rf).constraint_sha256() == Ask(response_format=dict(rf)).constraint_sha256()
    assert (
        read_ask("f:1", {"prompt": "p"}) is None and read_ask("f:1", {"tools": None, "response_format": None}) is None
    )
    ask = read_ask("f:1", {"tools": [WEATHER], "tool_results": ["{}", {"content": {"t": 1}, "latency_ms": 5}]})
    assert [(r.content, r.latency_ms) for r in ask.results] == [("{}", 0.0), ('{"t": 1}', 5.0)]


def _step(conversation: int, turn: int, started_s: float, end_ms: float, calls: int, wait: float | None = None,
          **kw):  # fmt: skip
    r = request_result(prompt_index=conversation, repeat=0, start_ns=0, stamps_ns=[] if calls else [int(end_ms * MS)],
                       prompt_tokens=kw.pop("prompt_tokens", 10), output_sha256="x", output_text="" if calls else "ok",
                       output_tokens=0 if calls else 1, chunks=0 if calls else 1, answered_ns=int(end_ms * MS),
                       started_s=started_s, stream_end_ms=end_ms, conversation=conversation, turn=turn,
                       tool_calls=calls, tool_name_ms=end_ms / 2 if calls else None, **kw)  # fmt: skip
    r.tool_wait_ms, r.tool_wait_set_ms = wait, (wait - 1.0 if wait is not None else None)
    return r


def test_an_agent_tasks_model_and_tool_time_add_up_to_its_end_to_end_time():
    # step 0 at 0 s for 100 ms; the tool waits 250 ms; step 1 at 0.35 s for 80 ms; 200 ms; step 2 answers
    steps = [_step(0, 0, 0.0, 100.0, 1), _step(0, 1, 0.35, 80.0, 1, wait=250.0),
             _step(0, 2, 0.63, 40.0, 0, wait=200.0, cached_tokens=30, prompt_tokens=60)]  # fmt: skip
    e2e, model, tool, tool_set, first = task_times(steps)
    assert (e2e, model, tool, tool_set) == (670.0, 220.0, 450.0, 448.0) and model + tool == e2e
    assert first == 50.0 + 40.0 + 40.0  # two calls' names at half their lives, the answer's text at its end
    failed_first = [_step(1, 1, 2.0, 50.0, 1, wait=10.0)]  # its step 0 failed: not a whole task
    t = task_figures([*steps, *failed_first])
    assert t is not None and (t.tasks, t.tasks_partial, t.ended_by_answer) == (1, 1, 1)
    assert t.e2e_ms.mean == 670.0 and t.model_share == round(220 / 670, 6) and t.steps.mean == 3
    assert t.cached_tokens_share_later_steps == 0.5 and t.step_ttft_ms.n == 3
    s = summarize(steps)
    assert s.ttft_ms.n == 1 and s.tasks == t.__class__(**{**t.model_dump(), "tasks_partial": 0})
    assert s.tool_answers.k == 2 and s.tool_answers.n == 3 and s.tool_name_ms.n == 2
    assert task_figures([_step(0, 0, 0.0, 10.0, 1)]) is None  # no step answered a call: no task went on


def test_a_share_has_its_wilson_interval_and_a_constraints_first_use_is_apart():
    s = share(9, 10)
    assert (s.share, round(s.low, 3), round(s.high, 3)) == (0.9, 0.596, 0.982)  # Wilson 95% for 9 of 10
    assert share(0, 0) is None
    first = _step(0, 0, 0.0, 300.0, 0, constraint_sha256="a" * 64, constraint_first_use=True)
    later = [_step(i, 0, float(i), 50.0, 0, constraint_sha256="a" * 64, constraint_first_use=False) for i in (1, 2)]
    f = tool_figures([first, *later])
    assert f["constraint_first_use_ms"].mean == 300.0 and f["constraint_reuse_ms"].n == 2


def test_the_builtin_qwen_template_shows_tools_calls_and_results_as_qwen_writes_them(qwen_tokenizer):
    call = {"id": "c", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "P"}'}}
    messages = [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c", "content": "21 C"}]  # fmt: skip
    text = qwen_tokenizer.apply_chat_template(messages, tools=[WEATHER], tokenize=False, add_generation_prompt=True)
    assert "# Tools" in text and json.dumps(WEATHER) in text
    assert '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": "{\\"city\\": \\"P\\"}"}' in text
    assert "<|im_start|>user\n<tool_response>\n21 C\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    ids = qwen_tokenizer("<tool_call></tool_call>", add_special_tokens=False)["input_ids"]
    assert ids == [151657, 151658]  # one token each, as Qwen2.5's own tokenizer has them
    plain = qwen_tokenizer.apply_chat_template(messages[:1], tokenize=False, add_generation_prompt=True)
    assert "# Tools" not in plain and plain.endswith("<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n")


def test_serves_scripted_arguments_match_the_tools_schema():
    from llmbench.serve import ScriptedCall
    from llmbench.workloads.tools import example_arguments, validator

    schema = {"type": "object", "properties": {
        "city": {"type": "string"}, "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 2},
        "tags": {"type": "array", "items": {"type": "string"}}, "exact": {"type": "boolean"},
        "where": {"type": "object", "properties": {"lat": {"type": "number"}}}}}  # fmt: skip
    value = example_arguments(schema)
    assert value == {"city": "city", "unit": "c", "days": 2, "tags": ["tags"], "exact": True, "where": {"lat": 1.0}}
    assert not list(validator(schema).iter_errors(value))
    call = ScriptedCall("f", json.dumps(value), "id")
    assert "".join(call.fragments()) == call.arguments and len(call.fragments()) > 5


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (("tool_calls", "--weights", "random"), "a model in this process sends prompts alone"),
        (("tool_calls", "--endpoint", "http://127.0.0.1:9/v1", "--workers", "2"), "--workers 2: a workload with tools"),
        (("agent_tasks", "--endpoint", "http://127.0.0.1:9/v1", "--turns", "2"), "a task's steps are its turns"),
    ],
)
def test_what_a_tool_workload_cannot_do_is_one_line_before_anything_loads(cli, tmp_path, args, why):
    r = cli("run", *args, "-o", tmp_path / "o.json")
    assert r.returncode == 2 and why in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.json").exists()


def test_the_commands_that_send_prompts_alone_refuse_a_tool_workload(cli, tmp_path):
    nowhere = "http://127.0.0.1:9/v1"  # never reached: refused before
    for command in (("sweep", "tool_calls", "--weights", "random", "--threads", "1,2"),
                    ("ab", "structured", "--base", nowhere, "--head", nowhere)):  # fmt: skip
        r = cli(*command)
        assert r.returncode == 2 and "sends prompts alone" in r.stderr, (command, r.stderr)
