"""``llmbench serve``: one model behind an OpenAI-compatible streaming endpoint (SSE), and a page that watches it.

The chain of the seed: the browser POSTs, FastAPI answers with ``text/event-stream``, ``generate()`` runs in a
worker thread and hands each token to the event loop, which sends it as one ``data:`` event at once.

Concurrency rule: one request generates at a time (a single model without batching: two ``generate()`` calls
at once would only share the same cores and both slow down). Up to ``max_queue`` more wait in arrival order,
their streams open (their TTFT includes the wait, as a user's would); beyond that a request gets 429 with
``Retry-After`` at once. A client that disconnects, waiting or generating, stops its generation after the
token in flight.

Tools go through the model's chat template (its tools branch; a template without one is refused, never dropped
unseen); ``response_format`` (a JSON schema) is held by llguidance's grammar, compiled at its first use and cached
(:mod:`llmbench.engines.hf.grammar`). For tests, ``--test-tool-calls N``
streams a conversation's first N answers to a request with tools as a scripted call over the model's own tokens.
Why one module of 600-odd lines: the request's checks, the queue and the stream it writes are one contract with
the client, and the stream's events are what llmbench measures; split, a change to one would not show in the other.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from concurrent.futures import Executor
from contextlib import asynccontextmanager
from dataclasses import dataclass
from importlib import resources
from typing import Any, Literal

import torch
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from llmbench.engines.hf import grammar
from llmbench.engines.hf.generation import (
    StopCriterion,
    TokenStamper,
    encode_messages,
    generate_kwargs,
    generation_thread,
)
from llmbench.engines.hf.grammar import GrammarProcessor, Grammars, schema_of
from llmbench.engines.hf.models import LoadedModel
from llmbench.workloads import tools

SSE_HEADERS = {
    "Cache-Control": "no-cache",
    "X-Accel-Buffering": "no",  # tells nginx-style proxies not to buffer this response
}


class Message(BaseModel):
    model_config = ConfigDict(extra="allow")  # an assistant's tool_calls, a tool result's tool_call_id: kept
    role: str
    content: str | None = ""


class ChatRequest(BaseModel):
    """The part of OpenAI's chat completions request that llmbench serve honours (other fields are ignored)."""

    model_config = ConfigDict(extra="allow")
    model: str | None = None
    messages: list[Message] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    ignore_eos: bool = False  # vLLM's and llama.cpp's extension: generate exactly max_tokens
    stream_options: dict[str, Any] | None = None
    tools: list[dict[str, Any]] | None = None  # through the model's chat template (its tools branch)
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None  # json_schema / json_object: constrained by llguidance


@dataclass
class Prepared:
    """A request checked and tokenized before its response starts (a bad one gets a 400, not a 200 stream)."""

    input_ids: Any
    kwargs: dict[str, Any]
    prompt_tokens: int
    max_new_tokens: int
    seed: int | None
    ignore_eos: bool = False  # then an EOS id is one more token (generation goes on), not the end
    script: ScriptedCall | None = None  # --test-tool-calls: this answer is this call, streamed over its tokens
    grammar_ms: float | None = None  # response_format: its grammar's compile, inside this request (0: cached)


@dataclass
class ScriptedCall:
    """A tool call a test server streams in place of the text its random weights generate (``--test-tool-calls``):
    the name with the first token, then the arguments in fragments of :data:`FRAGMENT_CHARS`, one a token, and
    the end (finish_reason ``tool_calls``) after the last fragment."""

    name: str
    arguments: str
    id: str

    def fragments(self) -> list[str]:
        a = self.arguments
        return [a[i : i + FRAGMENT_CHARS] for i in range(0, len(a), FRAGMENT_CHARS)]


FRAGMENT_CHARS = 8


