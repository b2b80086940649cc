"""Multi-turn sessions: each turn sends the conversation so far with the replies it got, turns in order, think
time between them, conversations side by side."""

from __future__ import annotations

import hashlib
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


def test_turns_refuse_what_they_cant_do(cli, prompt_file, tmp_path):
    for args, said in (
        (("--turns", "0"), "--turns must be at least 1"),
        (("--turns", "2", "--think-time", "-1"), "--think-time must be 0 or more"),
        (("--turns", "2", "--endpoint", "http://127.0.0.1:9/v1", "--rate", "1"), "closed loop"),
        (("--turns", "2", "--resume", tmp_path / "x.json"), "--resume"),
    ):
        r = cli("run", prompt_file, "--weights", "random", *args, "-q") if "--endpoint" not in args else \
            cli("run", prompt_file, *args, "-q")  # fmt: skip
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_turn_options_no_run_can_honour_are_one_line_before_anything_loads(cli, tiny_model_dir, prompt_file,
                                                                            tmp_path):  # fmt: skip
    out = tmp_path / "x.json"
    for args, said in (
        (("--turns", str(10**20)), "at most 1,000 turns"),  # was: a MemoryError expanding the prompts
        (("--turns", "2", "--think-time", "inf"), "--think-time must be 0 or more"),  # was: a wait forever
        (("--turns", "2", "--think-time", "nan"), "--think-time must be 0 or more"),
        (("--think-time", "3"), "give --turns 2 or more"),  # was: accepted, and no request ever waited
    ):
        r = cli("run", prompt_file, "-m", tiny_model_dir, "--device", "cpu", *args, "-o", out, "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not out.exists()


def test_a_turn_keeps_its_prompts_prefix_group_and_asks_for_the_runs_own_length():
    from llmbench.workloads import dataset, sessions
    from llmbench.workloads.prompts import PromptSet

    # two prompts of one prefix group: the second's prefix was sent by the first, so it is warm from turn 0
    base = PromptSet("groups", "abc", ("first", "second"), (1, 2), (5, 9), {"kind": "x"}, cold=(True, False))
    prompts = dataset.with_lengths(base, default=3)  # the run's --max-new-tokens: 3
    expanded = sessions.expand(prompts, 2)
    assert expanded.turns == ((0, 0), (0, 1), (1, 0), (1, 1))
    assert expanded.cold == (True, False, False, False)  # was (True, False, True, False): a warm prefix called cold
    # the data's lengths are its first turns'; a later turn asks for the run's own, not the dataset's largest
    assert expanded.output_tokens == (5, 3, 9, 3)


def test_the_datas_later_turns_are_part_of_the_prompt_sets_identity():
    from llmbench.workloads import sessions
    from llmbench.workloads.prompts import PromptSet

    def conversations(later: str) -> PromptSet:
        return PromptSet("sg.json", "same-first-turns", ("q",), (1,), followups=((later,),))

    a, b = sessions.expand(conversations("one follow-up"), 2), sessions.expand(conversations("another"), 2)
    assert a.prompts[1] != b.prompts[1] and a.sha256 != b.sha256  # other requests: they must not pair in compare
    # fixed follow-ups: the identity runs made before had, so they still pair with new ones
    plain = PromptSet("p.txt", "same-first-turns", ("q",), (1,))
    old = hashlib.sha256(json.dumps(["same-first-turns", 2]).encode("utf-8")).hexdigest()
    assert sessions.expand(plain, 2).sha256 == old
