"""``llmbench run --endpoint URL``: the same prompts through an OpenAI-compatible server, stamped on arrival.

One process, one event loop (httpx + httpx-sse): a stamp is one clock read when the SSE parser hands over an
event, and nothing else runs per event but a ``json.loads``, so the client costs the server it shares a
machine with almost nothing (its own CPU time is recorded in ``client``). No torch is imported here.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
from httpx_sse import SSEError, aconnect_sse

from llmbench import envinfo, machine
from llmbench.errors import RunInterrupted, UserError
from llmbench.prompts import PromptSet
from llmbench.results import (
    ENDPOINT_METRIC_FORMULAS,
    ClientStats,
    EndpointConfig,
    FailedRequest,
    MachineState,
    RequestResult,
    Run,
    RunConfig,
    RunWriter,
    Session,
    journal_path,
    new_run_record,
    save_run,
)
from llmbench.stats import summarize

_NS_PER_MS = 1_000_000


@dataclass
class EndpointOptions:
    """Where the requests go and how; the prompt-side options are the run's :class:`RunOptions`."""

    url: str
    model: str | None = None  # the name sent as "model"; None: ask GET /v1/models
    api_key_env: str | None = None
    concurrency: int = 1
    timeout_s: float = 600.0
    tokenizer: str | None = None  # hub id or folder, to count tokens when the server sends no usage


class RequestFailed(Exception):
    """One request went wrong on the server's side or in its stream; ``status`` is the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class ServerUnreachable(Exception):
    """Connecting failed: nothing else can go on."""


def chat_url(url: str) -> str:
    """``http://host:port[/v1][/chat/completions]`` -> the chat completions URL. UserError if not http(s)."""
    u = urlsplit(url.strip())
    if u.scheme not in ("http", "https") or not u.netloc:
        raise UserError(f"--endpoint '{url}' is not an http(s) URL, e.g. http://127.0.0.1:8000/v1")
    path = u.path.rstrip("/")
    if not path.endswith("/chat/completions"):
        path = (path if path.endswith("/v1") else f"{path}/v1") + "/chat/completions"
    return urlunsplit((u.scheme, u.netloc, path, u.query, ""))


def redact(url: str) -> str:
    """The URL without user:password and query (where keys sometimes travel): safe to write into a JSON."""
    u = urlsplit(url)
    host = u.hostname or ""
    netloc = f"[{host}]" if ":" in host else host
    if u.port:
        netloc += f":{u.port}"
    return urlunsplit((u.scheme, netloc, u.path, "", ""))


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


def _body(model: str | None, prompt: str, o, max_new_tokens: int) -> dict[str, Any]:
    messages = []
    if o.system_prompt:
        messages.append({"role": "system", "content": o.system_prompt})
    messages.append({"role": "user", "content": prompt})
    body: dict[str, Any] = {
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
        **request_extra(o, max_new_tokens),
    }
    if model:
        body["model"] = model
    return body


def request_extra(o, max_new_tokens: int) -> dict[str, Any]:
    """The generation fields of each request body (recorded in ``config.endpoint.request_extra``)."""
    extra: dict[str, Any] = {"max_tokens": max_new_tokens}
    if o.sample:
        extra.update(temperature=o.temperature, top_p=o.top_p, seed=o.seed)
    else:
        extra["temperature"] = 0.0  # greedy, as the in-process runs
    if o.ignore_eos:
        extra["ignore_eos"] = True  # vLLM's and llama.cpp's extension; OpenAI's own API refuses it
    return extra


