"""An OpenAI-compatible server, streamed over SSE: the same run JSON, measured on the client's clock.

No torch is imported here: the client process stays light, and its own CPU time is recorded (``client``)
because it shares the machine with a co-located server.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Hashable
from concurrent.futures import ThreadPoolExecutor
from itertools import accumulate
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from llmbench.backends import Request
from llmbench.backends.boot import BootedServer
from llmbench.backends.http.client import (
    Stream,
    TokenCounter,
    api_headers,
    cached_tokens,
    chat_url,
    parsed,
    probe_server,
    redact,
    request_body,
    request_extra,
    stream_reads,
    stream_session,
)
from llmbench.core.errors import BackendUnavailable, RequestFailed, UserError
from llmbench.core.process import Stop
from llmbench.core.redact import mask, url_secrets
from llmbench.machine import envinfo
from llmbench.machine import probe as machine
from llmbench.machine.telemetry import thread_sched
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.client import behind_warning, client_record, server_sends
from llmbench.results.metrics import request_result, text_sha256
from llmbench.results.schema import (
    ENDPOINT_METRIC_FORMULAS,
    Arrival,
    EndpointConfig,
    Probe,
    RequestResult,
    Run,
    RunConfig,
    new_run_record,
)
from llmbench.workloads import tools
from llmbench.workloads.arrivals import plan_arrivals, trace_arrivals
from llmbench.workloads.prompts import PromptSet
from llmbench.workloads.tools import Ask

_NS_PER_MS = 1_000_000


class EndpointBackend:
    """Streams each request to ``endpoint``; ``concurrency`` of them may be in flight (the loop's workers)."""

    cancel_on_stop = True  # an HTTP stream can be dropped at once: the first stop cancels requests in flight
    speaks_tools = True  # sends a workload's tools and response format, and reads tool calls (workloads.tools)

    def __init__(self, endpoint: EndpointOptions, options: RunOptions, *, label: str = "") -> None:
        options.check()
        endpoint.check()
        if options.lever is not None:
            raise UserError("--speculative and --prefix-cache are levers of a model in this process; a server's own "
                            "(vLLM's --speculative-config, its prefix caching) are its configuration")  # fmt: skip
        self.endpoint = endpoint
        self.options = options
        self.label = label
        self.url = chat_url(endpoint.endpoint)
        self.headers = api_headers(endpoint.api_key_env)
        # what a server's error body may quote back (the key, the URL's password or token): masked in failures
        self.secrets = [*url_secrets(endpoint.endpoint), *url_secrets(endpoint.metrics_url or ""),
                        self.headers.get("Authorization", "").removeprefix("Bearer ")]  # fmt: skip
        self.health: dict | None = None
        self.model: str | None = endpoint.model
        self.counter: TokenCounter | None = None
        self.client: aiohttp.ClientSession | None = None
        self.odd_content_types: set[str] = set()  # streams that came without text/event-stream
        self.probing = True  # False: leave the calibration probe to another client process (--workers)
        self.arrival: Arrival | None = None  # an open loop's schedule: its record and due times (seconds)
        self.offsets: list[float] = []
        if (ol := endpoint.open_loop) is not None and ol.replay is not None:
            self.arrival, self.offsets = trace_arrivals(ol.replay)
        elif ol is not None and ol.rate is not None:  # (an open loop has one); drawn from the requests' --seed
            self.arrival, self.offsets = plan_arrivals(ol.rate, ol.arrival, requests=ol.requests,
                                                       duration_s=ol.duration_s, seed=options.seed)  # fmt: skip
        self._cpu0: float | None = None
        self._t0 = 0.0
        self.scraper: Any = None  # --server-metrics: a servermetrics.Scraper over the measured window
        # --server-command: the server this run starts (the driver boots and stops it), measured to its first token
        self.server: BootedServer | None = None
        self._first_cost: tuple[float, float] | None = None  # its first request's CPU and wall seconds
        # the client's CPU and wall seconds when the window closed: the probe after it is not the client's cost
        self._window_cost: tuple[float, float] | None = None
        # the event loop thread's wait for a CPU: its schedstat when the window opened, then (ms, runs) over it
        self._sched0: tuple[int, int] | None = None
        self._sched: tuple[float, int] | None = None
        self.loop_lags: list[float] = []  # ms: how late the event loop woke from each LOOP_TICK_S sleep
        # one thread parses and counts finished streams, off the event loop that stamps the others' reads
        self._parser = ThreadPoolExecutor(1, thread_name_prefix="llmbench-parse")
        self._switch: float | None = None  # the interpreter's switch interval before start() shortened it
        self._watch: asyncio.Task[None] | None = None
        self._constraints: set[str] = set()  # what a server compiles, sent by a request of this run (warm-ups too)
        if endpoint.server_command is not None:
            self.server = BootedServer(endpoint.server_argv(), endpoint.endpoint, self.headers, endpoint.boot_timeout_s)

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        o = self.options
        return {
            "mode": "endpoint",
            "max_new_tokens": o.max_new_tokens,
            "ignore_eos": o.ignore_eos,
            "repeats": o.repeats,
            "prompt_sha256": prompts.sha256,
            "system_prompt": o.system_prompt,
            "endpoint": {"url": redact(self.url), "concurrency": self.endpoint.concurrency,
                         "request_extra": request_extra(o),
                         "arrival": self.arrival.model_dump() if self.arrival else None},
        }  # fmt: skip

    async def counting(self, what: str = "--synthetic") -> tuple[Callable[[str], int], Any]:
        """How ``--tokenizer`` counts a prompt's tokens (with its chat template), and the tokenizer: the server's
        own count (usage) is what the run records, so use the server's tokenizer. ``what``: the option that
        needs it, for the error without one."""
        if not self.endpoint.tokenizer:
            raise UserError(f"{what} with --endpoint needs --tokenizer (the server's, to count prompt tokens)")
        counter = self.counter = self.counter or TokenCounter(self.endpoint.tokenizer)
        return counter.counter_of(self.options.system_prompt), counter.tok

    async def start(self, prompts: PromptSet) -> None:
        """Ask the server what it serves (GET /health, /v1/models); load ``--tokenizer`` before any request."""
        if prompts.asks is not None:
            # a tool workload's checks (jsonschema) and its summary's shares (scipy.stats, 0.5 s) imported now: the
            # first snapshot's summary imported scipy inside an agent task's tool wait (490 ms against 200 set)
            import jsonschema  # noqa: F401
            import scipy.stats  # noqa: F401
        try:
            self.health, listed = await probe_server(self.url, self.headers)
        except BackendUnavailable as e:  # before any request: the setup is wrong, one line
            raise UserError(f"{self.label}{e}") from None
        self.model = self.endpoint.model or listed or (self.health or {}).get("model")
        if self.endpoint.metrics_url is not None and self.scraper is None:
            from llmbench.backends.http.servermetrics import Scraper

            self.scraper = Scraper(self.endpoint.metrics_url, self.endpoint.metrics_interval_s)
            await asyncio.to_thread(self.scraper.check)  # a wrong URL stops the run here, in one line
        self.counter = self.counter or TokenCounter(self.endpoint.tokenizer)
        # an open loop has no limit in flight: a pool limit would queue requests in the client, unseen
        c = None if self.endpoint.open_loop else self.endpoint.concurrency
        self.client = stream_session(c, self.endpoint.timeout_s)
        # the parser thread holds the GIL at most this long when the event loop wants it back for a read (default
        # 5 ms: a read waited that long behind a parse); restored at close
        if (before := sys.getswitchinterval()) != SWITCH_S:  # another backend of this process set it already
            self._switch = before
            sys.setswitchinterval(SWITCH_S)

    def new_run(self, prompts: PromptSet) -> Run:
        o, h = self.options, self.health or {}
        weights = h.get("weights") if h.get("weights") in ("pretrained", "random") else "unknown"
        config = RunConfig(
            mode="endpoint",
            model=self.model or "unknown",
            model_source="endpoint",
            weights=weights,  # type: ignore[arg-type]
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
                request_extra=request_extra(o),
                arrival=self.arrival,
                workers=self.endpoint.processes,
            ),
        )
        return new_run_record(config, envinfo.collect("cpu"), metrics=ENDPOINT_METRIC_FORMULAS)

    async def activate(self) -> None:
        pass

    async def measure(self, request: Request, stop: Stop, started_s: float) -> RequestResult | None:
        assert self.client is not None and self.counter is not None, "start() first"
        if request.repeat >= 0 and self._cpu0 is None:  # the client's own cost counts from the first measured one
            self._cpu0, self._t0 = time.process_time(), time.perf_counter()
        seed = self.options.request_seed(request.prompt_index, request.repeat)
        body = request_body(self.model, request.prompt, self.options, seed, request.messages, request.ask,
                            request.tool_result is not None)  # fmt: skip
        constraint = request.ask.constraint_sha256() if request.ask is not None else None
        first_use = constraint is not None and constraint not in self._constraints
        if constraint is not None:
            self._constraints.add(constraint)
        if request.max_new_tokens is not None:  # a dataset's own output length (ignore_eos is sent then)
            body["max_tokens"] = request.max_new_tokens
        try:
            s, reads = await stream_reads(self.client, self.url, body, self.headers)
            # parsed and counted on a thread of its own: this loop goes on stamping the other streams' reads
            s, result = await asyncio.get_running_loop().run_in_executor(self._parser, self._result, request, body,
                                                                         s, reads, started_s)  # fmt: skip
        except RequestFailed as e:  # recorded in failed_requests: nothing it quotes may be a secret
            raise RequestFailed(mask(str(e), self.secrets), e.status) from None
        if s.content_type:
            self.odd_content_types.add(s.content_type)
        # --server-command: the loop sends the server's first request before the warm-up
        if self.server is not None and self.server.first is None and request.repeat >= 0 and self._cpu0 is not None:
            first = result.ttft_ms if result.ttft_ms is not None else result.tool_name_ms
            self.server.note_first(request.prompt_index, request.repeat, s.start_ns, first or result.e2e_ms)
            self._first_cost = (time.process_time() - self._cpu0, time.perf_counter() - self._t0)
        if s.reasoning_ns:
            result.ttfrt_ms = round((s.reasoning_ns[0] - s.start_ns) / _NS_PER_MS, 3)
            result.reasoning_events = len(s.reasoning_ns)
        if request.due_ns is not None:  # open loop: how late the client sent it, and what an on-time user waited
            late = round((s.start_ns - request.due_ns) / _NS_PER_MS, 3)
            result.scheduled_s = request.scheduled_s
            result.send_lateness_ms = late
            result.ttft_from_schedule_ms = round(result.ttft_ms + late, 3) if result.ttft_ms is not None else None
            result.e2e_from_schedule_ms = round(result.e2e_ms + late, 3)
        if constraint is not None:
            result.constraint_sha256, result.constraint_first_use = constraint, first_use
        return result

    def _result(self, request: Request, body: dict, s: Stream, reads: list[tuple[int, bytes]],
                started_s: float) -> tuple[Stream, RequestResult]:  # fmt: skip
        """A stream's request record, from its reads (on the parser thread)."""
        assert self.counter is not None
        s = parsed(s, reads)
        c = self.counter.count(s, body["messages"])
        timing = s.timing or {}
        # an end-of-sequence token has no text but usage counts it: its finishing event stamps it
        eos = (s.finish_reason == "stop" and c.source == "usage" and s.finish_ns and s.stamps_ns and not s.calls
               and s.finish_ns > s.stamps_ns[-1])  # fmt: skip
        result = request_result(
            prompt_index=request.prompt_index,
            repeat=request.repeat,
            start_ns=s.start_ns,
            stamps_ns=s.stamps_ns,
            prompt_tokens=c.prompt_tokens,
            output_tokens=max(c.output_tokens, 1) if s.stamps_ns else 0,  # tool calls alone: no text tokens
            last_token_ns=s.finish_ns if eos else None,
            output_sha256=text_sha256(s.text),  # endpoint runs receive text, not token ids
            output_text=s.text,
            started_s=started_s,
            chunks=len(s.stamps_ns),
            tokens_from=c.source,
            stream_end_ms=round((s.end_ns - s.start_ns) / _NS_PER_MS, 3),
            server_ttft_ms=timing.get("ttft_ms"),
            server_queue_ms=timing.get("queue_ms"),
            output_tokens_server=c.server if c.client is not None else None,
            output_tokens_client=c.client if c.server is not None else None,
            reasoning_tokens=c.reasoning_tokens,
            cached_tokens=cached_tokens(s.usage),
            text_offsets=list(accumulate(len(piece) for piece in s.pieces)),  # each event's text's end
            server_send_ms=server_sends(timing, s.start_unix_ns, len(s.stamps_ns)),
            answered_ns=s.answered_ns,
            tool_call_tokens=c.tool_call_tokens,
            **answer_checks(request.ask, s),
        )
        return s, result

    def probe_key(self) -> Hashable | None:
        # The client's machine is the server's only when the server is on loopback: then the probe says
        # whether that machine got slower. Against a remote server it would say nothing about the server.
        host = urlsplit(self.url).hostname or ""
        local = host in ("localhost", "::1") or host.startswith("127.")
        return ("numpy",) if local and self.probing else None

    async def probe(self) -> Probe:
        return machine.probe_numpy()

    def window_start(self) -> None:
        """The measured window opens: the server's metrics are scraped from now (--server-metrics); the client's
        own cost counts its first request (--server-command: sent before the warm-up) and the window, not the
        warm-up between them."""
        if self.scraper is not None:
            self.scraper.start()
        self._watch = asyncio.get_running_loop().create_task(self._watch_loop())
        self._sched0 = thread_sched()  # this is the loop's thread
        if self._first_cost is not None:
            cpu, wall = self._first_cost
            self._cpu0, self._t0 = time.process_time() - cpu, time.perf_counter() - wall

    async def _watch_loop(self) -> None:
        """The event loop's own lag over the measured window: how late it wakes from a short sleep (a loop busy
        parsing or stamping other streams reads every stream late)."""
        loop = asyncio.get_running_loop()
        while True:
            t = loop.time()
            await asyncio.sleep(LOOP_TICK_S)
            self.loop_lags.append((loop.time() - t - LOOP_TICK_S) * 1000)

    def window_stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
        if self.scraper is not None:
            self.scraper.stop()
        if self._cpu0 is not None:
            self._window_cost = (time.process_time() - self._cpu0, time.perf_counter() - self._t0)
        if self._sched0 is not None and (now := thread_sched()) is not None:
            self._sched = ((now[0] - self._sched0[0]) / _NS_PER_MS, now[1] - self._sched0[1])

    def finish(self, run: Run) -> list[str]:
        """The client's own cost, what the stream's shape says, the server's own metrics and cold start."""
        if self.server is not None and run.server_boot is None:  # a resumed run keeps its first process's
            session = len(run.sessions) - 1
            run.server_boot = self.server.record([r for r in run.requests if r.session == session])
        if self.scraper is not None and self.scraper.scrapes:
            from llmbench.backends.http.servermetrics import summarize

            run.server_metrics = summarize(self.scraper.url, self.scraper.scrapes, self.scraper.errors,
                                           self.scraper.interval)  # fmt: skip
        if self._cpu0 is not None:
            cpu, wall = self._window_cost or (time.process_time() - self._cpu0, time.perf_counter() - self._t0)
            run.client = client_record(
                run.requests, cpu, wall, [self.loop_lags], sched=[self._sched] if self._sched is not None else None
            )
        warnings = []
        if (behind := behind_warning(run)) is not None:
            warnings.append(behind)
        if (late := lateness_warning(run)) is not None:
            warnings.append(late)
        if run.summary and run.summary.token_count_disagreements:
            warnings.append(disagreement_warning(run))
        if any(r.reasoning_events and r.reasoning_tokens is None and r.tokens_from != "usage" for r in run.requests):
            warnings.append(
                "the server streamed reasoning but its usage did not say how many tokens it took "
                "(completion_tokens_details.reasoning_tokens): output_tokens counts the answer alone, from "
                "--tokenizer or its content events"
            )
        if run.summary and run.summary.stream_buffered and not (run.client and run.client.fell_behind):
            warnings.append(buffered_warning(run))  # a client that read late bunches events itself: said above
        if self.odd_content_types:
            warnings.append(
                f"the stream came as {', '.join(sorted(self.odd_content_types))}, not text/event-stream; it was "
                "read as SSE (a proxy in between rewrote it?)"
            )
        if self.counter is not None and self.counter.tok is not None and not self.counter.templated:
            warnings.append(
                "--tokenizer has no chat template: prompt_tokens counts the prompt text alone, without the template "
                "the server applies"
            )
        if any(r.tokens_from == "chunks" for r in run.requests):
            warnings.append(
                "the server sent no usage: output_tokens counts content events, so TPOT is per event (pass "
                "--tokenizer NAME, a hub id or folder, to count tokens)"
            )
        return warnings

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
        self._parser.shutdown(wait=False)
        if self._switch is not None:
            sys.setswitchinterval(self._switch)
            self._switch = None


