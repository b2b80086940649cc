"""Real HTTP servers for the endpoint tests: uvicorn on loopback in a thread, a buffering relay, a faulty server."""

from __future__ import annotations

import asyncio
import socket
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
    """An OpenAI-like server that misbehaves on purpose: ``app.state.mode`` picks how; it records headers."""

    def chunk(text: str) -> str:
        return 'data: {"choices":[{"index":0,"delta":{"content":"' + text + '"}}]}\n\n'

    async def chat(request: Request):
        app.state.calls += 1
        app.state.headers.append(dict(request.headers))
        mode = app.state.mode
        if mode == "fail-second" and app.state.calls == 3:  # warm-up is call 1
            return JSONResponse({"error": {"message": "overloaded"}}, status_code=503)
        if mode == "500":
            return JSONResponse({"error": {"message": "model crashed"}}, status_code=500)
        if mode == "json":
            return JSONResponse({"choices": [{"message": {"content": "not streamed"}}]})
        if mode == "malformed":
            body = chunk("a") + "data: {not json\n\n" + "data: [DONE]\n\n"
            return Response(body, media_type="text/event-stream")

        async def events():  # no usage chunk: tokens are counted by the tokenizer or by events
            yield 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
            for word in ("alpha", " beta", " gamma", " delta"):
                await asyncio.sleep(0.005)
                yield chunk(word)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    app.state.mode = "ok"
    app.state.calls = 0
    app.state.headers = []
    return app
