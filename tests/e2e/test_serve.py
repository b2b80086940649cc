"""llmbench serve and run --endpoint: real uvicorn servers on loopback, real HTTP, real SSE, real Chromium.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/integration/test_serve.py."""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys
import time

import httpx
import pytest

from llmbench.results.storage import load_run
from tests.delayed_model import delayed_loaded
from tests.helpers import cli_process, wait_for_requests
from tests.integration.test_serve import (
    CHROMIUM,
    DECODE_MS,
    PREFILL_MS,
    _sse_lines,
    delayed_server,  # noqa: F401 (fixtures)
)
from tests.servers import free_port, serve_process


@pytest.mark.slow
def test_endpoint_run_measures_what_the_client_sees(cli, delayed_server, qwen_tokenizer, prompt_file, tmp_path):
    url, model = delayed_server
    out = tmp_path / "ep.json"
    r = cli("run", prompt_file, "--endpoint", f"{url}/v1", "--max-new-tokens", "10", "--ignore-eos", "--repeats", "2",
            "-o", out, "-q")  # fmt: skip
    # ground truth: when the model really began each decode step (its own record), one step to the next
    steps = list(zip(model.kinds, model.starts_ns, strict=True))
    periods = [(b - a) / 1e6 for (ka, a), (kb, b) in itertools.pairwise(steps) if ka == kb == "decode"]
    true_tpot = statistics.mean(periods)
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.config.mode == "endpoint" and run.complete and len(run.requests) == 6
    assert run.config.model == "delayed" and run.config.weights == "random"  # from /v1/models and /health
    assert run.config.endpoint.request_extra == {"max_tokens": 10, "temperature": 0.0, "ignore_eos": True}
    assert run.metrics["ttft_ms"].startswith("arrival of the first SSE event that carries content")
    for q in run.requests:
        assert q.tokens_from == "usage" and q.output_tokens == 10 and q.chunks == 10
        assert q.token_times_ms[0] == q.ttft_ms and q.token_times_ms == sorted(q.token_times_ms)
        # ground truth: the first token needs one prefill; the server's own stamp comes before the client's
        assert q.ttft_ms >= PREFILL_MS and q.ttft_ms >= q.server_ttft_ms
        # 12%: a busy machine's delivery jitter (28.1 ms against 25.3 was seen under load), far inside a real error
        assert q.tpot_ms >= DECODE_MS and q.tpot_ms == pytest.approx(true_tpot, rel=0.12)
        assert q.stream_end_ms >= q.e2e_ms
    assert run.summary.stream_buffered is False and run.summary.stream_gaps_under_1ms_share < 0.2
    assert run.client.cpu_s > 0 and run.client.cpu_ms_per_event is not None
    assert "buffered" not in r.stderr
    # the same prompts in-process: the endpoint's TTFT holds the in-process one plus HTTP and SSE
    import llmbench

    lm = delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS)
    local = llmbench.measure(prompt_file, model=lm, max_new_tokens=10, ignore_eos=True, warmup=1, repeats=2,
                             output=tmp_path / "local.json")  # fmt: skip
    assert run.summary.ttft_ms.mean >= local.summary.ttft_ms.mean
    c = cli("compare", tmp_path / "local.json", out)  # no gate: compare reports and exits 0
    assert c.returncode == 0 and "setup differs: mode: in-process -> endpoint" in c.stdout
    assert "in-process vs endpoint run: outputs not compared" in c.stdout


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_page_shows_tokens_one_after_another_and_stop_stops(delayed_server, tmp_path):
    from playwright.sync_api import sync_playwright

    url, _ = delayed_server
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto(url)
        page.fill("#max", "12")
        page.click("#send")
        page.wait_for_function("window.llmbench.done", timeout=20_000)
        stamps = page.evaluate("window.llmbench.stamps")
        assert len(stamps) == 12 and page.text_content("#state") == "done"
        # streamed: the 12 tokens arrived over ~11 decode steps, not in one burst
        assert stamps[-1] - stamps[0] >= 0.6 * 11 * DECODE_MS
        gaps = [b - a for a, b in itertools.pairwise(stamps)]
        assert sum(g > DECODE_MS / 2 for g in gaps) >= 8
        assert float(page.text_content("#ttft")) >= PREFILL_MS
        assert float(page.text_content("#tpot")) == pytest.approx(DECODE_MS, abs=8)
        assert page.text_content("#tokens") == "12" and page.text_content("#out")
        page.screenshot(path=str(tmp_path / "page.png"))
        os.makedirs("test-artifacts", exist_ok=True)
        page.screenshot(path="test-artifacts/serve-page.png")
        # Stop: the browser aborts the fetch, the server stops generating
        page.fill("#max", "400")
        page.click("#send")
        page.wait_for_function("window.llmbench.stamps.length >= 3", timeout=20_000)
        page.click("#stop")
        page.wait_for_function("window.llmbench.done", timeout=5_000)
        assert page.text_content("#state") == "stopped"
        deadline = time.monotonic() + 5
        while httpx.get(f"{url}/health").json()["generating"]:
            assert time.monotonic() < deadline, "generation went on after Stop"
            time.sleep(0.02)
        assert httpx.get(f"{url}/health").json()["last"]["cancelled"] is True
        assert not errors
        browser.close()


@pytest.mark.subprocess
def test_serve_command_end_to_end(tiny_model_dir, tmp_path):
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    args = [
        sys.executable,
        "-m",
        "llmbench",
        "serve",
        "-m",
        str(tiny_model_dir),
        "--device",
        "cpu",
        "--port",
        str(port),
    ]
    proc = serve_process(args, port)
    try:
        _, lines = _sse_lines(f"http://127.0.0.1:{port}", max_tokens=4)
        assert lines[-1] == "data: [DONE]" and sum(line.startswith("data: {") for line in lines) >= 3
        # a second server on the same port: one line, exit 2
        again = subprocess.run([*args[:-1], str(port)], capture_output=True, text=True, env=env, timeout=60)
        assert again.returncode == 2 and "cannot listen on" in again.stderr
        assert len(again.stderr.strip().splitlines()) == 1
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.subprocess
def test_an_interrupted_endpoint_run_keeps_what_it_finished(cli, delayed_server, many_prompts, tmp_path):
    import signal

    url, _ = delayed_server
    out = tmp_path / "int.json"
    args = ("run", many_prompts, "--endpoint", url, "--max-new-tokens", "5", "--ignore-eos", "-q")
    proc = cli_process(*args, "-o", out)
    wait_for_requests(out, 3, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "interrupted by SIGINT" in err and "Traceback" not in err, err
    assert f"--resume {out}" in err
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["complete"] is False and 3 <= len(data["requests"]) < 60
    assert data["sessions"][0]["interrupted_by"] == "SIGINT"
    first = len(data["requests"])
    # endpoint runs resume like in-process ones: only the missing requests are sent
    deadline = time.monotonic() + 10
    while (h := httpx.get(f"{url}/health").json())["generating"] or h["queued"]:  # the dropped request's end
        assert time.monotonic() < deadline
        time.sleep(0.02)
    served = h["served"]
    r = cli(*args, "--resume", out, "--warmup", "0")
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.complete and sorted((q.prompt_index, q.repeat) for q in run.requests) == [(i, 0) for i in range(60)]
    assert httpx.get(f"{url}/health").json()["served"] - served == 60 - first
    assert [s.interrupted_by for s in run.sessions] == ["SIGINT", None]
    r = cli(*(a if a != "5" else "6" for a in args), "--resume", out)
    assert r.returncode == 2 and "already complete" in r.stderr