def answer_checks(ask: Ask | None, s: Stream) -> dict[str, Any]:
    """A request's tool-call and structured-output fields (RequestResult's; METRIC_FORMULAS): the calls as
    assembled, when their names and arguments arrived, and whether they and the text match what was asked."""
    out: dict[str, Any] = {}
    calls = [s.calls[k] for k in sorted(s.calls)]
    if calls or (ask is not None and ask.tools):
        out["tool_calls"] = len(calls)
    if calls:

        def ms(t: int | None) -> float | None:
            return round((t - s.start_ns) / _NS_PER_MS, 3) if t is not None else None

        # a call's arguments are complete when they first parsed, if what finally came parses too (a call with
        # no arguments: at its name)
        done = [(c.parsed_ns if c.fragments else c.name_ns) if tools.check_value(c.arguments or "{}", None) is None
                else None for c in calls]  # fmt: skip
        why = tools.check_calls(ask, [(c.name, c.arguments) for c in calls])
        ends = [t for t in done if t is not None]
        out.update(tool_call_names=[c.name for c in calls], tool_call_arguments=[c.arguments for c in calls],
                   tool_call_ids=[c.id or "" for c in calls],
                   tool_call_events=len(s.tool_ns), tool_name_ms=ms(calls[0].name_ns), tool_args_ms=ms(done[0]),
                   tool_calls_ms=ms(max(ends)) if len(ends) == len(done) else None,
                   tool_args_valid=why is None, tool_args_error=why)  # fmt: skip
    schema = ask.output_schema() if ask is not None else None
    if schema is not None:
        why = tools.check_value(s.text, schema) if s.text.strip() else "no text (the answer was tool calls)"
        out.update(output_valid=why is None, output_error=why)
    return out