async def stream_one(client: httpx.AsyncClient, url: str, body: dict, headers: dict) -> dict[str, Any]:
    """Send one streamed request; the raw facts: start, content-event stamps, text, usage, server timing."""
    stamps: list[int] = []
    pieces: list[str] = []
    usage = timing = odd_type = None
    start = time.perf_counter_ns()
    try:
        async with aconnect_sse(client, "POST", url, json=body, headers=headers) as es:
            r = es.response
            if r.status_code >= 400:
                raise RequestFailed(f"HTTP {r.status_code}: {_error_text(await r.aread())}", r.status_code)
            ctype = r.headers.get("content-type", "")
            if "text/event-stream" not in ctype:
                if "json" in ctype or "html" in ctype:
                    raise RequestFailed(f"the server answered {ctype}, not an event stream")
                # a relay that drops or rewrites the type (text/plain, none): read the body as SSE anyway
                r.headers["content-type"] = "text/event-stream"
                odd_type = ctype or "no content-type"
            async for ev in es.aiter_sse():
                t = time.perf_counter_ns()
                data = ev.data
                if data == "[DONE]":
                    break
                if not data:
                    continue  # keep-alive or a comment
                try:
                    chunk = json.loads(data)
                except json.JSONDecodeError:
                    raise RequestFailed(f"malformed event (not JSON): {data[:80]!r}") from None
                if not isinstance(chunk, dict):
                    raise RequestFailed(f"malformed event (not an object): {data[:80]!r}")
                if chunk.get("error"):
                    raise RequestFailed(f"the server reported an error: {_error_text(chunk)}")
                if chunk.get("usage"):
                    usage = chunk["usage"]
                if isinstance(chunk.get("llmbench"), dict):
                    timing = chunk["llmbench"]
                for choice in chunk.get("choices") or ():
                    delta = (choice or {}).get("delta") or {}
                    text = delta.get("content") or delta.get("reasoning_content")
                    if text:  # a role-only first event (llama.cpp's server, vLLM) is not a token
                        stamps.append(t)
                        pieces.append(text)
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise ServerUnreachable(f"cannot connect to {redact(url)}: {_reason(e)}") from None
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ReadTimeout) as e:
        raise RequestFailed(f"the stream broke off: {_reason(e)}") from None
    except SSEError as e:
        raise RequestFailed(f"malformed stream: {e}") from None
    return {"start": start, "end": time.perf_counter_ns(), "stamps": stamps, "text": "".join(pieces),
            "usage": usage, "timing": timing, "content_type": odd_type}  # fmt: skip


def _reason(e: Exception) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0][:200]


def _error_text(body: bytes | dict) -> str:
    try:
        data = json.loads(body) if isinstance(body, bytes) else body
        err = data.get("error", data) if isinstance(data, dict) else data
        msg = err.get("message", err) if isinstance(err, dict) else err
        return " ".join(str(msg).split())[:200]
    except (ValueError, AttributeError):
        return " ".join(body.decode("utf-8", "replace").split())[:200] if isinstance(body, bytes) else str(body)


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

    def count(self, raw: dict, prompt: str) -> tuple[int, int, str]:
        """(prompt_tokens, output_tokens, where output_tokens came from)."""
        usage = raw["usage"] or {}
        if isinstance(usage.get("completion_tokens"), int):
            return int(usage.get("prompt_tokens") or 0), usage["completion_tokens"], "usage"
        tok = self.tok
        if tok is not None:
            n_prompt = len(tok(prompt, add_special_tokens=False)["input_ids"])
            return n_prompt, len(tok(raw["text"], add_special_tokens=False)["input_ids"]), "tokenizer"
        return 0, len(raw["stamps"]), "chunks"


def to_result(raw: dict, prompt_index: int, repeat: int, started_s: float, counts: tuple[int, int, str]):
    """One request's metrics from raw stamps, by ENDPOINT_METRIC_FORMULAS."""
    start = raw["start"]
    times = [round((t - start) / _NS_PER_MS, 3) for t in raw["stamps"]]
    prompt_tokens, n, source = counts
    if not times:
        raise RequestFailed("the stream carried no content")
    n = max(n, 1)
    tpot = round((times[-1] - times[0]) / (n - 1), 4) if n >= 2 and len(times) >= 2 else None
    timing = raw["timing"] or {}
    return RequestResult(
        prompt_index=prompt_index,
        repeat=repeat,
        prompt_tokens=prompt_tokens,
        output_tokens=n,
        tokenize_ms=0.0,
        ttft_ms=times[0],
        tpot_ms=tpot,
        e2e_ms=times[-1],
        token_times_ms=times,
        output_token_ids_sha256=hashlib.sha256(raw["text"].encode("utf-8")).hexdigest(),  # of the text here
        output_text=raw["text"],
        started_s=round(started_s, 6),
        chunks=len(times),
        tokens_from=source,
        stream_end_ms=round((raw["end"] - start) / _NS_PER_MS, 3),
        server_ttft_ms=timing.get("ttft_ms"),
        server_queue_ms=timing.get("queue_ms"),
    )


