"""Trace replay: Mooncake, BurstGPT and Azure traces become a schedule and prompts of exactly their lengths that
share exactly the blocks their hash ids say, replayed against a server whose prefix cache is known."""

from __future__ import annotations

import json

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads import trace

BLOCK = trace.BLOCK_TOKENS


def _mooncake(path, n: int = 24) -> list[dict]:
    """Rows in 4 families: a family's rows share its leading ids (1 to 3 blocks), then ids of their own."""
    rows, fresh = [], 1000
    for i in range(n):
        family = i % 4
        shared = [family * 10 + j for j in range(1 + family % 3)]
        own = list(range(fresh, fresh + 1 + i % 2))
        fresh += 2
        ids = shared + own
        length = BLOCK * (len(ids) - 1) + 100 + 37 * i  # the last block partial
        rows.append({"timestamp": 40 * i + (i % 3) * 7, "input_length": length, "output_length": 2 + i % 5,
                     "hash_ids": ids})  # fmt: skip
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return rows


def _sent_in_order(app, rows) -> list[dict]:
    """The measured requests as the server received them (the warm-up, first, left out)."""
    assert len(app.state.log) == len(rows) + 1
    return sorted(app.state.log, key=lambda e: e["arrived"])[1:]


def _shared(a: dict, b: dict) -> int:
    k = 0
    full = min(a["input_length"], b["input_length"]) // BLOCK
    while k < min(len(a["hash_ids"]), len(b["hash_ids"]), full) and a["hash_ids"][k] == b["hash_ids"][k]:
        k += 1
    return k


def test_burstgpt_and_azure_times_are_read_in_their_own_units(tmp_path):
    burst = tmp_path / "b.csv"
    burst.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                     "5.0,ChatGPT,120,30,150,Conversation log\n3.5,ChatGPT,80,0,80,Conversation log\n"
                     "9.25,GPT-4,200,12,212,API log\n", encoding="utf-8")  # fmt: skip
    t = trace.read(trace.TraceSpec(str(burst), "burstgpt", time_scale=2.0))
    assert [r.input_tokens for r in t.rows] == [80, 120, 200]  # sorted by time
    assert [r.output_tokens for r in t.rows] == [1, 30, 12]  # a failed request (0) is still sent, for one token
    assert t.offsets == [0.0, 3.0, 11.5] and t.record()["time_unit"] == "s"
    azure = tmp_path / "a.csv"
    azure.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
                     "2023-11-16 18:15:50.9951690,396,109\n2023-11-16 18:16:06.1000000,879,20\n",
                     encoding="utf-8")  # fmt: skip
    t = trace.read(trace.TraceSpec(str(azure), "azure", start_s=1.0))
    assert [r.input_tokens for r in t.rows] == [396, 879] and t.total_rows == 3
    assert t.offsets == pytest.approx([0.0, 15.104831])


