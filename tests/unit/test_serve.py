"""llmbench serve and run --endpoint: real uvicorn servers on loopback, real HTTP, real SSE, real Chromium.

This file: the part that needs no child process and no socket (tests/unit); the rest is in
tests/integration/test_serve.py."""

from __future__ import annotations

from tests.delayed_model import delayed_loaded
from tests.integration.test_serve import DECODE_MS, PREFILL_MS


def test_a_stream_never_started_gives_its_place_back(qwen_tokenizer):
    import gc

    from llmbench.serve import ChatRequest, ModelServer

    server = ModelServer(delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS), max_queue=0)
    ticket = server.admit()
    assert ticket is not None and server.admit() is None  # the one place is taken
    req = ChatRequest(messages=[{"role": "user", "content": "hi"}], stream=True)
    stream = server.completion_events(server.prepare(req), 0, ticket)  # the client leaves before the headers go out
    del ticket, stream
    gc.collect()
    assert server.admit() is not None and server.counters.rejected == 1
