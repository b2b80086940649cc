"""Multi-turn sessions: each turn sends the conversation so far with the replies it got, turns in order, think
time between them, conversations side by side."""

from __future__ import annotations

import hashlib
import json


def test_turns_refuse_what_they_cant_do(cli, prompt_file, tmp_path):
    for args, said in (
        (("--turns", "0"), "--turns must be 1 to 1,000"),
        (("--turns", "2", "--think-time", "-1"), "--think-time must be 0 to 86,400"),
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
        (("--turns", str(10**20)), "--turns must be 1 to 1,000"),  # was: a MemoryError expanding the prompts
        (("--turns", "2", "--think-time", "inf"), "--think-time must be 0 to 86,400"),  # was: a wait forever
        (("--turns", "2", "--think-time", "nan"), "--think-time must be 0 to 86,400"),
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
