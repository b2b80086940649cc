"""Real HTTP servers for the endpoint tests: uvicorn on loopback in a thread, a buffering relay, a faulty server."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import threading
import time

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class BackgroundServer:
    """``with BackgroundServer(app) as url:`` a real uvicorn server on 127.0.0.1, stopped on exit."""

    def __init__(self, app) -> None:
        self.port = free_port()
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.url = f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            assert self.thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return self.url

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def buffering_relay(upstream: str, media_type: str | None = "keep") -> Starlette:
    """A reverse proxy with buffering on: it reads the whole upstream body, then sends it in one piece.
    ``media_type`` other than "keep" replaces the upstream's content type (None: send none)."""

    async def relay(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=60) as client:
            r = await client.post(f"{upstream}{request.url.path}", content=await request.body(),
                                  headers={"content-type": "application/json"})  # fmt: skip
            body = await r.aread()
        kind = r.headers.get("content-type") if media_type == "keep" else media_type
        return Response(body, status_code=r.status_code, media_type=kind)

    async def passthrough(request: Request) -> Response:
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.get(f"{upstream}{request.url.path}")
        return Response(r.content, status_code=r.status_code, media_type=r.headers.get("content-type"))

    return Starlette(
        routes=[
            Route("/v1/chat/completions", relay, methods=["POST"]),
            Route("/health", passthrough),
            Route("/v1/models", passthrough),
        ]
    )


def faulty_server() -> Starlette:
    """An OpenAI-like server that misbehaves on purpose: ``app.state.mode`` picks how (for every request, or,
    for ``*-second`` modes, the second measured one); it records headers and bodies.

    ok            4 content events 5 ms apart, no usage
    fail-second   503 on the second measured request
    500 / json / malformed   an error status, a JSON body, an event that is not JSON
    break-second  the second measured stream stops mid-way: the connection closes without a chunked end
    choices-second   the second measured stream sends ``choices: 5``
    delta-second  the second measured stream sends a delta that is a string
    eos-usage     4 content events 20 ms apart, 20 ms later a finish_reason "stop" event with no text (an
                  end-of-sequence token), then usage counting 5 tokens
    usage-count   4 content events ("alpha beta gamma delta"), then usage counting 4 completion tokens on
                  odd calls and 6 on even ones (a server that counts what a client's tokenizer can't see)
    """

    def chunk(text: str) -> str:
        return 'data: {"choices":[{"index":0,"delta":{"content":"' + text + '"}}]}\n\n'

    async def chat(request: Request):
        app.state.calls += 1
        app.state.headers.append(dict(request.headers))
        app.state.bodies.append(await request.json())
        mode, second = app.state.mode, app.state.calls == 3  # warm-up is call 1
        if mode == "fail-second" and second:
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if mode == "500":
            return JSONResponse({"error": {"message": "model crashed"}}, status_code=500)
        if mode == "json":
            return JSONResponse({"choices": [{"message": {"content": "not streamed"}}]})
        if mode == "malformed":
            body = chunk("a") + "data: {not json\n\n" + "data: [DONE]\n\n"
            return Response(body, media_type="text/event-stream")
        if mode == "eos-usage":
            return StreamingResponse(eos_events(), media_type="text/event-stream")
        if mode == "usage-count":
            return StreamingResponse(counted_events(4 if app.state.calls % 2 else 6), media_type="text/event-stream")

        async def events():  # no usage chunk: tokens are counted by the tokenizer or by events
            yield 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
            for k, word in enumerate(("alpha", " beta", " gamma", " delta")):
                await asyncio.sleep(0.005)
                if second and k == 2:
                    if mode == "break-second":
                        raise RuntimeError("the worker died mid-stream")  # uvicorn drops the connection
                    if mode == "choices-second":
                        yield 'data: {"choices": 5}\n\n'
                    if mode == "delta-second":
                        yield 'data: {"choices":[{"index":0,"delta":"text"}]}\n\n'
                yield chunk(word)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def eos_events():
        for word in ("alpha", " beta", " gamma", " delta"):
            yield chunk(word)
            await asyncio.sleep(0.02)
        yield 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        yield 'data: {"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":5,"total_tokens":12}}\n\n'
        yield "data: [DONE]\n\n"

    async def counted_events(completion_tokens: int):
        for word in ("alpha", " beta", " gamma", " delta"):
            yield chunk(word)
            await asyncio.sleep(0.002)
        usage = {"prompt_tokens": 7, "completion_tokens": completion_tokens, "total_tokens": 7 + completion_tokens}
        yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
        yield "data: [DONE]\n\n"

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    app.state.mode = "ok"
    app.state.calls = 0
    app.state.headers = []
    app.state.bodies = []
    return app


