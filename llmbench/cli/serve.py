"""``llmbench serve``: one model behind an OpenAI-compatible streaming endpoint, and a page that watches it."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.shared import DEVICE, LOADING, MODEL, takes


@takes(*MODEL, *DEVICE, "attn", "quantize", *LOADING, "host", "port", "max_queue", "test_reasoning_tokens",
       "max_tokens")  # fmt: skip
def serve(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback: no one else can reach it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_queue: Annotated[int, typer.Option(help="Requests that may wait while one generates; more get 429.")] = 4,
    test_reasoning_tokens: Annotated[
        int, typer.Option(hidden=True, help="For tests: send each answer's first N tokens as reasoning.")
    ] = 0,
    max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 256,
    **shared: Any,
) -> None:
    """Serve a model over an OpenAI-compatible SSE endpoint, with a page at / that shows tokens, TTFT and TPOT live."""
    from llmbench.core.errors import require
    from llmbench.core.process import frozen_gc
    from llmbench.present import terminal as display

    with user_errors():
        require("llmbench serve", "serve", "fastapi", "uvicorn")
        from llmbench import serve as sv

        spec = model_options(ctx.params)
        app_, loaded = sv.prepare(spec, host, port, max_queue=max_queue, max_tokens=max_tokens,
                                  reasoning_tokens=test_reasoning_tokens)  # fmt: skip
        for w in loaded.warnings:
            display.warn(w)
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    display.info(
        f"serving {spec.model} on {loaded.device} ({loaded.dtype}, {loaded.threads} threads) at {url}\n"
        f"  page: {url}/   API: POST /v1/chat/completions (stream: true for SSE)   GET /health\n"
        f"  one request generates at a time, {max_queue} may wait, more get 429. Ctrl-C stops."
    )
    with frozen_gc():
        sv.run_server(app_, host, port)
