"""``llmbench serve``: one model behind an OpenAI-compatible streaming endpoint, and a page that watches it."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import model_options, user_errors
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import ServeSpec


@from_spec(ServeSpec)
def serve(ctx: typer.Context, **s: Any) -> None:
    """Serve a model over an OpenAI-compatible SSE endpoint, with a page at / that shows tokens, TTFT and TPOT live."""
    from llmbench.core.errors import require
    from llmbench.core.process import frozen_gc
    from llmbench.present import terminal as display

    with user_errors():
        require("llmbench serve", "serve", "fastapi", "uvicorn")
        from llmbench import serve as sv

        asked = ctx.meta["spec"]
        spec, own = model_options(asked), asked.serve
        host, port, max_queue = own.host, own.port, own.max_queue
        app_, loaded = sv.prepare(spec, host, port, max_queue=max_queue, max_tokens=own.max_tokens,
                                  reasoning_tokens=own.test_reasoning_tokens,
                                  tool_calls=own.test_tool_calls, grammars=own.grammars)  # fmt: skip
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
