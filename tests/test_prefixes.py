"""Shared-prefix workloads: prompts of exact lengths in groups that share exactly their prefix, cold and warm
requests told apart, against a server whose prefix cache is known and a model in this process."""

from __future__ import annotations

import pytest

from llmbench.core.errors import UserError
from llmbench.results.storage import load_run
from llmbench.workloads.prefixes import PrefixSpec
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


def test_bad_prefix_group_options_are_one_line(cli, prompt_file):
    for args, said in (
        (("--prefix-groups", "2", "--prefix-tokens", "10"), "needs --suffix-tokens, --num-prompts"),
        (
            ("--prefix-groups", "0", "--prefix-tokens", "10", "--suffix-tokens", "5", "--num-prompts", "3"),
            "--prefix-groups must be at least 1",
        ),
        (
            (
                "--prefix-groups",
                "2",
                "--prefix-tokens",
                "10",
                "--suffix-tokens",
                "5",
                "--num-prompts",
                "3",
                "--group-dist",
                "pareto",
            ),
            "--group-dist 'pareto'",
        ),
        (
            (
                prompt_file,
                "--prefix-groups",
                "2",
                "--prefix-tokens",
                "10",
                "--suffix-tokens",
                "5",
                "--num-prompts",
                "3",
            ),
            "drop PROMPTS",
        ),
        ((prompt_file, "--prefix-tokens", "10"), "--prefix-tokens goes with --prefix-groups"),
    ):
        r = cli("run", *args, "--weights", "random", "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_prefix_group_options_that_can_not_act_are_one_line(cli, tiny_model_dir, prompt_file, tmp_path):
    groups = ("--prefix-groups", "2", "--prefix-tokens", "10", "--suffix-tokens", "5", "--num-prompts", "3")
    out = tmp_path / "x.json"
    for args, said in (
        # each was accepted and silently ignored: the groups make the prompts, no dataset is read or filtered
        ((*groups, "--prompt-column", "q"), "--prompt-column: options of a dataset"),
        ((*groups, "--min-prompt-tokens", "3", "--max-prompt-tokens", "900"), "--min-prompt-tokens, --max-prompt"),
        ((prompt_file, "--group-dist", "zipf"), "--group-dist goes with --prefix-groups"),
        # each was an internal error (an overflow drawing the groups, float('1.2.3'))
        ((*groups[:-1], str(10**20)), "--num-prompts 100000000000000000000: more than llmbench"),
        (("--prefix-groups", str(10**20), *groups[2:]), "--prefix-groups 100000000000000000000: more than"),
        ((*groups, "--group-dist", "zipf:1.2.3"), "--group-dist 'zipf:1.2.3'"),
        ((*groups, "--group-dist", "zipf:" + "9" * 400), "--group-dist 'zipf:999"),  # an exponent of infinity
        # was: a prefix of 10**12 tokens, made for hours before the context check
        (("--prefix-groups", "2", "--prefix-tokens", str(10**12), *groups[4:]), "at most 10,000,000 tokens"),
    ):
        r = cli("run", *args, "-m", tiny_model_dir, "--device", "cpu", "-o", out, "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not out.exists()


def test_a_steep_zipf_puts_every_prompt_in_the_first_group():
    exponent = "1" + "0" * 300  # 1e300: the weights 1 / (k + 1) ** A overflowed before they underflow now
    assert PrefixSpec(3, 10, 5, 50, f"zipf:{exponent}").group_of() == [0] * 50


def test_group_draws_follow_the_seed_and_the_distribution():
    uniform = PrefixSpec(4, 10, 5, 4000, "uniform", seed=1).group_of()
    assert uniform == PrefixSpec(4, 10, 5, 4000, "uniform", seed=1).group_of()
    assert uniform != PrefixSpec(4, 10, 5, 4000, "uniform", seed=2).group_of()
    assert all(900 < uniform.count(g) < 1100 for g in range(4))
    zipf = PrefixSpec(4, 10, 5, 4000, "zipf:2", seed=1).group_of()
    # weights 1, 1/4, 1/9, 1/16: the first group gets ~70%
    assert zipf.count(0) > 2 * sum(zipf.count(g) for g in (1, 2, 3)) * 0.9
    with pytest.raises(UserError, match="zipf:A with A > 0"):
        PrefixSpec(2, 1, 1, 1, "zipf:0").validate()


def _llama_server_ready():
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        return None
    from tests.test_engines import SMOLLM2

    return SMOLLM2 if SMOLLM2 is not None and SMOLLM2.is_file() else None


@pytest.mark.slow
@pytest.mark.skipif(_llama_server_ready() is None, reason="llama-cpp-python's server and the SmolLM2 GGUF")
def test_a_real_third_party_server_gets_the_workload(cli, tmp_path):
    """llama-cpp-python's OpenAI server (its prompt cache on) serving the trained SmolLM2: the prompts reach it
    with exactly the lengths asked for, as its own tokenizer (the GGUF's) counts them, in their groups."""
    import subprocess
    import sys
    import time

    import httpx

    from tests.servers import free_port

    gguf = _llama_server_ready()
    port = free_port()
    server = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                               "--port", str(port), "--n_ctx", "1024", "--n_threads", "2", "--cache", "true"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert server.poll() is None and time.monotonic() < deadline, "llama-cpp-python's server did not start"
            time.sleep(0.5)
        out = tmp_path / "pg.json"
        r = cli("run", "--endpoint", url, "--tokenizer", gguf, "--prefix-groups", "2", "--prefix-tokens", "96",
                "--suffix-tokens", "12", "--num-prompts", "5", "--max-new-tokens", "3", "-o", out, "-q")  # fmt: skip
        assert r.returncode == 0, r.stderr
        run = load_run(out)
        src = run.config.prompt_source
        assert len(run.requests) == 5 and {q.prompt_tokens for q in run.requests} == {src["template_tokens"] + 108}
        groups = src["group_of"]
        assert [q.cold for q in sorted(run.requests, key=lambda q: q.prompt_index)] == [
            groups.index(g) == i for i, g in enumerate(groups)
        ]
        # what the server tokenizes of each prompt (its /extras/tokenize: the GGUF's own vocabulary) starts with
        # the group's prefix tokens, the same for every prompt of a group
        from llmbench.backends.http.client import TokenCounter
        from llmbench.workloads import prefixes

        counter = TokenCounter(str(gguf))
        remade = prefixes.make(prefixes.PrefixSpec(2, 96, 12, 5, "uniform", 0), counter.tok,
                               counter.counter_of(None), counter.text_tokens)  # fmt: skip
        assert remade.sha256 == run.config.prompt_sha256  # the run's prompts, made again
        served = [httpx.post(f"{url.removesuffix('/v1')}/extras/tokenize", json={"input": p}, timeout=30)
                  .json()["tokens"] for p in remade.prompts]  # fmt: skip
        for i in range(5):
            for j in range(i + 1, 5):
                same = served[i][:96] == served[j][:96]
                assert same == (groups[i] == groups[j]), (i, j)
    finally:
        server.terminate()
        server.wait(timeout=30)