@pytest.mark.parametrize(
    ("content", "fmt", "said"),
    [
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": 5, "input_length": -3, '
            '"output_length": 2}\n',
            "mooncake",
            "t.txt:2: 'input_length' must be a whole number",
        ),
        ('{"timestamp": 0, "input_length": 10}\n', "mooncake", "no 'output_length'"),
        ("not json\n", "mooncake", "t.txt:1: not valid JSON"),
        ("Timestamp,Request tokens\n1,2\n", "burstgpt", "no column 'Response tokens'"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\nyesterday,3,4\n", "azure", "t.txt:2: 'TIMESTAMP'"),
        # a bad number: each was an internal error (int() of NaN or infinity) or a row never sent (an infinite time)
        ('{"timestamp": 0, "input_length": NaN, "output_length": 2}\n', "mooncake", "'input_length' must be a whole"),
        ('{"timestamp": 0, "input_length": 1e400, "output_length": 2}\n', "mooncake", "'input_length' must be a"),
        (
            '{"timestamp": 0, "input_length": 10, "output_length": 2}\n{"timestamp": Infinity, "input_length": 10, '
            '"output_length": 2}\n',
            "mooncake",
            "t.txt:2: 'timestamp' must be a time",
        ),
        (
            '{"timestamp": 0, "input_length": 1000000000000000, "output_length": 2}\n',
            "mooncake",
            "more tokens than any model reads",
        ),  # was: a prompt of 10**15 tokens, made for hours
        ('{"timestamp": 0, "input_length": ' + "9" * 5000 + ', "output_length": 2}\n', "mooncake", "not valid JSON"),
        ("Timestamp,Request tokens,Response tokens\n0,inf,3\n", "burstgpt", "t.txt:2: 'Request tokens' must be"),
        ("Timestamp,Request tokens,Response tokens\n0,10,nan\n", "burstgpt", "t.txt:2: 'Response tokens' must be"),
        ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,-4\n", "azure", "'GeneratedTokens'"),
    ],
)
def test_a_malformed_trace_row_is_one_line(cli, tmp_path, content, fmt, said):
    path = tmp_path / "t.txt"
    path.write_text(content, encoding="utf-8")
    r = cli("run", "--endpoint", "http://127.0.0.1:9/v1", "--trace", path, "--trace-format", fmt, "-q")
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_trace_options_are_checked_before_anything_runs(cli, tmp_path, prompt_file):
    path = tmp_path / "m.jsonl"
    _mooncake(path, 4)
    for args, said in (
        (("--trace", path, "--trace-format", "mooncake"), "give --endpoint"),
        (("--endpoint", "http://127.0.0.1:9/v1", "--trace", path), "--trace-format"),
        (("--endpoint", "http://127.0.0.1:9/v1", "--trace", path, "--trace-format", "x"), "--trace-format 'x'"),
        (("--endpoint", "http://127.0.0.1:9/v1", "--time-scale", "2", prompt_file), "--time-scale goes with --trace"),
        (
            ("--endpoint", "http://127.0.0.1:9/v1", "--trace", path, "--trace-format", "mooncake", "--rate", "2"),
            "drop PROMPTS",
        ),
        (
            ("--endpoint", "http://127.0.0.1:9/v1", "--trace", path, "--trace-format", "mooncake", "--start", "9"),
            "no row within",
        ),
    ):
        r = cli("run", *args, "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    replay = ("--endpoint", "http://127.0.0.1:9/v1", "--tokenizer", "unused", "--trace", path, "--trace-format",
              "mooncake")  # fmt: skip
    for args, said in (
        # each was accepted: inf scaled the first row's 0 s to NaN; a negative or NaN second named no window
        (("--time-scale", "inf"), "--time-scale must be"),
        (("--time-scale", "nan"), "--time-scale must be"),
        (("--start", "nan"), "--start must be"),
        (("--start", "-5"), "--start must be"),
        (("--end", "inf"), "--end must be"),
        # each was accepted and silently ignored: the trace's rows are the prompts, each sent once
        (("--repeats", "3"), "--repeats: not with --trace"),
        (("--num-prompts", "2"), "--num-prompts: not with --trace"),
        (("--max-prompt-tokens", "600", "--prompt-column", "q"), "--prompt-column, --max-prompt-tokens: not with"),
        (("--prefix-groups", "2"), "--prefix-groups: not with --trace"),
        (("--group-dist", "zipf"), "--group-dist: not with --trace"),
    ):
        r = cli("run", *replay, *args, "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_prefix_reuse_expected_counts_blocks_seen_before_in_chain_order():
    rows = [trace.Row(0, 3 * BLOCK, 1, (1, 2, 3), "a"), trace.Row(1, 3 * BLOCK, 1, (1, 2, 9), "b"),
            trace.Row(2, 2 * BLOCK, 1, (7, 2), "c")]  # fmt: skip
    # b reuses blocks 1 and 2; c's first block is new, so its second (id 2, seen) is not reusable: a chain
    assert trace.prefix_reuse_expected(rows) == pytest.approx(2 * BLOCK / (8 * BLOCK))
    with pytest.raises(UserError, match="--time-scale"):
        trace.TraceSpec("x", "mooncake", time_scale=0).validate()
    assert trace.cold_rows(rows) == (True, False, True)


def test_a_replay_no_clock_can_keep_is_refused(tmp_path):
    path = tmp_path / "far.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
                    '{"timestamp": 1e300, "input_length": 10, "output_length": 2}\n', encoding="utf-8")  # fmt: skip
    for scale in (1.0, 1e20):  # the last row 1e297 s later (never sent: the run would wait for it), or infinity
        with pytest.raises(UserError, match="no schedule a replay can keep"):
            trace.read(trace.TraceSpec(str(path), "mooncake", time_scale=scale))
    assert trace.read(trace.TraceSpec(str(path), "mooncake", end_s=1.0)).offsets == [0.0]  # a window of it: fine
