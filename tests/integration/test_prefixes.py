"""Shared-prefix workloads: prompts of exact lengths in groups that share exactly their prefix, cold and warm
requests told apart, against a server whose prefix cache is known and a model in this process.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_prefixes.py."""

from __future__ import annotations

import pytest

from llmbench.results.storage import load_run
from tests.helpers import common_prefix
from tests.servers import BackgroundServer, caching_server


def test_prefix_groups_against_a_caching_server(cli, qwen_tokenizer, tiny_model_dir, tmp_path):
    app = caching_server(qwen_tokenizer, block=16, ms_per_uncached_token=0.2)
    out = tmp_path / "p.json"
    with BackgroundServer(app) as url:
        r = cli("run", "--endpoint", url, "--tokenizer", tiny_model_dir, "--prefix-groups", "3", "--prefix-tokens",
                "300", "--suffix-tokens", "40", "--num-prompts", "12", "--group-dist", "zipf", "--seed", "5",
                "--max-new-tokens", "3", "--ignore-eos", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    src = run.config.prompt_source
    reqs = sorted(run.requests, key=lambda q: q.prompt_index)
    # exact lengths as the server counts them: the template's own tokens + 300 + 40
    assert {q.prompt_tokens for q in reqs} == {src["template_tokens"] + 340}
    warm_up, *log = app.state.log  # the warm-up's prompt shares no group's prefix
    ids = [e["ids"] for e in log]
    groups = src["group_of"]
    head = min(common_prefix(warm_up["ids"], x) for x in ids)  # what every prompt shares: the template's head
    for i in range(len(ids)):
        for j in range(i + 1, len(ids)):
            common = common_prefix(ids[i], ids[j])
            if groups[i] == groups[j]:
                assert head + 300 <= common < head + 340, (i, j, common)
            else:
                assert common < head + 300, (i, j, common)
    # cold: the first of its group in the order sent; the stub's cache serves what the structure implies
    first = {g: groups.index(g) for g in set(groups)}
    assert [q.cold for q in reqs] == [first[g] == i for i, g in enumerate(groups)]
    assert [q.cached_tokens for q in reqs] == [e["cached"] for e in log]
    for q in reqs:
        assert q.cached_tokens >= (head + 300) // 16 * 16 if not q.cold else q.cached_tokens < head + 300
    implied = sum(e["cached"] for e in log) / sum(len(x) for x in ids)
    assert run.summary.cached_tokens_share == pytest.approx(implied, abs=1e-6)
    assert 0 < src["prefix_reuse_expected"] <= run.summary.cached_tokens_share
    assert run.summary.ttft_warm_ms.p50 < run.summary.ttft_cold_ms.p50  # 0.2 ms per uncached token, by the stub
    shown = cli("show", out).stdout
    assert "prefix groups (zipf, seed 5)" in shown and "the workload implies" in shown


def test_prefix_groups_in_process_have_exact_lengths(cli, tiny_model_dir, tmp_path):
    out = tmp_path / "p.json"
    r = cli("run", "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--prefix-groups", "2",
            "--prefix-tokens", "64", "--suffix-tokens", "9", "--num-prompts", "5", "--max-new-tokens", "2", "-o", out,
            "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert {q.prompt_tokens for q in run.requests} == {run.config.prompt_source["template_tokens"] + 73}
    assert [w.prompt_index for w in run.warmup_requests] == [-1]
    assert sum(q.cold for q in run.requests) == run.config.prompt_source["groups_used"]
