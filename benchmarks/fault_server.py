"""An OpenAI-compatible streaming server that goes wrong on purpose, for the fault matrix (loopback only).

``app.state.fault`` picks how the ``app.state.fault_at``-th chat request (counting from 1) goes wrong; the others
stream normally, so a run has finished requests to lose and later ones to go on with:

none       every request streams ``tokens`` content events ``gap_s`` apart, then usage and [DONE]
stall      after two events the stream goes silent for ``stall_s`` (longer than the client's --timeout)
reset      after two events the connection is dropped (no chunked end: a crashed worker)
malformed  after two events an event whose data is not JSON

Each call is counted in ``app.state.calls``.
"""

from __future__ import annotations

import asyncio
import json

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, StreamingResponse
from starlette.routing import Route


def _chunk(text: str) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": text}}]}) + "\n\n"


def fault_server(tokens: int = 8, gap_s: float = 0.01, stall_s: float = 30.0) -> Starlette:
    """The app; set ``app.state.fault`` and ``app.state.fault_at`` before (or while) a run uses it."""

    async def chat(request: Request) -> StreamingResponse:
        app.state.calls += 1
        body = await request.json()
        n = min(int(body.get("max_tokens") or body.get("max_completion_tokens") or tokens), tokens)
        faulty = app.state.fault != "none" and app.state.calls == app.state.fault_at

        async def events():
            yield 'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n'
            for k in range(n):
                await asyncio.sleep(gap_s)
                if faulty and k == 2:
                    if app.state.fault == "stall":
                        await asyncio.sleep(stall_s)
                    elif app.state.fault == "reset":
                        raise RuntimeError("the server's worker died mid-stream")  # uvicorn drops the connection
                    elif app.state.fault == "malformed":
                        yield "data: {this is not json\n\n"
                yield _chunk(f" w{k}")
            usage = {"prompt_tokens": 12, "completion_tokens": n, "total_tokens": 12 + n}
            yield "data: " + json.dumps({"choices": [], "usage": usage}) + "\n\n"
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    async def models(_request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": "fault-model", "object": "model"}]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]), Route("/v1/models", models)])
    app.state.fault, app.state.fault_at, app.state.calls = "none", 1, 0
    return app