def preempting_server(tokens: int = 12, gap_s: float = 0.01, every: int = 3, pause_s: float = 0.3) -> Starlette:
    """A server that preempts on cue, with the truth kept: every ``every``-th chat request (counting calls from 1,
    the warm-up's included) stops after its 5th content event for ``pause_s`` (an eviction and a recompute, as a
    vLLM request preempted mid-stream), then goes on; the others stream ``tokens`` events ``gap_s`` apart. Its
    ``/metrics`` counts the preemptions as vLLM does (``vllm:num_preemptions_total``), and ``app.state.preempted``
    lists the calls it preempted."""

    def chunk(text: str) -> str:
        return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"

    async def chat(request: Request):
        app.state.calls += 1
        call = app.state.calls
        body = await request.json()
        n = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or tokens), tokens)
        preempt = call % every == 0

        async def events():
            for k in range(n):
                await asyncio.sleep(gap_s)
                if preempt and k == 5:
                    app.state.preempted.append(call)
                    await asyncio.sleep(pause_s)
                yield chunk(f" w{k}")
            usage = {"prompt_tokens": 9, "completion_tokens": n, "total_tokens": 9 + n}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def metrics(_request: Request) -> Response:
        text = ("# HELP vllm:num_preemptions_total Cumulative number of preemptions.\n"
                "# TYPE vllm:num_preemptions_total counter\n"
                f"vllm:num_preemptions_total {float(len(app.state.preempted))}\n")  # fmt: skip
        return Response(text, media_type="text/plain; version=0.0.4")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/metrics", metrics)])
    app.state.calls, app.state.preempted = 0, []
    return app


def markup_server(name: str, device: str) -> Starlette:
    """A server whose /health and /v1/models carry names that are markup in Rich and in HTML."""

    async def health(_request: Request) -> JSONResponse:
        return JSONResponse({"model": name, "device": device, "dtype": "<b>bf16</b>", "weights": "random"})

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": name}]})

    async def chat(_request: Request) -> Response:
        body = 'data: {"choices":[{"index":0,"delta":{"content":"[bold]hi[/]"}}]}\n\ndata: [DONE]\n\n'
        return Response(body, media_type="text/event-stream")

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models),
                             Route("/v1/chat/completions", chat, methods=["POST"])])  # fmt: skip


def slow_health_server(delay_s: float) -> Starlette:
    """/health answers after ``delay_s``; /v1/models at once."""

    async def health(_request: Request) -> JSONResponse:
        await asyncio.sleep(delay_s)
        return JSONResponse({"status": "ok"})

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"data": [{"id": "listed-model"}]})

    return Starlette(routes=[Route("/health", health), Route("/v1/models", models)])