class IncrementalText:
    """Token ids -> new text, one piece per call; holds back bytes of a character not yet complete."""

    def __init__(self, tokenizer) -> None:
        self.tok = tokenizer
        self.ids: list[int] = []
        self.prefix = 0  # decoding restarts here, so a piece depends on a few tokens of context, not all
        self.read = 0

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def add(self, ids: list[int]) -> str:
        self.ids.extend(ids)
        before = self._decode(self.ids[self.prefix : self.read])
        now = self._decode(self.ids[self.prefix :])
        if len(now) > len(before) and not now.endswith("\ufffd"):
            self.prefix, self.read = self.read, len(self.ids)
            return now[len(before) :]
        return ""

    def flush(self) -> str:
        before = self._decode(self.ids[self.prefix : self.read])
        now = self._decode(self.ids[self.prefix :])
        self.prefix = self.read = len(self.ids)
        return now[len(before) :]


class _Ticket:
    """A request's place in the server. Released by the request's own ``finally``; if the stream is never
    started (the client left before the headers went out), the generator is dropped unstarted, its
    ``finally`` never runs, and the ticket's finaliser gives the place back instead."""

    def __init__(self, server: ModelServer) -> None:
        self.server: ModelServer | None = server

    def release(self) -> None:
        if self.server is not None:
            self.server.admitted -= 1
            self.server = None

    def __del__(self) -> None:
        self.release()


@dataclass
class _Counters:
    served: int = 0
    cancelled: int = 0
    rejected: int = 0
    last_tokens: int = 0
    last_cancelled: bool = False
    prompt_tokens: int = 0  # over every request served (finished or cancelled): GET /metrics
    generation_tokens: int = 0