LATE_MS = 10.0  # a request sent later than this after its due time: the client, not the server, set its latency
LOOP_TICK_S = 0.005  # the event loop's lag is sampled by sleeping this long (200 wake-ups a second: ~0.5% of a core)
SWITCH_S = 0.0002  # the interpreter's switch interval while streaming (see EndpointBackend.start)


def lateness_warning(run: Run) -> str | None:
    """Said loudly when an open-loop client fell behind its own schedule (then it measured itself)."""
    late = [r.send_lateness_ms for r in run.requests if r.send_lateness_ms is not None]
    over = [v for v in late if v > LATE_MS]
    if not over:
        return None
    s = run.summary
    p99 = s.send_lateness_ms.p99 if s and s.send_lateness_ms else max(late)
    return (
        f"THE CLIENT FELL BEHIND ITS SCHEDULE: {len(over)} of {len(late)} requests went out more than "
        f"{LATE_MS:.0f} ms late (send lateness p99 {p99:.1f} ms, max {max(late):.1f} ms); at this rate the numbers "
        "measure the load generator too (use --workers N, a lower rate, or see ttft_from_schedule_ms)"
    )


def disagreement_warning(run: Run) -> str:
    """How many requests' server and client token counts differ, and by how much."""
    both = [r for r in run.requests if r.output_tokens_server is not None and r.output_tokens_client is not None]
    diffs = [
        c - sv
        for r in both
        if (c := r.output_tokens_client) is not None and (sv := r.output_tokens_server) is not None and c != sv
    ]
    return (
        f"token counts disagree on {len(diffs)} of {len(both)} requests (--tokenizer minus the server's usage: "
        f"{min(diffs):+d} to {max(diffs):+d}); the metrics use the server's (tokens_from, output_tokens_server/"
        "output_tokens_client)"
    )


def buffered_warning(run: Run) -> str:
    """The terminal's words for a buffered stream, with the figures."""
    s = run.summary
    assert s is not None
    share = f"{100 * (s.stream_gaps_under_1ms_share or 0):.0f}%"
    return (
        f"the stream is buffered between server and client: {share} of the gaps between events were under 1 ms "
        f"and up to {s.stream_largest_burst} events arrived together ({s.stream_buffered_requests} of "
        f"{s.requests} requests); TTFT then includes the buffering and TPOT/ITL do not show decoding "
        "(a proxy with buffering on? nginx: proxy_buffering off or X-Accel-Buffering: no)"
    )
