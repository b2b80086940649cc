"""The prompt-source ladder, written once (llmbench.drivers.workload): what the user asked for -> the source it names
-> what is known before anything loads -> the prompts the run loop sends, counted as the run counts them; and the
exact-length texts every made workload is cut with (llmbench.workloads.text), the same bytes as before they were
one module (runs recorded then pair with runs made now).

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_workload.py."""

from __future__ import annotations

import asyncio

import pytest

from llmbench.core.errors import UserError
from llmbench.drivers import workload
from llmbench.drivers.run import make_backend
from llmbench.drivers.workload import Workload
from llmbench.options import EndpointOptions, OpenLoop, RunOptions
from llmbench.workloads import sessions, synthetic, trace
from llmbench.workloads.synthetic import SyntheticSpec
from tests.unit.test_workload import (
    WORDS,
    _mooncake,
    _prepare,
    _sharegpt,
    tiny,  # noqa: F401 (fixtures)
)


def test_a_run_records_how_its_prompts_were_made(tiny):
    """The driver's run: synthetic prompts in conversations of 2 turns, each turn a prompt of its own."""
    from llmbench.drivers.run import run as run_driver

    options = RunOptions(max_new_tokens=2, ignore_eos=True, warmup=0, turns=2)
    run, _path = asyncio.run(run_driver(SyntheticSpec(40, 2, 1), tiny, options))
    assert run.config.synthetic == synthetic.synthetic_record(SyntheticSpec(40, 2, 1))
    assert run.config.sessions == {"turns": 2, "conversations": 2, "think_time_s": 0.0, "later_turns":
                                   "fixed follow-ups", "follow_ups": list(sessions.FOLLOW_UPS)}  # fmt: skip
    first = sorted((q for q in run.requests if q.turn == 0), key=lambda q: q.prompt_index)
    assert len(run.requests) == 4 and [q.prompt_tokens for q in first] == [40, 40]


def test_load_and_ab_count_a_dataset_with_the_servers_tokenizer(tiny_model_dir, tmp_path):
    data = tmp_path / "share.json"
    _sharegpt(data)
    options = RunOptions(max_new_tokens=9)
    got = workload.prompt_list(Workload(prompts=data), options, str(tiny_model_dir))
    assert got.prompts == ("hi", WORDS * 3, WORDS * 12) and got.output_tokens is not None
    assert got.output_tokens[1] == 1 and got.output_tokens[2] == 9  # "short"; no reply: the run's own
    # without a tokenizer, the replies give no lengths, and the filters can't count
    plain = workload.prompt_list(Workload(prompts=data), RunOptions(max_new_tokens=9), None)
    assert plain.output_tokens is None
    with pytest.raises(UserError, match="^--min-prompt-tokens/--max-prompt-tokens count with the run's tokenizer: "
                                        "give --tokenizer$"):  # fmt: skip
        workload.prompt_list(Workload(prompts=data, max_prompt_tokens=60), RunOptions(), None)
    assert workload.prompt_list(Workload(prompts=data, synthetic="8x2"), RunOptions(), None).prompts == got.prompts


def test_a_trace_is_made_with_the_servers_tokenizer(tiny_model_dir, tmp_path):
    path = tmp_path / "t.jsonl"
    _mooncake(path)
    rows = trace.read(trace.TraceSpec(str(path), "mooncake"))
    options = RunOptions(max_new_tokens=50)
    server = make_backend(EndpointOptions(endpoint="http://127.0.0.1:9/v1", tokenizer=str(tiny_model_dir),
                                          open_loop=OpenLoop(replay=rows)), options)  # fmt: skip
    made = _prepare(rows, server, options)
    count, _tok = asyncio.run(server.counting())
    assert [count(p) for p in made.prompts.prompts] == [r.input_tokens for r in rows.rows]
    assert made.prompts.output_tokens == (3,) * 5 and options.max_new_tokens == 3  # the rows' own lengths
