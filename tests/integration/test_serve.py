"""llmbench serve and run --endpoint: real uvicorn servers on loopback, real HTTP, real SSE, real Chromium."""

from __future__ import annotations

import json
import shutil
import threading
import time

import httpx
import pytest

from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions as ModelSpec
from llmbench.results.storage import load_run
from llmbench.serve import create_app
from tests.delayed_model import delayed_loaded
from tests.servers import BackgroundServer, buffering_relay, faulty_server

PREFILL_MS, DECODE_MS = 60.0, 20.0


@pytest.fixture(scope="module")
def tiny_server(tiny_model_dir):
    lm = load_model(ModelSpec(model=str(tiny_model_dir), device="cpu", dtype="float32", threads=1))
    with BackgroundServer(create_app(lm, max_queue=2, max_tokens=8)) as url:
        yield url


@pytest.fixture
def delayed_server(qwen_tokenizer):
    """A served model whose every forward pass takes a known time; yields (url, model)."""
    lm = delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=0)) as url:
        yield url, lm.model


def _sse_lines(url: str, **body) -> tuple[httpx.Headers, list[str]]:
    payload = {"messages": [{"role": "user", "content": "你好"}], "stream": True, **body}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=payload, timeout=30) as r:
        assert r.status_code == 200
        return r.headers, [line for line in r.iter_lines() if line]