class ModelServer:
    """The model, its single generation thread and the queue in front of it."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        max_queue: int = 4,
        max_tokens: int = 256,
        executor: Executor | None = None,
        reasoning_tokens: int = 0,
        tool_calls: int = 0,
        grammars: Grammars | Literal["first-use"] | None = None,
    ) -> None:
        self.loaded = loaded
        # response_format's compiled grammars; "first-use": built by the first request that asks (None: refused)
        self.grammars = grammars if isinstance(grammars, Grammars) else None
        self._lazy = grammars == "first-use"
        self._building = asyncio.Lock()
        # for tests of reasoning streams: the first N generated tokens go out as delta.reasoning_content
        self.reasoning_tokens = reasoning_tokens
        # for tests of tool calls: a conversation's first N answers to a request with tools are a scripted call
        self.tool_calls = tool_calls
        self.max_queue = max_queue
        self.default_max_tokens = max_tokens
        self.executor = executor or generation_thread()
        self.slot = asyncio.Semaphore(1)
        self.admitted = 0  # requests let in and not finished: 1 generating + the queue
        self.generating = False
        self.counters = _Counters()
        self.uses_template = bool(getattr(loaded.tokenizer, "chat_template", None))
        eos = loaded.model.generation_config.eos_token_id
        self.eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])

    # -- admission ------------------------------------------------------------------------------------------

    def admit(self) -> _Ticket | None:
        """Take a place (generating or queued), or None: the 429 rule of the module docstring."""
        if self.admitted >= 1 + self.max_queue:
            self.counters.rejected += 1
            return None
        self.admitted += 1
        return _Ticket(self)

    def metric_families(self) -> list[Any]:
        """The server's state as Prometheus families (``GET /metrics``): read at scrape time, nothing kept twice."""
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        c, h = self.counters, self.health()
        return [
            GaugeMetricFamily("llmbench_requests_generating", "Requests generating now (0 or 1).",
                              value=1 if self.generating else 0),
            GaugeMetricFamily("llmbench_requests_queued", "Requests admitted and waiting for the model.",
                              value=h["queued"]),
            CounterMetricFamily("llmbench_requests", "Requests served (finished or cancelled).", value=c.served),
            CounterMetricFamily("llmbench_requests_cancelled", "Requests whose client left early.", value=c.cancelled),
            CounterMetricFamily("llmbench_requests_rejected", "Requests refused with 429.", value=c.rejected),
            CounterMetricFamily("llmbench_prompt_tokens", "Prompt tokens of the requests served.",
                                value=c.prompt_tokens),
            CounterMetricFamily("llmbench_generation_tokens", "Tokens generated.", value=c.generation_tokens),
        ]  # fmt: skip

    def health(self) -> dict[str, Any]:
        lm = self.loaded
        c = self.counters
        return {
            "status": "ok",
            "model": lm.name,
            "weights": lm.weights,
            "device": lm.device,
            "dtype": lm.dtype,
            "threads": lm.threads,
            "generating": self.generating,
            "queued": max(0, self.admitted - (1 if self.generating else 0)),
            "max_queue": self.max_queue,
            "served": c.served,
            "cancelled": c.cancelled,
            "rejected": c.rejected,
            "last": {"tokens": c.last_tokens, "cancelled": c.last_cancelled},
        }

    # -- one request ----------------------------------------------------------------------------------------

    async def constrain(self, req: ChatRequest) -> tuple[Any, float] | None:
        """``req``'s response format as a fresh grammar matcher and its compile's milliseconds (0: cached), compiled
        on a thread (llguidance drops the GIL: the stream in flight keeps sending); None without a format.
        ValueError (a 400) for one this server can't hold."""
        rf = req.response_format
        if rf is None or rf.get("type", "text") == "text":
            return None
        if self.grammars is None and not self._lazy:
            raise ValueError(f"response_format {rf.get('type')!r}: this llmbench serve has no constrained decoder "
                             "(llguidance: pip install 'llmbench[serve]'; or it runs --grammars off)")  # fmt: skip
        if req.ignore_eos:
            raise ValueError("ignore_eos with response_format: a constrained answer ends where its schema does")
        schema = schema_of(rf)
        t0 = time.perf_counter()
        async with self._building:  # --grammars first-use: the first request that asks builds what all share
            if self.grammars is None:
                lm = self.loaded
                self.grammars = await asyncio.to_thread(Grammars, lm.tokenizer, lm.model.config.vocab_size)
        ready_ms = (time.perf_counter() - t0) * 1000  # the shared set-up built or awaited (~0 once it is there)
        matcher, ms, _ = await asyncio.to_thread(self.grammars.matcher, schema)
        return matcher, ms + ready_ms

    def prepare(self, req: ChatRequest, constrained: tuple[Any, float] | None = None) -> Prepared:
        """Template and tokenize ``req`` (``constrained``: its grammar, :meth:`constrain`); ValueError (a 400) when
        it can't fit the model's context, or offers tools a template without tools can't show."""
        matcher, grammar_ms = constrained if constrained is not None else (None, None)
        offered = req.tools or None
        if offered and "tools" not in str(getattr(self.loaded.tokenizer, "chat_template", "") or ""):
            raise ValueError("tools: this model's chat template does not take tools (it would drop them unseen)")
        # a tool call's or a tool result's fields go to the template as they came
        messages = [{**m.model_dump(exclude_none=True), "content": m.content or ""} for m in req.messages]
        enc = encode_messages(self.loaded.tokenizer, messages, self.uses_template, offered)
        input_ids = enc["input_ids"]
        max_new = req.max_completion_tokens or req.max_tokens or self.default_max_tokens
        limit = self.loaded.max_positions
        if limit and input_ids.shape[-1] + max_new > limit:
            raise ValueError(
                f"the prompt has {input_ids.shape[-1]} tokens; with max_tokens {max_new} that exceeds the "
                f"model's context of {limit}"
            )
        script = self.script(req, messages)
        ignore_eos = req.ignore_eos or script is not None  # a scripted call ends after its arguments, not at EOS
        # greedy unless a temperature above 0 is asked for (deterministic by default)
        kw = generate_kwargs(max_new, ignore_eos=ignore_eos, sample=bool(req.temperature),
                             temperature=req.temperature, top_p=req.top_p)  # fmt: skip
        kw["attention_mask"] = enc.get("attention_mask")
        if matcher is not None and self.grammars is not None:
            from transformers import LogitsProcessorList

            kw["logits_processor"] = LogitsProcessorList(
                [GrammarProcessor(matcher, int(input_ids.shape[-1]), self.grammars.vocab_size)]
            )
        return Prepared(input_ids, kw, int(input_ids.shape[-1]), max_new, req.seed, ignore_eos, script, grammar_ms)

    def script(self, req: ChatRequest, messages: list[dict[str, Any]]) -> ScriptedCall | None:
        """``--test-tool-calls N``: the call this answer is (the named tool, else the first, with arguments that
        match its schema), while the conversation has had fewer than N; None: the model's own text."""
        choice = req.tool_choice
        if not self.tool_calls or not req.tools or choice == "none":
            return None
        if sum(1 for m in messages if m["role"] == "assistant" and m.get("tool_calls")) >= self.tool_calls:
            return None
        named = tools.named_tool(choice)
        fns = [f if isinstance(f := t.get("function"), dict) else {} for t in req.tools]
        fn = next((f for f in fns if f.get("name") == named), fns[0]) if named else fns[0]
        if not isinstance(fn.get("name"), str):
            raise ValueError("tools[0]: a function needs a name")
        args = tools.example_arguments(fn.get("parameters") or {})
        return ScriptedCall(fn["name"], json.dumps(args, ensure_ascii=False), f"call_{uuid.uuid4().hex[:24]}")

    def _generate(self, p: Prepared, streamer: TokenStamper, done: Any, cancel: threading.Event) -> int:
        """On the generation thread. Returns the number of new tokens; always posts the end marker."""
        try:
            dev = self.loaded.device
            if p.seed is not None:
                torch.manual_seed(p.seed)
            kw = dict(p.kwargs)
            mask = kw.pop("attention_mask")
            with torch.inference_mode():
                out = self.loaded.model.generate(
                    input_ids=p.input_ids.to(dev),
                    attention_mask=mask.to(dev) if mask is not None else None,
                    streamer=streamer,
                    stopping_criteria=[StopCriterion(cancel.is_set)],
                    **kw,
                )
            return int(out.shape[-1] - p.input_ids.shape[-1])
        finally:
            done()

    def _start(self, p: Prepared, cancel: threading.Event) -> tuple[asyncio.Queue, asyncio.Future]:
        """Start generate() on the model's thread; (queue of (stamp_ns, ids) ending with None, its future)."""
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def hand_over(stamp: int, value: Any) -> None:  # on the generation thread, in the streamer's put()
            loop.call_soon_threadsafe(queue.put_nowait, (stamp, value.reshape(-1).tolist()))

        def done() -> None:
            loop.call_soon_threadsafe(queue.put_nowait, None)

        streamer = TokenStamper(on_token=hand_over)
        fut = loop.run_in_executor(self.executor, self._generate, p, streamer, done, cancel)
        return queue, fut

    async def completion_events(self, p: Prepared, arrived_ns: int, ticket: _Ticket):
        """Yield the SSE lines of one streamed completion: a role chunk, one chunk per piece of text, the
        finishing chunk, a usage chunk (with the server's own stamps under ``llmbench``), ``[DONE]``."""
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        created = int(time.time())
        cancel = threading.Event()
        finished = False
        tokens = 0
        stamps: list[float] = []  # the server's own stamp of each token, ms since the request arrived
        try:
            async with self._turn():
                started_ns = time.perf_counter_ns()
                queue, fut = self._start(p, cancel)
                yield _sse(self._chunk(rid, created, {"role": "assistant", "content": ""}))
                text = IncrementalText(self.loaded.tokenizer)
                ended = False  # the finishing chunk went out with the end-of-sequence token
                seen = 0
                call, fragments = p.script, p.script.fragments() if p.script else []
                while (item := await queue.get()) is not None:
                    stamp, ids = item
                    stamps.append(round((stamp - arrived_ns) / 1e6, 3))
                    if call is not None:  # a scripted call: its name with the first token, a fragment a token
                        if ended:
                            continue  # the token in flight when the call ended
                        first = len(stamps) == 1
                        part = {"name": call.name, "arguments": ""} if first else {"arguments": fragments.pop(0)}
                        head = {"id": call.id, "type": "function"} if first else {}
                        yield _sse(self._chunk(rid, created, {"tool_calls": [{"index": 0, **head, "function": part}]}))
                        if not first and not fragments:
                            ended = True
                            cancel.set()  # the call is whole: the model stops after the token in flight
                            yield _sse(self._chunk(rid, created, {}, "tool_calls"))
                        continue
                    piece = text.add(ids)
                    seen += len(ids)
                    if seen <= self.reasoning_tokens:  # a test server's "thinking": real tokens, labelled so
                        piece += text.flush() if seen == self.reasoning_tokens else ""
                        if piece:
                            yield _sse(self._chunk(rid, created, {"reasoning_content": piece}))
                        continue
                    if piece:
                        yield _sse(self._chunk(rid, created, {"content": piece}))
                    if not ended and not p.ignore_eos and self.eos_ids.intersection(ids):
                        # EOS decodes to no text but usage counts it: its event is the finishing chunk, sent now
                        # (not after generate() returns), so a client can stamp the last token it counts
                        rest, ended = text.flush(), True
                        if rest:
                            yield _sse(self._chunk(rid, created, {"content": rest}))
                        yield _sse(self._chunk(rid, created, {}, "stop"))
                tokens = await fut
                if not ended:
                    rest = text.flush()
                    if rest:
                        yield _sse(self._chunk(rid, created, {"content": rest}))
                    yield _sse(self._chunk(rid, created, {}, "length" if tokens >= p.max_new_tokens else "stop"))
                usage = _usage(p.prompt_tokens, tokens)
                if self.reasoning_tokens:
                    usage["completion_tokens_details"] = {"reasoning_tokens": min(self.reasoning_tokens, tokens)}
                timing = {
                    # the arrival on the wall clock (ms): a client on this machine (llmbench paint's page) places
                    # the stamps below on its own timeline with it
                    "arrived_unix_ms": round(time.time() * 1000 - (time.perf_counter_ns() - arrived_ns) / 1e6, 3),
                    "queue_ms": round((started_ns - arrived_ns) / 1e6, 3),
                    "ttft_ms": stamps[0] if stamps else None,
                    "token_times_ms": stamps,
                    **({"grammar_ms": round(p.grammar_ms, 3)} if p.grammar_ms is not None else {}),
                }
                yield _sse(
                    {
                        "id": rid,
                        "object": "chat.completion.chunk",
                        "created": created,
                        "model": self.loaded.name,
                        "choices": [],
                        "usage": usage,
                        "llmbench": timing,
                    }
                )
                yield "data: [DONE]\n\n"
                finished = True
        except Exception as e:  # the headers are out: the stream says what broke, as an error event, then ends
            yield _sse({"error": {"message": f"{type(e).__name__}: {e}", "type": "server_error"}})
            yield "data: [DONE]\n\n"
        finally:
            cancel.set()  # a disconnect lands here (GeneratorExit/CancelledError): generate() stops
            self._done(ticket, finished, tokens or len(stamps), p.prompt_tokens)

    @asynccontextmanager
    async def _turn(self):
        """Wait for the model (FIFO: asyncio's semaphore wakes waiters in order), then hold it."""
        async with self.slot:
            self.generating = True
            try:
                yield
            finally:
                self.generating = False

    def _done(self, ticket: _Ticket, finished: bool, tokens: int, prompt_tokens: int) -> None:
        ticket.release()
        c = self.counters
        c.served += 1
        c.prompt_tokens += prompt_tokens
        c.generation_tokens += tokens
        c.last_cancelled = not finished
        c.last_tokens = tokens
        if not finished:
            c.cancelled += 1

    async def completion(self, p: Prepared, ticket: _Ticket) -> dict[str, Any]:
        """The whole completion as one response (``stream: false``)."""
        cancel = threading.Event()
        finished = False
        tokens = 0
        try:
            async with self._turn():
                queue, fut = self._start(p, cancel)
                ids: list[int] = []
                while (item := await queue.get()) is not None:
                    ids.extend(item[1])
                tokens = await fut
                finished = True
        finally:
            cancel.set()
            self._done(ticket, finished, tokens, p.prompt_tokens)
        message: dict[str, Any] = {"role": "assistant",
                                   "content": self.loaded.tokenizer.decode(ids, skip_special_tokens=True)}  # fmt: skip
        finish = "length" if tokens >= p.max_new_tokens else "stop"
        if p.script is not None:  # the scripted call, whole (a test server's answer is the call, not the text)
            message = {"role": "assistant", "content": None, "tool_calls": [{"id": p.script.id, "type": "function",
                       "function": {"name": p.script.name, "arguments": p.script.arguments}}]}  # fmt: skip
            finish = "tool_calls"
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.loaded.name,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": _usage(p.prompt_tokens, tokens),
        }

    def _chunk(self, rid: str, created: int, delta: dict, finish: str | None = None) -> dict[str, Any]:
        return {
            "id": rid,
            "object": "chat.completion.chunk",
            "created": created,
            "model": self.loaded.name,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        }


