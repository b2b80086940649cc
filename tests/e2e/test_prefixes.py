"""Shared-prefix workloads: prompts of exact lengths in groups that share exactly their prefix, cold and warm
requests told apart, against a server whose prefix cache is known and a model in this process.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_prefixes.py."""

from __future__ import annotations

import pytest

from llmbench.results.storage import load_run
from tests.unit.test_prefixes import _llama_server_ready


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
