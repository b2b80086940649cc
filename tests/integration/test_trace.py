"""Trace replay: Mooncake, BurstGPT and Azure traces become a schedule and prompts of exactly their lengths that
share exactly the blocks their hash ids say, replayed against a server whose prefix cache is known.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_trace.py."""

from __future__ import annotations

import pytest

from llmbench.results.storage import load_run
from llmbench.workloads import trace
from tests.helpers import common_prefix
from tests.servers import BackgroundServer, caching_server
from tests.unit.test_trace import BLOCK, _mooncake, _sent_in_order, _shared


def test_a_mooncake_trace_replays_exactly(cli, qwen_tokenizer, tiny_model_dir, tmp_path):
    """Exact lengths, exactly the shared blocks, the scaled times, the reuse the trace implies."""
    path = tmp_path / "mooncake.jsonl"
    rows = _mooncake(path)
    app = caching_server(qwen_tokenizer, block=16, ms_per_uncached_token=1.0)  # cold: +100s of ms, past load noise
    out = tmp_path / "t.json"
    with BackgroundServer(app) as url:
        r = cli("run", "--endpoint", url, "--trace", path, "--trace-format", "mooncake", "--time-scale", "0.5",
                "--tokenizer", tiny_model_dir, "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    reqs = sorted(run.requests, key=lambda q: q.prompt_index)
    assert len(reqs) == len(rows) and len(app.state.log) == len(rows) + 1  # and the warm-up
    # every prompt has exactly its input_length, as the server counts it (template included)
    assert [q.prompt_tokens for q in reqs] == [row["input_length"] for row in rows]
    assert [q.output_tokens for q in reqs] == [row["output_length"] for row in rows]
    # rows sharing k leading ids share exactly k blocks of leading tokens (after the template's own)
    ids = [e["ids"] for e in _sent_in_order(app, rows)]  # the server's own tokens of what it received
    template = common_prefix(ids[0], ids[1])  # rows 0 and 1 share no block: what they share is the template's
    warm_up = app.state.log[0]["ids"]  # a prompt of blocks of its own: it fills no row's prefix in the cache
    assert all(common_prefix(warm_up, x) < template + 16 for x in ids)
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            k = _shared(rows[i], rows[j])
            common = common_prefix(ids[i], ids[j])
            assert template + k * BLOCK <= common < template + (k + 1) * BLOCK, (i, j, k, common)
            if k < min(len(rows[i]["hash_ids"]), len(rows[j]["hash_ids"])) - 1:  # the next blocks: both full
                a, b = (x[template + k * BLOCK : template + (k + 1) * BLOCK] for x in (ids[i], ids[j]))
                assert a != b
    # the schedule: the trace's times, scaled, and the server saw them in that order
    t0 = rows[0]["timestamp"]
    assert [q.scheduled_s for q in reqs] == pytest.approx([(row["timestamp"] - t0) / 1000 * 0.5 for row in rows])
    arrived = [e["arrived"] for e in _sent_in_order(app, rows)]
    for q, a in zip(reqs, arrived, strict=True):
        # the send times follow the schedule within the lateness the run reports; loopback and the stub's own event
        # loop add a little on a busy machine
        assert abs((a - arrived[0]) - q.scheduled_s) * 1000 <= q.send_lateness_ms + reqs[0].send_lateness_ms + 500
    a = run.config.endpoint.arrival
    assert a.process == "trace" and a.trace["format"] == "mooncake" and a.trace["time_scale"] == 0.5
    assert a.trace["time_unit"] == "ms" and a.requests == len(rows)
    # reuse: the trace's expectation, and the server's account (its cache also holds the template's blocks)
    expected = a.trace["prefix_reuse_expected"]
    assert expected == pytest.approx(trace.prefix_reuse_expected(trace.read(
        trace.TraceSpec(str(path), "mooncake")).rows))  # fmt: skip
    assert 0 < expected <= run.summary.cached_tokens_share
    assert [q.cached_tokens for q in reqs] == [e["cached"] for e in _sent_in_order(app, rows)]
    # cold rows send their family's first block first: the stub spends 0.1 ms per uncached token, so the warm
    # ones (their family's blocks cached) answer sooner
    assert [q.cold for q in reqs] == [i < 4 for i in range(len(rows))]
    assert run.summary.ttft_warm_ms.p50 < run.summary.ttft_cold_ms.p50
    shown = cli("show", out)
    assert "workload: " in shown.stdout and "trace:mooncake" in shown.stdout
    assert f"the trace implies {expected:.1%}" in shown.stdout and "TTFT cold p50" in shown.stdout


def test_a_row_shorter_than_the_template_is_sent_at_the_template_plus_one(cli, qwen_tokenizer, tiny_model_dir,
                                                                          tmp_path):  # fmt: skip
    path = tmp_path / "burst.csv"
    path.write_text("Timestamp,Request tokens,Response tokens\n0,3,2\n0.05,700,2\n", encoding="utf-8")
    app = caching_server(qwen_tokenizer)
    out = tmp_path / "b.json"
    with BackgroundServer(app) as url:
        r = cli("run", "--endpoint", url, "--trace", path, "--trace-format", "burstgpt", "--tokenizer",
                tiny_model_dir, "-o", out)  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    src = run.config.prompt_source
    reqs = sorted(run.requests, key=lambda q: q.prompt_index)
    assert [q.prompt_tokens for q in reqs] == [src["template_tokens"] + 1, 700]
    assert src["lengthened_rows"] == [f"{path}:2"] and "1 rows shorter than the chat template" in r.stdout
    assert all(q.cold is None for q in reqs)  # no hash ids: no structure to call a request cold