def test_stream_is_openai_compatible_sse(tiny_server):
    headers, lines = _sse_lines(tiny_server, max_tokens=6, ignore_eos=True)
    assert headers["content-type"].startswith("text/event-stream") and headers["x-accel-buffering"] == "no"
    assert all(line.startswith("data: ") for line in lines) and lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"  # role first, no content
    content = [c for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    assert len(content) >= 2 and all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 6 and usage["prompt_tokens"] > 1
    assert len(chunks[-1]["llmbench"]["token_times_ms"]) == 6  # the server's own stamps, one per token


def test_non_streamed_models_health_and_bad_requests(tiny_server):
    r = httpx.post(f"{tiny_server}/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}]})
    body = r.json()
    assert r.status_code == 200 and body["object"] == "chat.completion"
    assert body["usage"]["completion_tokens"] >= 1 and isinstance(body["choices"][0]["message"]["content"], str)
    assert httpx.get(f"{tiny_server}/v1/models").json()["data"][0]["object"] == "model"
    health = httpx.get(f"{tiny_server}/health").json()
    assert health["status"] == "ok" and health["generating"] is False and health["served"] >= 1
    for bad in ({}, {"messages": []}, {"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}):
        r = httpx.post(f"{tiny_server}/v1/chat/completions", json=bad)
        assert r.status_code == 400 and r.json()["error"]["message"]
    r = httpx.post(f"{tiny_server}/v1/chat/completions", json={"messages": [{"role": "user", "content": "a b " * 600}],
                   "max_tokens": 8})  # fmt: skip
    assert r.status_code == 400 and "context" in r.json()["error"]["message"]
    page = httpx.get(tiny_server)
    assert page.status_code == 200 and "getReader" in page.text and "text/html" in page.headers["content-type"]


@pytest.mark.slow
@pytest.mark.parametrize("media_type", ["keep", "application/octet-stream"])
def test_buffering_relay_is_detected(cli, delayed_server, prompt_file, tmp_path, media_type):
    url, _ = delayed_server
    with BackgroundServer(buffering_relay(url, media_type)) as relay:
        out = tmp_path / "relayed.json"
        r = cli("run", prompt_file, "--endpoint", relay, "--max-new-tokens", "8", "--ignore-eos", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert run.summary.stream_buffered is True and run.summary.stream_largest_burst == 8
    assert run.summary.stream_gaps_under_1ms_share > 0.9
    assert "the stream is buffered between server and client" in r.stderr
    assert ("not text/event-stream" in r.stderr) == (media_type != "keep")
    # behind the relay TTFT is the whole answer's time: the first token waited for the last
    assert all(q.ttft_ms >= PREFILL_MS + 7 * DECODE_MS for q in run.requests)


def test_a_second_request_waits_or_gets_429(delayed_server):
    url, _ = delayed_server  # max_queue=0: one generates, nobody waits
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 40, "ignore_eos": True}
    first: dict = {}

    def stream() -> None:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
            first["lines"] = [line for line in r.iter_lines() if line]

    t = threading.Thread(target=stream)
    t.start()
    deadline = time.monotonic() + 10
    while not httpx.get(f"{url}/health").json()["generating"]:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    # the event loop is free while a generation runs: /health answers between tokens
    waits = []
    for _ in range(5):
        t0 = time.perf_counter()
        httpx.get(f"{url}/health")
        waits.append(time.perf_counter() - t0)
    assert max(waits) < 0.5
    busy = httpx.post(f"{url}/v1/chat/completions", json=body)
    assert busy.status_code == 429 and busy.headers["retry-after"] and "busy" in busy.json()["error"]["message"]
    t.join(30)
    assert first["lines"][-1] == "data: [DONE]"
    again = httpx.post(f"{url}/v1/chat/completions", json={**body, "stream": False, "max_tokens": 2})
    assert again.status_code == 200
    assert httpx.get(f"{url}/health").json()["rejected"] == 1


def test_a_client_that_disconnects_stops_its_generation(delayed_server):
    url, model = delayed_server
    body = {"messages": [{"role": "user", "content": "hi"}], "stream": True, "max_tokens": 400, "ignore_eos": True}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as r:
        seen = 0
        for line in r.iter_lines():
            seen += '"content":"' in line and '"content":""' not in line
            if seen == 3:
                break
    # the client hung up after 3 tokens; 400 tokens would take 8 s
    deadline = time.monotonic() + 5
    while httpx.get(f"{url}/health").json()["generating"]:
        assert time.monotonic() < deadline, "generation went on after the client left"
        time.sleep(0.02)
    passes = len(model.starts_ns)
    time.sleep(0.3)
    assert len(model.starts_ns) == passes < 40  # no forward pass after the stop
    health = httpx.get(f"{url}/health").json()
    assert health["cancelled"] == 1 and health["last"]["cancelled"] is True


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_endpoint_errors_are_one_line_or_recorded(cli, prompt_file, tmp_path, monkeypatch):
    app = faulty_server()
    with BackgroundServer(app) as url:
        for mode, message in (("500", "HTTP 500: model crashed"), ("json", "not an event stream"),
                              ("malformed", "malformed event")):  # fmt: skip
            app.state.mode = mode
            r = cli("run", prompt_file, "--endpoint", url, "--warmup", "0", "-o", tmp_path / f"{mode}.json", "-q")
            assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert "Traceback" not in r.stderr and not (tmp_path / f"{mode}.json").exists()
        # after a success, a failing request is recorded and the rest go on
        app.state.mode, app.state.calls = "fail-second", 0
        monkeypatch.setenv("LLMBENCH_TEST_KEY", "sk-secret-123")
        out = tmp_path / "partial.json"
        r = cli("run", prompt_file, "--endpoint", url, "--api-key-env", "LLMBENCH_TEST_KEY", "-o", out, "-q")
        assert r.returncode == 0, r.stderr
        run = load_run(out)
        assert len(run.requests) == 2 and len(run.failed_requests) == 1 and run.failed_requests[0].status == 503
        assert "1 of 3 requests failed" in r.stderr and run.summary.failed_requests == 1
        assert app.state.headers[-1]["authorization"] == "Bearer sk-secret-123"
        assert "sk-secret-123" not in out.read_text(encoding="utf-8")
        assert run.config.endpoint.api_key_env == "LLMBENCH_TEST_KEY"
        # no usage from this server and no --tokenizer: tokens are counted by events (and a warning says so)
        assert {q.tokens_from for q in run.requests} == {"chunks"} and "TPOT is per event" in r.stderr
    r = cli("run", prompt_file, "--endpoint", url, "-o", tmp_path / "gone.json", "-q")  # the server is gone
    assert r.returncode == 2 and "cannot connect" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("run", prompt_file, "--endpoint", "ftp://x", "-q")
    assert r.returncode == 2 and "not an http(s) URL" in r.stderr
    r = cli("run", prompt_file, "--endpoint", url, "--api-key-env", "LLMBENCH_UNSET_VAR", "-q")
    assert r.returncode == 2 and "not set" in r.stderr
    r = cli("run", prompt_file, "--endpoint", url, "--dtype", "float16", "-q")
    assert r.returncode == 2 and "--dtype" in r.stderr


@pytest.mark.slow
def test_tokens_counted_by_a_tokenizer_when_the_server_sends_no_usage(cli, tiny_model_dir, prompt_file, tmp_path):
    with BackgroundServer(faulty_server()) as url:
        out = tmp_path / "t.json"
        r = cli("run", prompt_file, "--endpoint", url, "--tokenizer", tiny_model_dir, "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    # "alpha beta gamma delta": 4 events; Qwen's tokenizer makes 4 tokens of it too, but says so itself
    assert all(q.tokens_from == "tokenizer" and q.chunks == 4 for q in run.requests)
    assert all(q.output_tokens >= 4 for q in run.requests)


@pytest.mark.slow
def test_concurrency_queues_then_refuses_and_says_so(cli, qwen_tokenizer, prompt_file, tmp_path):
    lm = delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=2)) as url:
        out = tmp_path / "queued.json"
        r = cli("run", prompt_file, "--endpoint", url, "--concurrency", "3", "--max-new-tokens", "6", "--ignore-eos",
                "--repeats", "2", "-o", out, "-q")  # fmt: skip
        assert r.returncode == 0, r.stderr
        run = load_run(out)
        assert run.complete and len(run.requests) == 6 and run.config.endpoint.concurrency == 3
        # one generates, the others wait for it: the wait shows on both sides of the clock
        waited = [q for q in run.requests if q.server_queue_ms > PREFILL_MS]
        assert waited and all(q.ttft_ms >= q.server_queue_ms for q in waited)
    lm = delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=0)) as url:
        out = tmp_path / "refused.json"
        r = cli("run", prompt_file, "--endpoint", url, "--concurrency", "3", "--max-new-tokens", "6", "--ignore-eos",
                "-o", out, "-q")  # fmt: skip
        assert r.returncode == 0, r.stderr
        run = load_run(out)
        assert run.requests and run.failed_requests and {f.status for f in run.failed_requests} == {429}
        assert len(run.requests) + len(run.failed_requests) == 3 and "requests failed" in r.stderr
