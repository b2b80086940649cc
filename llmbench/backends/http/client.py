"""The OpenAI-compatible streaming client: one request, every network read stamped on arrival.

The hot path is aiohttp's (its HTTP parser is C) and, of llmbench's, one clock read and one list append per network
read: the bytes are parsed (SSE framing by httpx-sse, then JSON) after the stream ends, and each event takes the
stamp of the read that completed it. httpx, which streamed here before, paid 150-350 µs of CPU an event against
aiohttp's 20-50 µs (benchmarks/http_stacks.py), and a client that parsed as it read fell behind the bytes past a
few dozen streams in one process (benchmarks/README.md, "the client that keeps up"). The requests off the hot path
(the server's /health and /v1/models, its metrics) stay on httpx. No torch is imported here (a tokenizer, only
when one is named, loads transformers).
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import httpx
from aiohttp.client_proto import ResponseHandler
from httpx_sse import EventSource, SSEError

from llmbench.core.errors import BackendUnavailable, RequestFailed, UserError
from llmbench.core.redact import redact_url, scrub
from llmbench.options import RunOptions
from llmbench.workloads.tools import Ask

redact = redact_url  # the name drivers (ab, load) import: one rule, llmbench.core.redact's


class ServerUnreachable(BackendUnavailable):
    """Connecting failed: nothing else can go on."""


@dataclass
class Stream:
    """What one streamed request brought: the raw clock readings, the text, and what the server said."""

    start_ns: int
    end_ns: int = 0
    start_unix_ns: int = 0  # the wall clock read beside start_ns: a server's send stamps (unix) placed on this timeline
    stamps_ns: list[int] = field(default_factory=list)  # one per content event, on arrival
    pieces: list[str] = field(default_factory=list)
    usage: dict | None = None
    timing: dict | None = None  # llmbench serve's own stamps (the usage chunk's "llmbench")
    content_type: str | None = None  # set when the stream did not come as text/event-stream
    finish_reason: str | None = None
    finish_ns: int | None = None  # arrival of the event that carried finish_reason
    reasoning_ns: list[int] = field(default_factory=list)  # one per reasoning event (never a content stamp)
    # (clock, the body's byte count) of each network read the connection received (_StampingHandler): the reads are
    # cut at them when parsed, off the event loop (at_arrival)
    arrivals: list[tuple[int, int]] | None = None
    # delta.tool_calls: each call assembled across its events, keyed by (choice index, the call's index)
    calls: dict[tuple[int, int], Call] = field(default_factory=dict)
    tool_ns: list[int] = field(default_factory=list)  # one per event that carried a tool call's name or arguments

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def answered_ns(self) -> int | None:
        """The arrival of the answer's last event, text or tool call (None: neither came)."""
        last = [v[-1] for v in (self.stamps_ns, self.tool_ns) if v]
        return max(last) if last else None


@dataclass
class Call:
    """One streamed tool call, assembled as OpenAI's streaming format splits it: ``id`` and the function's
    ``name`` once (a server that repeats them, llama-cpp-python's, sends the same again), ``arguments`` in
    fragments to append. ``name_ns``: the name's arrival; ``parsed_ns``: the arrival of the fragment after which
    the arguments first parsed as JSON (the earliest a program could act), None while they don't."""

    id: str | None = None
    name: str = ""
    name_ns: int | None = None
    fragments: list[str] = field(default_factory=list)
    parsed_ns: int | None = None

    @property
    def arguments(self) -> str:
        return "".join(self.fragments)

    def add(self, t: int, fn: dict, call_id: Any) -> bool:
        """One event's part of this call; whether it carried a name or arguments."""
        if isinstance(call_id, str) and call_id and self.id is None:
            self.id = call_id
        name, args = fn.get("name"), fn.get("arguments")
        took = False
        if isinstance(name, str) and name and not self.name:
            self.name, self.name_ns, took = name, t, True
        if isinstance(args, str) and args:
            self.fragments.append(args)
            took = True
            # only a fragment that may close the value is worth a parse: a JSON object or array ends with } or ]
            if self.parsed_ns is None and args.rstrip()[-1:] in ("}", "]") and _parses(self.arguments):
                self.parsed_ns = t
        return took