def caching_server(tokenizer, block: int = 16, ms_per_uncached_token: float = 0.1, decode_ms: float = 1.0):
    """A server with a prefix cache whose effect is known, for ground truth on hit rates and cold/warm TTFT.

    It counts a request's prompt with ``tokenizer``'s chat template (as vLLM would), looks up its leading blocks
    of ``block`` tokens (each block keyed by every token up to its end: a chain, as vLLM's block hashes), sends
    the first token after ``ms_per_uncached_token`` per prompt token not found, then ``max_tokens`` tokens
    ``decode_ms`` apart, and usage with ``prompt_tokens_details.cached_tokens``. It logs each request's
    messages, ids, arrival time (``time.perf_counter``) and cached tokens in ``app.state.log``.
    """

    async def chat(request: Request):
        arrived = time.perf_counter()
        body = await request.json()

        def tokenize() -> list[int]:  # off the event loop: the next request's arrival is stamped on time
            ids = tokenizer.apply_chat_template(body["messages"], add_generation_prompt=True, tokenize=True)
            return list(ids["input_ids"] if isinstance(ids, dict) or hasattr(ids, "keys") else ids)

        ids = await asyncio.to_thread(tokenize)
        cached = 0
        for end in range(block, len(ids) + 1, block):
            if tuple(ids[:end]) not in app.state.cache:
                break
            cached = end
        app.state.cache.update(tuple(ids[:end]) for end in range(block, len(ids) + 1, block))
        n = int(body.get("max_tokens") or 16)
        app.state.log.append({"messages": body["messages"], "ids": ids, "arrived": arrived, "cached": cached,
                              "max_tokens": n})  # fmt: skip

        async def events():
            await asyncio.sleep((len(ids) - cached) * ms_per_uncached_token / 1000)
            for k in range(n):
                if k:
                    await asyncio.sleep(decode_ms / 1000)
                yield 'data: {"choices":[{"index":0,"delta":{"content":"tok "}}]}\n\n'
            usage = {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n,
                     "prompt_tokens_details": {"cached_tokens": cached}}  # fmt: skip
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = _chat_stub(chat, "cache-stub", cache=set(), log=[])
    return app


def grammar_server(compile_ms: float = 150.0, gap_ms: float = 5.0) -> Starlette:
    """A server that compiles a request's JSON schema into a grammar the first time it sees it (``compile_ms``,
    slept: the ground truth) and keeps it, as vLLM's and SGLang's grammar caches do; then streams a JSON object
    that matches the schema's first required string or enum property, in three events ``gap_ms`` apart.
    ``app.state.compiled`` counts the compiles."""

    async def chat(request: Request):
        body = await request.json()
        rf = body.get("response_format") or {}
        schema = (rf.get("json_schema") or {}).get("schema") or rf.get("schema") or {}
        key = json.dumps(schema, sort_keys=True)
        fresh = key not in app.state.grammars
        app.state.grammars.add(key)

        async def events():
            if fresh:
                app.state.compiled += 1
                await asyncio.sleep(compile_ms / 1000)
            name = (schema.get("required") or ["answer"])[0]
            enum = ((schema.get("properties") or {}).get(name) or {}).get("enum")
            value = json.dumps(enum[0] if enum else "ok")
            for k, piece in enumerate(("{", f'"{name}": ', f"{value}}}")):
                if k:
                    await asyncio.sleep(gap_ms / 1000)
                yield "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": piece}}]}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = _chat_stub(chat, "grammar-stub", grammars=set(), compiled=0)
    return app


def _chat_stub(chat, model_id: str, **state: object) -> Starlette:
    """A stub's app: ``chat`` at /v1/chat/completions, one model ``model_id`` at /v1/models, ``state`` on
    ``app.state``."""

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": model_id, "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
    for name, value in state.items():
        setattr(app.state, name, value)
    return app


def serve_process(args: list[str], port: int, timeout_s: float = 60.0) -> subprocess.Popen:
    """``llmbench serve`` (``args``, listening on ``port``) as its own process, returned once /health answers 200;
    its stdout dropped, its stderr kept (read it when it died)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + timeout_s
    while True:
        assert proc.poll() is None, proc.communicate()
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return proc
        except httpx.ConnectError:
            pass
        assert time.monotonic() < deadline, "llmbench serve did not answer /health"
        time.sleep(0.2)
