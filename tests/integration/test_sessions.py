"""Multi-turn sessions: each turn sends the conversation so far with the replies it got, turns in order, think
time between them, conversations side by side.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_sessions.py."""

from __future__ import annotations

import itertools
import json

from llmbench.results.storage import load_run
from llmbench.workloads.sessions import FOLLOW_UPS
from tests.servers import BackgroundServer, caching_server


def test_each_turn_sends_the_conversation_so_far(cli, qwen_tokenizer, tiny_model_dir, prompt_file, tmp_path):
    app = caching_server(qwen_tokenizer, block=16, ms_per_uncached_token=0.05, decode_ms=1.0)
    out = tmp_path / "s.json"
    with BackgroundServer(app) as url:
        r = cli("run", prompt_file, "--endpoint", url, "--tokenizer", tiny_model_dir, "--turns", "3",
                "--think-time", "0.05", "--concurrency", "2", "--max-new-tokens", "4", "--ignore-eos", "--warmup", "0",
                "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.config.sessions["turns"] == 3 and run.config.sessions["conversations"] == 3
    assert len(run.requests) == 9 and run.complete
    log = app.state.log
    by_first = {}
    for e in log:
        by_first.setdefault(json.dumps(e["messages"][0]), []).append(e)  # the conversation's opening
    conversations = [sorted(v, key=lambda e: len(e["messages"])) for v in by_first.values()]
    assert sorted(len(c) for c in conversations) == [3, 3, 3]
    for turns in conversations:
        for a, b in itertools.pairwise(turns):
            # a strict prefix: every message of a turn, then the model's reply, then the next user message
            n = len(a["messages"])
            assert b["messages"][:n] == a["messages"] and len(b["messages"]) == n + 2
            assert b["messages"][len(a["messages"])] == {"role": "assistant", "content": "tok " * 4}
            assert b["arrived"] - a["arrived"] >= 0.05  # the think time, after the reply
        assert [m["content"] for m in turns[-1]["messages"] if m["role"] == "user"][1:] == list(FOLLOW_UPS[:2])
    reqs = sorted(run.requests, key=lambda q: q.prompt_index)
    assert [(q.conversation, q.turn) for q in reqs] == [(c, k) for c in range(3) for k in range(3)]
    assert [q.cold for q in reqs] == [k == 0 for _ in range(3) for k in range(3)]
    for c in range(3):  # each turn's prompt holds the ones before it
        tokens = [q.prompt_tokens for q in reqs if q.conversation == c]
        assert tokens == sorted(tokens) and len(set(tokens)) == 3
    # later turns find their conversation in the server's cache
    assert all(q.cached_tokens > 0 for q in reqs if q.turn) and run.summary.cached_tokens_share > 0


def test_sharegpt_later_turns_are_the_datas_own(cli, tiny_model_dir, tmp_path):
    data = tmp_path / "sg.json"
    data.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": "first question"}, {"from": "gpt", "value": "answer"},
                           {"from": "human", "value": "second question"}, {"from": "gpt", "value": "more"}]},
        {"conversations": [{"from": "human", "value": "only one turn"}]},
    ]), encoding="utf-8")  # fmt: skip
    out = tmp_path / "s.json"
    r = cli("run", data, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--turns", "2",
            "--max-new-tokens", "3", "--ignore-eos", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    reqs = sorted(run.requests, key=lambda q: q.prompt_index)
    assert [(q.conversation, q.turn) for q in reqs] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    # in process: the second turn's prompt is the first turn, its reply and the new question, templated
    assert reqs[1].prompt_tokens > reqs[0].prompt_tokens + 3 and reqs[3].prompt_tokens > reqs[2].prompt_tokens + 3
    assert run.config.sessions["later_turns"].startswith("the data's")