def _registry(server: ModelServer) -> Any:
    """A registry of this app's own (not prometheus_client's global one: two apps in a process don't clash)."""
    from prometheus_client import CollectorRegistry

    class _Collector:
        def collect(self) -> list[Any]:
            return server.metric_families()

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector())
    return registry


def _sse(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False, separators=(',', ':'))}\n\n"


def _usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _error(status: int, message: str, kind: str = "invalid_request_error", headers=None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind}}, status_code=status, headers=headers)


def page_html() -> str:
    """The page served at ``/``: fetch + ReadableStream, live TTFT and TPOT."""
    return resources.files("llmbench").joinpath("page.html").read_text(encoding="utf-8")


def create_app(
    loaded: LoadedModel,
    *,
    max_queue: int = 4,
    max_tokens: int = 256,
    executor: Executor | None = None,
    reasoning_tokens: int = 0,
    tool_calls: int = 0,
    grammars: Grammars | Literal["first-use"] | None = None,
) -> FastAPI:
    """The FastAPI app around ``loaded``: ``POST /v1/chat/completions``, ``GET /v1/models``, ``GET /health``,
    ``GET /metrics`` (Prometheus: queue depth, requests, tokens), ``GET /`` (the page). ``executor``: the thread
    that loaded the model (default: the process's generation thread,
    :func:`~llmbench.engines.hf.generation.generation_thread`). ``reasoning_tokens``: for tests, send the first N
    tokens of every answer as reasoning (``delta.reasoning_content``, counted in usage's details); ``tool_calls``:
    for tests, a conversation's first N answers to a request with tools are a scripted call
    (:class:`ScriptedCall`), streamed over the tokens the model generates; ``grammars``: response_format's
    compiler and cache (:class:`~llmbench.engines.hf.grammar.Grammars`), ``"first-use"`` to build it in the
    first request that asks, None to refuse response_format."""
    server = ModelServer(loaded, max_queue=max_queue, max_tokens=max_tokens, executor=executor,
                         reasoning_tokens=reasoning_tokens, tool_calls=tool_calls, grammars=grammars)  # fmt: skip
    app = FastAPI(title="llmbench serve", docs_url=None, redoc_url=None)
    app.state.server = server
    html = page_html()

    @app.exception_handler(RequestValidationError)
    async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
        return _error(400, f"{where}: {first.get('msg', 'invalid request')}" if where else "invalid request")

    @app.get("/", response_class=HTMLResponse)
    async def page() -> str:
        return html

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return server.health()

    registry = _registry(server)

    @app.get("/metrics")
    async def metrics() -> Response:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": loaded.name, "object": "model", "owned_by": "llmbench"}]}

    @app.post("/v1/chat/completions")
    async def chat(req: ChatRequest):
        arrived = time.perf_counter_ns()
        try:
            prepared = server.prepare(req, await server.constrain(req))
        except ValueError as e:  # before any header: a bad request is a 400, streamed or not
            return _error(400, str(e))
        ticket = server.admit()
        if ticket is None:
            return _error(
                429,
                f"busy: one request generating and {server.max_queue} waiting; retry later",
                "rate_limit_error",
                {"Retry-After": "1"},
            )
        if req.stream:
            events = server.completion_events(prepared, arrived, ticket)
            return StreamingResponse(events, media_type="text/event-stream", headers=SSE_HEADERS)
        try:
            return await server.completion(prepared, ticket)
        except Exception as e:  # a defect, not the request's fault: 500, and the server goes on
            return _error(500, f"{type(e).__name__}: {e}", "server_error")

    return app