def _parses(text: str) -> bool:
    try:
        json.loads(text)
        return True
    except ValueError:
        return False


def chat_url(url: str) -> str:
    """``http://host:port[/v1][/chat/completions]`` -> the chat completions URL. UserError if not http(s)."""
    u = urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise UserError(f"--endpoint '{redact_url(url)}' is not an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    path = u.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path = (path if path.endswith("/v1") else f"{path}/v1") + "/chat/completions"
    return urlunsplit((u.scheme, u.netloc, path, u.query, ""))


def _root(url: str) -> str:
    u = urlsplit(url)
    path = u.path.removesuffix("/chat/completions").removesuffix("/v1")
    return urlunsplit((u.scheme, u.netloc, path, "", ""))


def api_headers(api_key_env: str | None) -> dict[str, str]:
    """``Authorization: Bearer $VAR`` when asked; UserError when the variable is unset."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise UserError(f"--api-key-env {api_key_env}: the variable is not set")
    return {"Authorization": f"Bearer {key}"}


def request_body(model: str | None, prompt: str, o: RunOptions, seed: int | None = None,
                 history: Sequence[dict[str, Any]] = (), ask: Ask | None = None,
                 tool_step: bool = False) -> dict[str, Any]:  # fmt: skip
    """The JSON body of one streamed chat request (``seed``: this request's, when sampling; ``history``: a
    session's earlier turns, sent before this one; ``ask``: the workload's tools, tool choice and response format;
    ``tool_step``: an agent task's later step, whose ``history`` ends with the tool results it sends)."""
    messages = [{"role": "system", "content": o.system_prompt}] if o.system_prompt else []
    last = [] if tool_step else [{"role": "user", "content": prompt}]
    body: dict[str, Any] = {
        "messages": [*messages, *history, *last],
        "stream": True,
        "stream_options": {"include_usage": True},
        **request_extra(o),
        **(ask.body() if ask is not None else {}),
    }
    if o.sample and seed is not None:
        body["seed"] = seed
    if model:
        body["model"] = model
    return body


def request_extra(o: RunOptions) -> dict[str, Any]:
    """The generation fields of every request body (recorded in ``config.endpoint.request_extra``). When
    sampling, each request also carries its own seed (:meth:`RunOptions.request_seed`)."""
    extra: dict[str, Any] = {"max_tokens": o.max_new_tokens}
    if o.sample:
        extra.update(temperature=o.temperature, top_p=o.top_p)
    else:
        extra["temperature"] = 0.0  # greedy, as the in-process runs
    if o.ignore_eos:
        extra["ignore_eos"] = True  # vLLM's and llama.cpp's extension; OpenAI's own API refuses it
    return extra


class _StampingHandler(ResponseHandler):
    """aiohttp's connection protocol, stamping each network read in ``data_received``: as the event loop hands the
    bytes over, before its HTTP parser and before the task that reads the stream wakes. When many streams' events
    arrive at one instant (a batching server sends every stream's token at the same step), the loop runs every
    socket's ``data_received`` first and only then the readers, one by one: a stamp taken by the reader is late by
    the readers woken before it (64 streams: ~3 ms at p99), a stamp taken here by the ``data_received`` calls before
    it (~10 µs each). ``arrivals``: (clock, the payload's byte count once fed) of the response being read."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.arrivals: list[tuple[int, int]] = []
        self._stamped: aiohttp.StreamReader | None = None

    def data_received(self, data: bytes) -> None:
        t = time.perf_counter_ns()
        before = self._payload  # the response's body reader; None before its headers and after its end
        super().data_received(data)
        payload = self._payload if self._payload is not None else before
        if data and payload is not None:
            if payload is not self._stamped:  # a new response on this kept-alive connection: a list of its own
                self._stamped, self.arrivals = payload, []
            if payload.total_bytes > (self.arrivals[-1][1] if self.arrivals else 0):  # body bytes, not headers alone
                self.arrivals.append((t, payload.total_bytes))

    def arrivals_of(self, payload: aiohttp.StreamReader) -> list[tuple[int, int]] | None:
        """The arrivals list of ``payload``'s response (appended to as its bytes come), None when it is not the
        one this connection reads."""
        return self.arrivals if payload is self._stamped else None


class _StampingConnector(aiohttp.TCPConnector):
    """aiohttp's TCP connector with :class:`_StampingHandler` as its connections' protocol."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # aiohttp's own factory makes a ResponseHandler: the subclass is one
        self._factory = functools.partial(_StampingHandler, loop=self._loop)  # type: ignore[assignment]


def stream_session(concurrency: int | None, timeout_s: float) -> aiohttp.ClientSession:
    """The connection pool streams go through: ``concurrency`` connections kept (None: no limit, an open loop's: a
    limit would queue requests in the client, unseen); a read that waits ``timeout_s`` fails the request."""
    connector = _StampingConnector(limit=concurrency or 0, limit_per_host=0, ttl_dns_cache=None)
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=min(timeout_s, 10.0), sock_read=timeout_s)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, auto_decompress=True)