def probe_server(url: str, headers: dict, timeout: float = 5.0) -> tuple[dict | None, str | None]:
    """(GET /health if it answers with JSON, the first model of GET /v1/models). UserError if unreachable."""
    root = _root(url)
    health = model = None
    try:
        with httpx.Client(timeout=timeout, headers=headers) as c:
            try:
                r = c.get(f"{root}/health")
                if r.status_code == 200 and "json" in r.headers.get("content-type", ""):
                    data = r.json()
                    health = data if isinstance(data, dict) else None
            except ValueError:
                pass
            try:
                r = c.get(f"{root}/v1/models")
                if r.status_code == 200:
                    data = r.json().get("data") or []
                    model = data[0].get("id") if data and isinstance(data[0], dict) else None
            except (ValueError, AttributeError):
                pass
    except (httpx.ConnectError, httpx.ConnectTimeout) as e:
        raise UserError(f"cannot connect to {redact(url)}: {_reason(e)} (is the server running?)") from None
    except httpx.HTTPError:
        pass
    return health, model


class EndpointBenchmark:
    """Sends the prompts to an endpoint, ``concurrency`` at a time, and records one request per (prompt, repeat)."""

    def __init__(self, endpoint: EndpointOptions, options) -> None:
        options.validate()
        if endpoint.concurrency < 1:
            raise UserError(f"--concurrency must be at least 1, not {endpoint.concurrency}")
        self.endpoint = endpoint
        self.options = options
        self.url = chat_url(endpoint.url)
        self.headers = api_headers(endpoint.api_key_env)
        self.health, listed = probe_server(self.url, self.headers)
        self.model = endpoint.model or listed or (self.health or {}).get("model")
        self.counter = TokenCounter(endpoint.tokenizer)
        self.odd_content_types: set[str] = set()  # streams that came without text/event-stream

    def new_run(self, prompts: PromptSet) -> Run:
        o, h = self.options, self.health or {}
        weights = h.get("weights") if h.get("weights") in ("pretrained", "random") else "unknown"
        config = RunConfig(
            mode="endpoint",
            model=self.model or "unknown",
            model_source="endpoint",
            weights=weights,
            device=str(h.get("device") or "endpoint"),
            dtype=str(h.get("dtype") or "unknown"),
            dtype_reason="reported by the server" if h.get("dtype") else "",
            threads=h.get("threads") if isinstance(h.get("threads"), int) else None,
            chat_template=True,  # the server applies its own
            **o.config_fields(prompts),
            endpoint=EndpointConfig(
                url=redact(self.url),
                api_key_env=self.endpoint.api_key_env,
                concurrency=self.endpoint.concurrency,
                server=self.health,
                request_extra=request_extra(o, o.max_new_tokens),
            ),
        )
        return new_run_record(config, envinfo.collect("cpu"), metrics=ENDPOINT_METRIC_FORMULAS)

    async def _one(self, client, prompts: PromptSet, i: int, rep: int, t0: float) -> RequestResult:
        started = time.perf_counter() - t0
        prompt = prompts.prompts[i]
        raw = await stream_one(client, self.url, _body(self.model, prompt, self.options, self.options.max_new_tokens),
                               self.headers)  # fmt: skip
        if raw["content_type"]:
            self.odd_content_types.add(raw["content_type"])
        return to_result(raw, i, rep, started, self.counter.count(raw, prompt))

    def run(
        self,
        prompts: PromptSet,
        output: Path,
        *,
        on_request: Callable[[RequestResult, int, int], None] | None = None,
        on_warmup: Callable[[int, int], None] | None = None,
    ) -> Run:
        """Warm up (one at a time), then every (repeat, prompt) with ``concurrency`` in flight; save after each.

        A request that fails before any has succeeded ends the run with a UserError (the setup is wrong, not
        one request); after that, failures are recorded in ``failed_requests`` and the rest go on. Losing the
        connection ends the run, keeping what finished. SIGINT/SIGTERM: in-flight requests are dropped, the
        finished ones saved, :class:`~llmbench.errors.RunInterrupted` raised.
        """
        run = self.new_run(prompts)
        run.sessions.append(Session(started_at=run.created_at, environment=run.environment))
        state = {"signal": None, "error": None}
        try:
            asyncio.run(self._main(prompts, output, run, state, on_request, on_warmup))
        except KeyboardInterrupt:
            state["signal"] = state["signal"] or "SIGINT"
        run.summary = summarize(run.requests)  # once: every path below saves the run with it
        if run.summary is not None:
            run.summary.failed_requests = len(run.failed_requests)
        if state["signal"]:
            run.sessions[0].interrupted_by = state["signal"]
            self._finish(run, output)
            raise RunInterrupted(run, output, state["signal"])
        if state["error"] is not None:
            if run.requests or run.failed_requests:
                self._finish(run, output)
                raise UserError(f"{state['error']}; the {len(run.requests)} finished requests are in {output}")
            raise UserError(str(state["error"]))
        total = len(prompts.prompts) * self.options.repeats
        if run.failed_requests and not run.requests:
            self._finish(run, output)
            raise UserError(
                f"every request failed (first: {run.failed_requests[0].error}); they are listed in {output}"
            )
        run.complete = len(run.requests) + len(run.failed_requests) == total
        n_failed = len(run.failed_requests)
        if n_failed:
            run.warnings.append(f"{n_failed} of {total} requests failed (failed_requests): the summary omits them")
        if run.summary and run.summary.stream_buffered:
            run.warnings.append(buffered_warning(run))
        if self.odd_content_types:
            run.warnings.append(
                f"the stream came as {', '.join(sorted(self.odd_content_types))}, not text/event-stream; it was "
                "read as SSE (a proxy in between rewrote it?)"
            )
        if any(r.tokens_from == "chunks" for r in run.requests):
            run.warnings.append(
                "the server sent no usage: output_tokens counts content events, so TPOT is per event (pass "
                "--tokenizer NAME, a hub id or folder, to count tokens)"
            )
        self._finish(run, output)
        return run

    @staticmethod
    def _finish(run: Run, output: Path) -> None:
        """The final JSON; the journal goes."""
        save_run(run, output)
        journal_path(output).unlink(missing_ok=True)

    async def _main(self, prompts, output, run, state, on_request, on_warmup) -> None:
        loop = asyncio.get_running_loop()
        tasks: set[asyncio.Task] = set()

        def stop(signame: str) -> None:
            if state["signal"] is not None:
                raise KeyboardInterrupt
            state["signal"] = signame
            for t in tasks:
                t.cancel()

        # signal handlers belong to the main thread (elsewhere, e.g. a library caller's thread, none are set)
        handled = (signal.SIGINT, signal.SIGTERM) if threading.current_thread() is threading.main_thread() else ()
        for sig in handled:
            loop.add_signal_handler(sig, stop, sig.name)
        try:
            await self._measure(prompts, output, run, state, on_request, on_warmup, tasks)
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)

    async def _measure(self, prompts, output, run, state, on_request, on_warmup, tasks: set) -> None:
        loop = asyncio.get_running_loop()
        limits = httpx.Limits(
            max_connections=self.endpoint.concurrency, max_keepalive_connections=self.endpoint.concurrency
        )
        timeout = httpx.Timeout(self.endpoint.timeout_s, connect=10.0)
        async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
            n = len(prompts.prompts)
            for w in range(self.options.warmup):
                if state["signal"]:
                    return
                try:
                    # from the list's end: a server's prefix cache (llama.cpp, vLLM) must not hand the first
                    # measured request a prefill it already did
                    i = n - 1 - w % n
                    task = asyncio.ensure_future(self._one(client, prompts, i, -1 - w // n, time.perf_counter()))
                    tasks.add(task)
                    run.warmup_requests.append(await task)
                except asyncio.CancelledError:
                    return
                except (RequestFailed, ServerUnreachable) as e:
                    state["error"] = f"warm-up request failed: {e}"
                    return
                finally:
                    tasks.clear()
                if on_warmup:
                    on_warmup(w + 1, self.options.warmup)
            writer: list[RunWriter] = []  # made at the first success: a run that fails at once writes nothing
            disk = ThreadPoolExecutor(1, thread_name_prefix="llmbench-write")  # one writer: saves stay in order
            sampler = machine.Sampler()
            sampler.start()
            todo = [(i, rep) for rep in range(self.options.repeats) for i in range(n)]
            total = len(todo)
            queue: asyncio.Queue = asyncio.Queue()
            for item in todo:
                queue.put_nowait(item)
            t0 = time.perf_counter()
            cpu0 = time.process_time()

            async def worker() -> None:
                while not queue.empty() and not state["signal"] and state["error"] is None:
                    i, rep = queue.get_nowait()
                    started = time.perf_counter() - t0
                    try:
                        result = await self._one(client, prompts, i, rep, t0)
                    except ServerUnreachable as e:
                        state["error"] = str(e)
                        return
                    except RequestFailed as e:
                        # before any success a failure means a wrong setup, except 429: a busy server
                        # (--concurrency above its queue) is a finding, recorded like any later failure
                        if e.status != 429 and not run.requests and not run.failed_requests:
                            state["error"] = f"the first request failed: {e}"
                            return
                        run.failed_requests.append(
                            FailedRequest(
                                prompt_index=i, repeat=rep, error=str(e), status=e.status, started_s=round(started, 6)
                            )
                        )
                        continue
                    run.requests.append(result)
                    # the write (an fsync) runs off the event loop: other streams' events are stamped meanwhile
                    if writer:
                        await loop.run_in_executor(disk, writer[0].add, run, result)
                    else:
                        writer.append(await loop.run_in_executor(disk, RunWriter, output, run))
                    if on_request:
                        on_request(result, len(run.requests), total)

            try:
                for _ in range(min(self.endpoint.concurrency, total)):
                    t = asyncio.ensure_future(worker())
                    tasks.add(t)
                await asyncio.gather(*tasks, return_exceptions=True)
            finally:
                disk.shutdown(wait=True)
                wall = time.perf_counter() - t0
                cpu = time.process_time() - cpu0
                sampler.stop()
                events = sum(r.chunks or 0 for r in run.requests)
                run.client = ClientStats(
                    cpu_s=round(cpu, 4),
                    wall_s=round(wall, 4),
                    cpu_pct_of_one_core=round(100 * cpu / wall, 2) if wall > 0 else 0.0,
                    cpu_ms_per_event=round(1000 * cpu / events, 4) if events else None,
                )
                run.machine = MachineState(summary=sampler.summary(), samples=list(sampler.samples))


def buffered_warning(run: Run) -> str:
    """The terminal's words for a buffered stream, with the figures."""
    s = run.summary
    share = f"{100 * (s.stream_gaps_under_1ms_share or 0):.0f}%"
    return (
        f"the stream is buffered between server and client: {share} of the gaps between events were under 1 ms "
        f"and up to {s.stream_largest_burst} events arrived together ({s.stream_buffered_requests} of "
        f"{s.requests} requests); TTFT then includes the buffering and TPOT/ITL do not show decoding "
        "(a proxy with buffering on? nginx: proxy_buffering off or X-Accel-Buffering: no)"
    )