def prepare(
    spec: Any, host: str, port: int, *, max_queue: int = 4, max_tokens: int = 256, reasoning_tokens: int = 0,
    tool_calls: int = 0, grammars: Literal["first-use", "start", "off"] = "first-use",
) -> tuple[FastAPI, LoadedModel]:  # fmt: skip
    """Everything ``llmbench serve`` does before it listens: the limits and the model's options checked, the port
    free, the model (a :class:`~llmbench.options.ModelOptions`) loaded on the thread that will generate (a
    status line on stderr meanwhile), and its app. ``grammars``: when response_format's shared set-up is built
    (:mod:`llmbench.engines.hf.grammar`: 5.6 s for Qwen2.5's vocabulary here): in the first request that asks (its
    wait shows it), before listening, or never (response_format refused). UserError for what can't be served."""
    from llmbench.core.errors import UserError
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread
    from llmbench.present import terminal as display
    from llmbench.workloads.limits import MAX_CONCURRENCY, MAX_PROMPT_TOKENS

    if not 0 <= max_queue <= MAX_CONCURRENCY:  # requests held waiting, each with its prompt
        raise UserError(f"--max-queue must be 0 to {MAX_CONCURRENCY:,}, not {max_queue}")
    if not 1 <= max_tokens <= MAX_PROMPT_TOKENS:
        raise UserError(f"--max-tokens must be 1 to {MAX_PROMPT_TOKENS:,}, not {max_tokens}")
    if not 0 <= reasoning_tokens <= MAX_PROMPT_TOKENS:
        raise UserError(f"--test-reasoning-tokens must be 0 to {MAX_PROMPT_TOKENS:,}, not {reasoning_tokens}")
    if not 0 <= tool_calls <= MAX_PROMPT_TOKENS:
        raise UserError(f"--test-tool-calls must be 0 to {MAX_PROMPT_TOKENS:,}, not {tool_calls}")
    models.validate(spec)
    check_port(host, port)
    with display.err.status(f"loading {spec.model} ({spec.weights} weights) ..."):
        loaded = generation_thread().run(models.load_model, spec)  # on the thread that will generate
    held: Grammars | Literal["first-use"] | None = None
    if grammars != "off" and grammar.available():
        if grammars == "start":
            with display.err.status("building response_format's grammar set-up (llguidance) ..."):
                held = Grammars(loaded.tokenizer, loaded.model.config.vocab_size)
        else:
            held = "first-use"
    app = create_app(loaded, max_queue=max_queue, max_tokens=max_tokens, reasoning_tokens=reasoning_tokens,
                     tool_calls=tool_calls, grammars=held)  # fmt: skip
    return app, loaded


def check_port(host: str, port: int) -> None:
    """UserError when ``host:port`` can't be bound (in use, or not an address of this machine)."""
    import socket

    from llmbench.core.errors import UserError

    if not 0 <= port <= 65535:
        raise UserError(f"--port must be 0-65535, not {port}")
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise UserError(f"--host {host}: {e.strerror}") from None
    family, _, _, _, addr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(addr)
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def run_server(app: FastAPI, host: str, port: int) -> None:
    """Serve ``app`` with uvicorn until Ctrl-C (access log off: a line per request would cost the stream)."""
    import uvicorn

    uvicorn.run(app, host=host, port=port, log_level="warning", access_log=False, timeout_graceful_shutdown=3)