async def stream_one(session: aiohttp.ClientSession, url: str, body: dict, headers: dict) -> Stream:
    """Send one streamed request; its raw facts, parsed (:func:`stream_reads`, then :func:`parsed`)."""
    s, reads = await stream_reads(session, url, body, headers)
    await asyncio.sleep(0)  # reads of other streams that arrived meanwhile are stamped before this one is parsed
    return parsed(s, reads)


async def stream_reads(session: aiohttp.ClientSession, url: str, body: dict,
                       headers: dict) -> tuple[Stream, list[tuple[int, bytes]]]:  # fmt: skip
    """Send one streamed request; its start and end, and every network read with its arrival (unparsed: see
    :func:`parsed`). RequestFailed for anything that went wrong with this request (an error status, a broken
    stream, a transport error); ServerUnreachable when no connection could be made."""
    s = Stream(start_ns=time.perf_counter_ns(), start_unix_ns=time.time_ns())
    reads: list[tuple[int, bytes]] = []  # (arrival, bytes) of every network read: the hot path, nothing more
    url, basic = _userinfo(url)
    if basic is not None:  # the URL's user and password are sent as Basic auth, over a key's header (as httpx did)
        headers = {**{k: v for k, v in headers.items() if k.lower() != "authorization"}, "Authorization": basic}
    try:
        async with session.post(url, json=body, headers=headers) as r:
            if r.status >= 400:
                raise RequestFailed(f"HTTP {r.status}: {_error_text(await r.read())}", r.status)
            ctype = r.headers.get("Content-Type", "")
            if "text/event-stream" not in ctype:
                if "json" in ctype or "html" in ctype:
                    raise RequestFailed(f"the server answered {ctype}, not an event stream")
                # a relay that drops or rewrites the type (text/plain, none): read the body as SSE anyway
                s.content_type = ctype or "no content-type"
            proto = r.connection.protocol if r.connection is not None else None
            s.arrivals = proto.arrivals_of(r.content) if isinstance(proto, _StampingHandler) else None
            append, clock = reads.append, time.perf_counter_ns
            async for data in r.content.iter_any():
                append((clock(), data))
    except aiohttp.ClientConnectorError as e:
        raise ServerUnreachable(f"cannot connect to {redact(url)}: {_reason(e)}") from None
    except (TimeoutError, aiohttp.ServerTimeoutError) as e:  # a read that waited --timeout: a stalled server
        raise RequestFailed(f"the stream broke off: ReadTimeout: nothing for {_reason(e) or 'the --timeout'}") from None
    except (aiohttp.ClientPayloadError, aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as e:
        raise RequestFailed(f"the stream broke off: {type(e).__name__}: {_reason(e)}") from None
    except (aiohttp.ClientError, UnicodeDecodeError) as e:  # a malformed response: its status line, headers
        raise RequestFailed(f"malformed stream: {type(e).__name__}: {_reason(e)}") from None
    s.end_ns = time.perf_counter_ns()
    return s, reads


def at_arrival(reads: list[tuple[int, bytes]], arrivals: list[tuple[int, int]]) -> list[tuple[int, bytes]]:
    """The reader's ``reads`` (its wake-up stamp, the bytes it took) cut where the network's reads ended, each piece
    stamped when the protocol received it (``arrivals``: clock, the body's byte count then; see
    :class:`_StampingHandler`). A reader that woke once for three reads gets three pieces with three stamps; bytes
    no arrival covers keep the reader's stamp. Never later than the reader's own stamp."""
    out: list[tuple[int, bytes]] = []
    k, start = 0, 0
    for woke, data in reads:
        end = start + len(data)
        while k < len(arrivals) and arrivals[k][1] <= start:
            k += 1  # arrivals of bytes this read does not hold (already cut off)
        cut = start
        while k < len(arrivals) and arrivals[k][1] <= end:
            t, upto = arrivals[k]
            if upto > cut:
                out.append((min(t, woke), data[cut - start : upto - start]))
                cut = upto
            k += 1
        if cut < end:
            out.append((woke, data[cut - start :]))
        start = end
    return out


def parsed(s: Stream, reads: list[tuple[int, bytes]]) -> Stream:
    """``s`` with the events of its reads (:func:`parse_reads`); RequestFailed for a malformed or empty stream."""
    parse_reads(s, at_arrival(reads, s.arrivals) if s.arrivals else reads)
    if not s.stamps_ns and not s.calls:
        raise RequestFailed("the stream carried no content")
    if s.calls and not all(c.name for c in s.calls.values()):
        raise RequestFailed("malformed stream: a tool call came without its function's name")
    return s


def _userinfo(url: str) -> tuple[str, str | None]:
    """``url`` without its user and password, and them as a Basic ``Authorization`` value (None: it has none)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url, None
    import base64
    from urllib.parse import unquote

    user, host = parts.netloc.rsplit("@", 1)
    name, _, password = user.partition(":")
    token = base64.b64encode(f"{unquote(name)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


class _Reads(httpx.SyncByteStream):
    """A stream's reads replayed to httpx-sse's parser; ``at``: the arrival of the read it last handed over."""

    def __init__(self, reads: list[tuple[int, bytes]]) -> None:
        self.reads, self.at = reads, 0

    def __iter__(self) -> Any:
        for at, data in self.reads:
            self.at = at
            yield data


def parse_reads(s: Stream, reads: list[tuple[int, bytes]]) -> None:
    """The events of a stream's reads into ``s``, after the stream: each stamped with the arrival of the read that
    completed it (its last line, so an event split over reads is stamped when it was whole). RequestFailed for a
    malformed stream or event."""
    replay = _Reads(reads)
    response = httpx.Response(200, headers={"content-type": "text/event-stream"}, stream=replay)
    try:
        for ev in EventSource(response).iter_sse():
            if ev.data == "[DONE]":
                break
            if ev.data:  # else a keep-alive or a comment
                _take(s, replay.at, ev.data)
    except (SSEError, UnicodeDecodeError, httpx.HTTPError) as e:
        raise RequestFailed(f"malformed stream: {type(e).__name__}: {_reason(e)}") from None


def _take(s: Stream, t: int, data: str) -> None:
    """One event's data into ``s``; RequestFailed for an event that is not a chat completion chunk."""
    try:
        chunk = json.loads(data)
    except json.JSONDecodeError:
        raise RequestFailed(f"malformed event (not JSON): {data[:80]!r}") from None
    if not isinstance(chunk, dict):
        raise RequestFailed(f"malformed event (not an object): {data[:80]!r}")
    if chunk.get("error"):
        raise RequestFailed(f"the server reported an error: {_error_text(chunk)}")
    usage, timing, choices = chunk.get("usage"), chunk.get("llmbench"), chunk.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise RequestFailed(f"malformed event (choices is not a list of objects): {data[:80]!r}")
    if isinstance(usage, dict) and usage:
        s.usage = usage
    if isinstance(timing, dict):
        s.timing = timing
    for choice in choices:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise RequestFailed(f"malformed event (delta is not an object): {data[:80]!r}")
        # reasoning (DeepSeek/vLLM "reasoning_content", OpenRouter/Ollama "reasoning") is stamped apart: TTFT is
        # the first *answer* text a user reads
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought and isinstance(thought, str):
            s.reasoning_ns.append(t)
        text = delta.get("content")
        if text and isinstance(text, str):  # a role-only first event (llama.cpp's server, vLLM) is not a token
            s.stamps_ns.append(t)
            s.pieces.append(text)
        calls = delta.get("tool_calls")
        if calls:
            _take_calls(s, t, choice.get("index", 0), calls, data)
        if choice.get("finish_reason") and s.finish_reason is None:
            s.finish_reason, s.finish_ns = str(choice["finish_reason"]), t


def _take_calls(s: Stream, t: int, choice: Any, calls: Any, data: str) -> None:
    """One event's ``delta.tool_calls`` into ``s.calls``; RequestFailed for a malformed one."""
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise RequestFailed(f"malformed event (tool_calls is not a list of objects): {data[:80]!r}")
    took = False
    for position, c in enumerate(calls):
        index, fn = c.get("index", position), c.get("function") or {}
        if isinstance(index, bool) or not isinstance(index, int) or not isinstance(fn, dict):
            raise RequestFailed(f"malformed event (a tool call's index or function): {data[:80]!r}")
        call = s.calls.setdefault((choice if isinstance(choice, int) else 0, index), Call())
        took = call.add(t, fn, c.get("id")) or took
    if took:
        s.tool_ns.append(t)


def _reason(e: Exception) -> str:
    """An exception's first line, its URLs redacted (httpx puts the request's URL, credentials and all, in some)."""
    text = scrub(str(e).strip()) or type(e).__name__
    return text.splitlines()[0][:200]


def _error_text(body: bytes | dict) -> str:
    try:
        data = json.loads(body) if isinstance(body, bytes) else body
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return " ".join(str(msg).split())[:200]
    except (ValueError, AttributeError):
        return " ".join(body.decode("utf-8", "replace").split())[:200] if isinstance(body, bytes) else str(body)


@dataclass
class Counts:
    """One request's token counts (see :meth:`TokenCounter.count`)."""

    prompt_tokens: int | None
    output_tokens: int  # what the metrics use
    source: str  # "usage" | "tokenizer" | "chunks"
    server: int | None  # usage's answer tokens
    client: int | None  # --tokenizer's count of the answer's text
    reasoning_tokens: int | None
    tool_call_tokens: int | None = None  # usage's completion tokens beyond the text (and reasoning): tool calls


class TokenCounter:
    """Counts output tokens: the server's usage when it sent one, else ``--tokenizer``, else content events.

    The tokenizer is loaded before the first request (never inside the measured loop), and only when named:
    without it the client never imports transformers and stays light.
    """

    def __init__(self, tokenizer_name: str | None) -> None:
        self.tok = None
        if tokenizer_name:
            from transformers import AutoTokenizer

            path = Path(tokenizer_name).expanduser()
            where, kw = (path.parent, {"gguf_file": path.name}) if path.suffix == ".gguf" else (tokenizer_name, {})
            try:
                self.tok = AutoTokenizer.from_pretrained(where, **kw)
            except Exception as e:  # transformers raises many types for a missing or broken tokenizer
                raise UserError(f"--tokenizer {tokenizer_name}: {_reason(e)}") from None

    @property
    def templated(self) -> bool:
        """Whether prompts are counted through the tokenizer's chat template (as a chat server applies one)."""
        return self.tok is not None and bool(getattr(self.tok, "chat_template", None))

    def count(self, s: Stream, messages: list[dict[str, str]]) -> Counts:
        """The prompt's and the answer's token counts, and where they came from. The answer's count is the
        server's usage when it sent one (less its reasoning tokens: TPOT spans the answer's events), else
        ``--tokenizer``'s count of the answer's text, else its content events. A tokenizer counts the prompt
        through its chat template when it has one (what the server tokenizes), else the messages' text. When
        both the server and a tokenizer counted, both are kept."""
        usage = s.usage or {}
        details = usage.get("completion_tokens_details")
        reasoning = details.get("reasoning_tokens") if isinstance(details, dict) else None
        reasoning = reasoning if isinstance(reasoning, int) else None
        server = usage.get("completion_tokens") if isinstance(usage.get("completion_tokens"), int) else None
        if server is not None and reasoning is not None:
            server -= reasoning
        elif server is not None and s.reasoning_ns:  # usage mixes thinking and answer: it can't count the answer
            server = None
        client = len(self.tok(s.text, add_special_tokens=False)["input_ids"]) if self.tok is not None else None
        prompt_tokens = usage.get("prompt_tokens") if isinstance(usage.get("prompt_tokens"), int) else None
        if s.calls and server is not None:  # usage counts text and tool calls together
            if not s.stamps_ns:  # tool calls alone: every completion token is theirs
                return Counts(prompt_tokens, 0, "usage", 0, client, reasoning, server)
            if client is None:  # text beside calls, no tokenizer to split them: the text's events
                return Counts(prompt_tokens, len(s.stamps_ns), "chunks", None, None, reasoning)
            return Counts(prompt_tokens, client, "tokenizer", None, client, reasoning, max(server - client, 0))
        if server is not None:
            return Counts(prompt_tokens, server, "usage", server, client, reasoning)
        if client is not None:
            prompt_tokens = prompt_tokens if prompt_tokens is not None else self.prompt_tokens(messages)
            # no usage: the calls' names and arguments as --tokenizer counts them (the template's wrapping not)
            tool = sum(self.text_tokens(c.name + c.arguments) for c in s.calls.values()) if s.calls else None
            return Counts(prompt_tokens, client, "tokenizer", None, client, reasoning, tool)
        return Counts(prompt_tokens, len(s.stamps_ns), "chunks", None, None, reasoning)

    def counter_of(self, system_prompt: str | None) -> Callable[[str], int]:
        """A prompt's ``prompt_tokens`` as a request of it will have them (system prompt and template included)."""
        messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
        return lambda text: self.prompt_tokens([*messages, {"role": "user", "content": text}])

    def text_tokens(self, text: str) -> int:
        """Tokens of ``text`` alone (no template, no special tokens): a reply's length."""
        assert self.tok is not None
        return len(self.tok(text, add_special_tokens=False)["input_ids"])

    def prompt_tokens(self, messages: list[dict[str, str]]) -> int:
        """The tokenizer's count of ``messages``: through its chat template when it has one, else their text."""
        assert self.tok is not None
        if self.templated:
            text = self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        else:
            text = "\n\n".join(m["content"] for m in messages)
        return len(self.tok(text, add_special_tokens=False)["input_ids"])


async def probe_server(url: str, headers: dict, timeout: float = 5.0) -> tuple[dict | None, str | None]:
    """(GET /health if it answers with JSON, the first model of GET /v1/models); each asked on its own, so a
    slow or missing /health does not hide the model list. ServerUnreachable when nothing answers at all."""
    root = _root(url)
    async with httpx.AsyncClient(timeout=timeout, headers=headers) as c:
        health = await _get_json(c, f"{root}/health", url)
        models = await _get_json(c, f"{root}/v1/models", url)
    data = models.get("data") if isinstance(models, dict) else None
    model = data[0].get("id") if isinstance(data, list) and data and isinstance(data[0], dict) else None
    return (health if isinstance(health, dict) else None), (model if isinstance(model, str) else None)


async def _get_json(c: httpx.AsyncClient, where: str, url: str) -> Any:
    try:
        r = await c.get(where)
        return r.json() if r.status_code == 200 and "json" in r.headers.get("content-type", "") else None
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise ServerUnreachable(f"cannot connect to {redact(url)}: {_reason(e)} (is the server running?)") from None
    except (httpx.HTTPError, ValueError):
        return None


def cached_tokens(usage: dict | None) -> int | None:
    """The prompt tokens a server's prefix cache served, from its usage (``prompt_tokens_details.cached_tokens``,
    OpenAI's field, sent by vLLM and SGLang); None when it does not say."""
    details = (usage or {}).get("prompt_tokens_details")
    n = details.get("cached_tokens") if isinstance(details, dict) else None
    return n if isinstance(n, int) and not isinstance(n, bool) and n >= 0 else None
