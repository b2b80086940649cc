"""The run JSON: a versioned pydantic schema, the formulas behind every number, and which setup fields must match.

Schema history (bump ``SCHEMA_VERSION`` on any change a reader of the old version would misread):
  1 (llmbench 0.1.0): first version. Optional fields added since, which a version-1 reader may ignore:
    machine.probe_before/probe_after/summary/samples (0.1.0, for compare's machine-or-model check);
    sessions, requests[].session, requests[].truncated_tokens, config.truncate (0.1.0, --resume/--truncate);
    load.decode_weight_bytes, summary.prefill_tokens_per_s/tpot_bound_ms/tpot_efficiency/
    roofline_mem_read_gbps (0.1.0, roofline);
    config.attn_implementation/cache_implementation/compile/quantization, load.quantize_s/compile_s
    (0.1.0, sweep);
    config.weights "unknown", config.endpoint, requests[].chunks/tokens_from/server_ttft_ms/server_queue_ms/
    stream_end_ms, summary.stream_*, client, failed_requests (0.1.0, endpoint runs);
    probe.method, failed_requests[].session, requests[].prompt_tokens null when unknown, requests[].eos_ms
    (0.2.0, one engine:
    endpoint runs probe the client machine with numpy when the server is on loopback); config.auto (0.2.0,
    automatic choices recorded); config.ab (0.2.0, llmbench ab); config.synthetic (0.2.0, --synthetic, scan);
    quality (0.2.0, sweep --quality); config.endpoint.arrival, requests[].scheduled_s/send_lateness_ms/
    ttft_from_schedule_ms/e2e_from_schedule_ms, failed_requests[].scheduled_s, summary.send_lateness_ms/
    ttft_from_schedule_ms/offered_rate_rps/achieved_rate_rps (0.2.0, open-loop --rate); requests[].ttfrt_ms/
    reasoning_events/reasoning_tokens, summary.ttfrt_ms (0.2.0, reasoning streams);
    requests[].output_tokens_server/output_tokens_client, summary.token_count_disagreements (0.2.0, both
    counts when a server's usage and --tokenizer are both there); config.endpoint.workers (0.2.0, --workers);
    config.engine/precision/engine_settings, environment.engine, load.convert_s/converted,
    requests[].prompt_token_ids_sha256/engine_ttft_ms/engine_tpot_ms/engine_prompt_tokens_evaluated,
    summary.engine_ttft_ms/engine_tpot_ms/tpot_vs_engine_pct/prompt_reuse_requests (0.3.0, --engine: llama.cpp,
    OpenVINO GenAI and ONNX Runtime GenAI beside transformers; a run without config.engine is transformers');
    environment.cpu_flags/git (0.3.0, the history's machine fingerprint and measured code); config.ab.processes,
    requests[].process (0.3.0, ab --processes); requests[].cpu_ms, cpu, machine.gpu/gpu_samples,
    machine.summary.sampler_cpu_ms/sampler_cpu_pct_of_wall (0.3.0, what a token costs besides time);
    server_metrics (0.3.0, --server-metrics: the server's own Prometheus metrics over the run);
    config.prompt_source (0.3.0, datasets as prompt sources); config.endpoint.arrival.trace and process "trace"
    (0.3.0, --trace replay); requests[].cached_tokens/cold, summary.cached_tokens_share/
    ttft_cold_ms/ttft_warm_ms (0.3.0, the server's prefix-cache hits);
    config.sessions, requests[].conversation/turn (0.3.0, --turns);
    ttft_requests, requests[].ttft_only (0.3.0, ab's TTFT-only requests: one output token each, kept apart so
    that no other figure, and no older reader, counts them); config.ab.order "duet"/ttft_pairs/budget_s/
    setup, load.weights_cache/weights_mmapped/startup_s (0.3.0, the regression gate's fast workers);
    config.speculative, load.draft, requests[].forwards/drafted_tokens/accepted_tokens/draft_ms/lossless/
    first_difference, summary.forwards/tokens_per_forward/drafted_tokens/accepted_tokens/acceptance_rate/
    draft_ms/lossless_checked/lossless_mismatches (0.3.0, --speculative: tokens that arrive in bundles, several per
    forward pass, each stamped when its bundle became visible); config.prefix_cache,
    requests[].prompt_tokens_computed (0.3.0, --prefix-cache system: the shared prefix's keys and values computed
    once per process, accounted per request in cached_tokens and prompt_tokens_computed, cold for the request that
    computed it); load.phases (0.3.0, the cold start phase by phase: before the load, locating, config and
    tokenizer, weights, building, warm-up, the first request's TTFT); config.spec (0.3.0, the settings the run
    was asked for, as llmbench.spec declares them: ``run --config-from`` repeats them); requests[].text_offsets/
    first_visible_ms/reader_stall_ms/reader_stalls/reader_longest_stall_ms/andes_qoe/fluidity/decode_chars_per_s/
    decode_words_per_s, summary.reader_stall_ms/reader_stalls/andes_qoe/fluidity/decode_chars_per_s/
    decode_words_per_s, config.reader (0.3.0, the shape of the wait at a reader's pace, speed in characters; a
    run without them gets them when read, its text spread evenly over its events);
    server_boot (0.3.0, run --endpoint --server-command: a server llmbench started, from its exec to listening,
    to ready and to the first token of its first request, and that request's TTFT against the warm median);
    config.ab.budget_plan, config.engine_settings.processes[].start_read_mb/first_start (0.3.0, ab --budget on a
    fresh runner: what the plan was priced with, a cold first start measured apart); config.ab.full_pairs (0.3.0,
    ab --budget: the last round of the prompts partly measured, the pairs filling the budget);
    requests[].pinned_cpu (0.3.0, ab --duet: the CPU each request ran on, which compare balances TPOT's gaps over);
    requests[].server_send_ms, client.processes/lag_*/loop_lag_*/fell_behind/per_process (0.3.0, the client's
    self-check: its stamps against the server's sends, its event loop's lag, and whether it fell behind);
    client.sched_wait_ms/sched_runs/sched_wait_per_run_ms (0.3.0, the client's wait for a CPU: a starved client),
    client.per_process[].host (0.3.0, the machine of each client process, --ray's workers); config.reader written
    at the default pace too, never null (0.3.0, issue 60: a run records every value it used; read back, the
    default pace is null in memory, as older runs have it).
  Read back with bounds and types, the version unchanged (every file llmbench wrote holds them): the requests'
    times finite and 0 or more, counts 0 or more, config's max_new_tokens/repeats/threads 1 or more, and every
    dict-shaped record (config.reader/speculative/prompt_source/..., cpu, machine.gpu, server_metrics, quality)
    checked key by key (llmbench.results.records); config.spec names the prompts measured, local paths absolute,
    none for prompts passed in memory (config.prompt_file "<list>") (0.3.0, issue 66).
    requests[].tool_calls/tool_call_names/tool_call_arguments/tool_call_ids/tool_call_events/tool_name_ms/
    tool_args_ms/tool_calls_ms/tool_args_valid/tool_args_error/tool_call_tokens/output_valid/output_error/
    constraint_sha256/constraint_first_use/tool_wait_ms/tool_wait_set_ms, summary.tool_offered/tool_answers/
    tool_calls_per_answer/tool_name_ms/tool_args_ms/tool_args_valid/output_valid/constraint_first_use_ms/
    constraint_reuse_ms/tasks, config.sessions.tasks/steps/tool_latencies_ms (0.3.0, issue 64: tool calls,
    structured output and agent tasks; a run without config.tools never has them).
  2 (llmbench 0.3.0, issue 61): a large run's requests and ttft_requests are columns in an Arrow IPC stream beside
    the JSON (``columns``: its file name, rows and sha256; the JSON's lists are empty). A version-1 reader would
    read such a run as one without requests, so it is refused there. Runs under the line (1,000,000 token stamps;
    LLMBENCH_COLUMNS_FROM) are still written as version 1, one file; ``llmbench convert`` moves a run either way.
  3 (llmbench 0.3.0, issue 64): a workload of tool calls or structured output (``config.tools``): an answer of
    tool calls alone has no visible text, so its ``ttft_ms`` is null and its ``token_times_ms`` empty (TTFT keeps
    its meaning, the first text; ``tool_name_ms`` is the call's wait), and ``summary.ttft_ms`` is null when no
    answer had text. Either form (requests inline or in ``columns``). A version-1 or -2 reader would refuse a null
    TTFT with an unclear error: it refuses version 3 by its number instead. Other runs are still written as 1 or 2.

No torch here: compare, show and the endpoint client read and write runs without it. Why one module of
1,000-odd lines (over 600): the schema is one versioned contract (the version, its history and every model it covers
change together); split over files, a change could bump one part and not the other.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator, model_validator

from llmbench.results import records as rec

SCHEMA_VERSION = 3  # the newest; a run without columns is still written as 1 (older readers read it), with them as 2
SCHEMA_VERSIONS = (1, 2, 3)

# The bounds a measured value is read back with: a malformed file (a negative or NaN time, a negative count) is
# refused in one line when read, never shown as a figure. Times are milliseconds since the request's start.
Ms = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]  # what a table's int64 column holds (export, history)
Positive = Annotated[int, Field(ge=1, le=2**63 - 1)]
Finite = Annotated[float, Field(allow_inf_nan=False)]  # a time of any sign (a lateness, a start before the first)
Index = Annotated[int, Field(ge=-(2**31), lt=2**31)]  # a prompt's or repeat's index (a warm-up's are negative)
SCAN_VERSION = 1  # scan.json (llmbench scan); history: 1 (llmbench 0.2.0) first version
LOAD_VERSION = 1  # load.json (llmbench load); history: 1 (llmbench 0.2.0) first version
PAINT_VERSION = 1  # llmbench paint's JSON (results/paint.py); history: 1 first version
SWEEP_VERSION = 1  # sweep.json; history: 1 (llmbench 0.1.0) first version; 0.2.0 adds "varied" and
# (with --quality) kld_mean, kld_p99, top1_agreement, greedy_identical_share, excluded_by_max_kld, quality_notes;
# 0.3.0 adds the setups' speculative/prefix_cache and results[].tokens_per_forward/acceptance_rate/
# lossless_mismatches/ttft_cold_ms/ttft_warm_ms_mean/excluded_by_lossless, excluded_by_lossless
QUALITY_VERSION = 1  # quality.json and quality's reference cache; history: 1 (llmbench 0.2.0) first version

# Which fields of the setup must be equal, and for what. A field's ``match`` says it: RESUME (a resumed run
# continues the same measurement), COMPARE (compare lists it as "setup differs"), ENV (compare lists it as
# "environment differs"). Resume, compare, sweep and ab all read these lists through ``must_match``.
RESUME, COMPARE, ENV = "resume", "compare", "env"


def _match(*purposes: str, default: Any = None, **kw: Any) -> Any:
    if "default_factory" in kw:
        return Field(json_schema_extra={"match": list(purposes)}, **kw)
    return Field(default, json_schema_extra={"match": list(purposes)}, **kw)


# Written into every run so a reader never has to guess what a number means.
METRIC_FORMULAS: dict[str, str] = {
    "reader_stall_ms": "a reader starts at the first visible character and reads at the run's pace "
    "(config.reader; default 238 words a minute, Brysbaert 2019), never ahead of what arrived: the total time it "
    "has caught up and waits before the answer ends (llmbench.results.reader)",
    "reader_stalls": "those waits longer than 100 ms; reader_longest_stall_ms: the longest wait",
    "andes_qoe": "Andes (arXiv 2404.16283): sum_i (T - digested_i) / sum_i (T - expected_i), capped at 1; "
    "expected_i = 1000 ms + (i - 1) / r, digested_i = max(arrival_i, digested_(i-1) + 1 / r), r = the pace in "
    "words a minute x 1.3 tokens a word, T = the later curve's last token",
    "fluidity": "Etalon (arXiv 2407.07000): met deadlines / all deadlines; a token's deadline is 1000 ms (the first) "
    "or a token's reading time (the others) after the previous one, plus the slack earlier tokens left; a late "
    "token misses 1 + floor(late / decode deadline) and resets the slack",
    "decode_chars_per_s": "visible (not whitespace) characters that arrived after the first event / (last stamp - "
    "first stamp) * 1000, for 2+ stamps: decode tok/s in characters, comparable across tokenizers; "
    "decode_words_per_s: the same over the answer's visible characters per word (a CJK character is a word)",
    "ttft_ms": "first_token_stamp - request_start; request_start is taken before chat templating and tokenizing",
    "tpot_ms": "(last_token_stamp - first_token_stamp) / (output_tokens - 1), for output_tokens >= 2; "
    "excludes the first token (as vLLM's TPOT); per request, then summarised over requests",
    "itl_ms": "token_times_ms[i] - token_times_ms[i-1] for i >= 1: every gap between consecutive tokens. With "
    "--speculative the tokens of one forward pass share one stamp, so ITL holds zero gaps (the tokens after the "
    "first of a bundle) beside longer ones (a verification pass): its mean is TPOT's span over n - 1 gaps, its "
    "median can be 0",
    "e2e_ms": "last_token_stamp - request_start",
    "forwards": "--speculative: forward passes of the target model that made the request's tokens (one bundle "
    "each: the drafts it accepted and its own next token)",
    "tokens_per_forward": "output_tokens / forwards, summed over the requests (summary: all tokens / all forwards)",
    "acceptance_rate": "accepted_tokens / drafted_tokens, summed over the requests: the share of proposed tokens "
    "the target kept (drafted counts every proposal, including those a step's earlier rejection discarded)",
    "lossless": "greedy decoding with --speculative or --prefix-cache: the output ids equal those of a plain, "
    "uncached generate() of the same ids on the same engine and precision, run untimed after the request; "
    "first_difference: the first output position where they differ (the engine's numerics, not llmbench)",
    "prompt_tokens_computed": "--prefix-cache: prompt_tokens - cached_tokens, the prompt tokens this request "
    "prefilled itself (the request that computed the shared prefix is cold and counts it)",
    "decode_tokens_per_s": "(output_tokens - 1) / (last_token_stamp - first_token_stamp)",
    "tokenize_ms": "chat templating + tokenizing + moving the ids to the device, inside ttft_ms",
    "prefill_tokens_per_s": "prompt_tokens / (ttft_ms - tokenize_ms) * 1000: the first forward pass, "
    "generate()'s set-up included, without templating and tokenizing",
    "tpot_bound_ms": "decode_weight_bytes / mem_read_gbps: the fastest a decode step can read every weight once "
    "(tied embeddings counted once; KV cache and activations ignored)",
    "tpot_efficiency": "tpot_bound_ms / mean tpot_ms",
    "token_times_ms": "stamp of each output token, in ms since request_start; token_times_ms[0] == ttft_ms",
    "stamp": "time.perf_counter_ns() in the streamer's put(), when generate() hands over the token on the host",
    "prompt_token_ids_sha256": "sha256 of the prompt's token ids as fed to the model (the Hugging Face tokenizer, "
    "chat template included): equal hashes mean the same input ids, whatever the engine",
}

# The same names for the other engines (config.engine): the same ids in, each token stamped at the step that
# makes it, text decoded after the request.
ENGINE_METRIC_FORMULAS: dict[str, str] = {
    **METRIC_FORMULAS,
    "tokenize_ms": "chat templating + tokenizing with the model's Hugging Face tokenizer, inside ttft_ms (the "
    "engine receives token ids, never text)",
    "stamp": "time.perf_counter_ns() when the engine hands over a token id: llama.cpp, as Llama.generate() yields "
    "it (after eval + sample); OpenVINO GenAI, in StreamerBase.write() (called on the generating thread by the "
    "stateful SDPA pipeline); ONNX Runtime GenAI, after generate_next_token() + get_next_tokens()",
    "engine_ttft_ms": "the engine's own timer for the first token: llama.cpp t_p_eval_ms (prompt evaluation, "
    "llama_perf_context); OpenVINO GenAI PerfMetrics.get_ttft(); null for ONNX Runtime GenAI (it keeps none)",
    "engine_tpot_ms": "the engine's own time per output token after the first: llama.cpp t_eval_ms / n_eval "
    "(decode evaluations only, sampling excluded); OpenVINO GenAI PerfMetrics.get_tpot(); null for ONNX Runtime",
    "engine_prompt_tokens_evaluated": "prompt tokens the engine says it evaluated for this request (llama.cpp "
    "n_p_eval; OpenVINO GenAI num_input_tokens; null for ONNX Runtime GenAI, whose fresh Generator per request "
    "holds no earlier cache): less than prompt_tokens means it reused an earlier request's prefix",
    "tpot_vs_engine_pct": "100 * (median over requests of tpot_ms / engine_tpot_ms - 1): how far llmbench's "
    "stopwatch is from the engine's own (llama.cpp's excludes sampling and the Python loop)",
}

# The same names measured over HTTP (config.mode "endpoint"): the client's clock, events instead of tokens.
ENDPOINT_METRIC_FORMULAS: dict[str, str] = {
    **METRIC_FORMULAS,
    "ttft_ms": "arrival of the first SSE event that carries content - request_start; request_start is taken "
    "before the HTTP request is built and sent (a role-only first event does not count)",
    "tpot_ms": "(last token's arrival - first content event) / (output_tokens - 1), output_tokens from the "
    "server's usage, else from tokenizing the received text (requests[].tokens_from says which); as vLLM's TPOT. "
    "The last token's arrival is the last content event, except when the count is the server's and the stream "
    "ends with finish_reason 'stop' after that event: an end-of-sequence token carries no text but usage counts "
    "it, so its finishing event is its arrival (requests[].eos_ms)",
    "itl_ms": "token_times_ms[i] - token_times_ms[i-1]: gaps between content events (an event may carry several "
    "tokens)",
    "client_lag_ms": "token_times_ms[i] - server_send_ms[i], over every event of every request whose server sent "
    "its send stamps (one machine's clock; client.lag_p50_ms/lag_p99_ms/lag_max_ms): the client's own delay plus "
    "the network's (loopback: tens of microseconds)",
    "loop_lag_ms": "how late the client's event loop woke from a 5 ms sleep, sampled throughout the measured "
    "window (client.loop_lag_p50_ms/p99/max): a busy loop reads every stream late",
    "sched_wait_ms": "the time the client's event-loop thread was ready to run but waited for a CPU, over the "
    "measured window (/proc/thread-self/schedstat's run-queue wait; Linux): client.sched_wait_ms summed over its "
    "processes, sched_runs the times it got a CPU, sched_wait_per_run_ms = sched_wait_ms / sched_runs of the worst "
    "process: how late, on average, the loop got to each read it woke for",
    "client_fell_behind": "client.fell_behind: loop_lag_p99_ms above 5 ms, or a client process above 90% of one "
    "core (the warning then says the share of the window its loop waited for a CPU: another process had its core); "
    "then the stamps measure the client too, and a burst of events is not blamed on a proxy. lag_p99_ms alone "
    "is no verdict: a relay that holds the stream delays the stamps behind the sends while the client idles",
    "e2e_ms": "last content event - request_start (stream_end_ms: when [DONE] or the end of the body arrived); "
    "an answer with tool calls: its last content or tool-call event",
    "tool_name_ms": "arrival of the event that carried the answer's first tool call's function name - "
    "request_start; ttft_ms stays the first content event (null for an answer of tool calls alone)",
    "tool_args_ms": "arrival of the event after which the first call's arguments, assembled from every fragment "
    "so far (OpenAI's streaming format: keyed by choice and tool_calls[].index), first parsed as JSON - "
    "request_start: the earliest a program could run the call; null when the arguments it finally got do not "
    "parse. tool_calls_ms: the same for the answer's last call to complete (every call runnable)",
    "tool_args_valid": "every call names a tool the request offered and its arguments parse and match that tool's "
    "parameters schema (jsonschema, the draft the schema names, else 2020-12); tool_args_error: the first reason "
    "not. Summary tool_args_valid: k of n answers with calls, with its Wilson 95% interval (AIPerf's unparsed "
    "rate is 1 - share)",
    "tool_call_tokens": "usage.completion_tokens (less reasoning) - the text's tokens: the answer's tool-call "
    "tokens. All of them for an answer of calls alone (output_tokens 0); beside text, only with --tokenizer "
    "(output_tokens then counts the text alone). A server that sends no usage: --tokenizer's count of the calls' "
    "names and arguments (the template's wrapping around them not counted); else null",
    "output_valid": "response_format: the answer's text parses as JSON and matches the format's schema (jsonschema; "
    "json_object without a schema: any object); summary: k of n with its Wilson 95% interval",
    "constraint_first_use": "the request was the run's first (warm-ups included) to send its constraint "
    "(constraint_sha256: sha256 of the response format, and of the tools with a required or named tool_choice): "
    "a server that compiles it into a grammar pays the compile inside this request's wait. Summary "
    "constraint_first_use_ms / constraint_reuse_ms: the first answer event (ttft_ms, else tool_name_ms) of first "
    "uses and of later uses. A server's cache from before the run is not seen",
    "tool_wait_ms": "an agent task's later step: its request_start - (the previous step's request_start + its "
    "stream_end_ms). The tool runs from the answer's end for tool_wait_set_ms (as the workload set it); the "
    "client's own work on the answer overlaps it, so the excess is the loop's wake-up and what outlasts the latency",
    "task_e2e_ms": "an agent task (tasks.e2e_ms): its last step's request_start + stream_end_ms - its first step's "
    "request_start = model_ms (the sum of its steps' stream_end_ms) + tool_ms (the sum of their tool_wait_ms), "
    "exactly; model_share = sum(model_ms) / sum(e2e_ms) over the whole tasks. model_first_event_ms: the sum of its "
    "steps' first answer events (ttft_ms, else tool_name_ms); model_after_first_ms = model_ms - that (decoding and "
    "each stream's end)",
    "tokenize_ms": "0: templating and tokenizing happen on the server, inside ttft_ms",
    "prefill_tokens_per_s": "prompt_tokens / ttft_ms * 1000: as the client sees it, transport and queue included; "
    "null when prompt_tokens is unknown",
    "prompt_tokens": "the server's usage.prompt_tokens; else --tokenizer's count of the messages through its chat "
    "template when it has one (what a chat server tokenizes), else of the prompt text alone (a warning says so); "
    "null when unknown",
    "token_times_ms": "arrival of each content event, in ms since request_start; token_times_ms[0] == ttft_ms",
    "stamp": "time.perf_counter_ns() when the network read that completed the event returned (httpx), before any "
    "parsing: the bytes are parsed (httpx-sse, then JSON) after the stream ends",
    "stream_gaps_under_1ms_share": "share of gaps between consecutive content events under 1 ms, all requests",
    "stream_largest_burst": "most content events of one request that arrived with under 1 ms between each",
    "stream_buffered": "true when at least half of the requests with >= 3 events had at least half of their "
    "gaps under 1 ms: the events were held and released together between server and client",
    "server_boot": "--server-command, every instant on this process's perf_counter, from exec (just before the "
    "command is forked and executed): exec_to_listening_s = the first TCP connect to the endpoint's host and port "
    "that succeeds; exec_to_ready_s = the arrival of the first GET /v1/models answered 200 (after listening); "
    "both polled every poll_s, so each is late by at most poll_s and one try; ready_to_first_request_s = ready "
    "to the first request's request_start (llmbench's own set-up between: /health and /v1/models asked once, "
    "the run record); exec_to_first_token_s = exec_to_ready_s + ready_to_first_request_s + "
    "first_request_ttft_ms / 1000; first_request_penalty_ms = first_request_ttft_ms - warm_ttft_p50_ms, the "
    "median TTFT of the run's other requests (the first one is requests[0], sent before any warm-up)",
}


class _Model(BaseModel):
    # Unknown fields are kept, so a newer minor writer's extras survive a read-modify-write.
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class Sampling(_Model):
    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


class Arrival(_Model):
    """An open-loop schedule: request i is sent at ``offsets[i]`` seconds after the run's start, whatever the
    server does. Drawn in advance from (process, rate, cv, seed), so it is reproducible and recorded."""

    rate_rps: float  # the offered rate: mean requests per second
    process: Literal["poisson", "constant", "gamma", "trace"] = "poisson"
    cv: float = 1.0  # coefficient of variation of the gaps (gamma; poisson is 1, constant 0)
    seed: int = 0
    requests: int  # how many the schedule holds
    duration_s: float | None = None  # --duration: the schedule was cut at this many seconds
    # --trace: the trace replayed (workloads.trace.Trace.record: file, format, hash, time unit and scale, window,
    # rows, expected prefix reuse); the offsets are its rows' scaled times
    trace: rec.TraceInfo | None = None


class EndpointConfig(_Model):
    url: str = _match(RESUME, COMPARE, default=...)  # the chat completions URL, without credentials or query
    api_key_env: str | None = None  # the variable the key came from (the key itself is never written)
    concurrency: Positive = _match(RESUME, COMPARE, default=1)
    server: dict | None = None  # what GET /health said (llmbench serve), if anything
    # fields sent besides messages/model/stream (max_tokens, temperature, ...)
    request_extra: rec.RequestExtra = _match(RESUME, COMPARE, default_factory=dict)
    arrival: Arrival | None = _match(RESUME, COMPARE, default=None)  # open loop (--rate); None: closed loop
    workers: int = 1  # client processes that shared the schedule (--workers)


class ABConfig(_Model):
    """``llmbench ab``: this run was measured interleaved with another, request by request."""

    role: Literal["base", "head"]
    side: str  # the worker command (VAR=redacted for assignments) or the server URL (no credentials)
    other_file: str  # the other run, in the same folder
    other_run_id: str
    # "ABBA": each (prompt, repeat) on both sides back to back, who goes first alternating; "duet": both sides
    # at the same moment, each pinned to its own CPU, the CPUs swapped pair by pair
    order: str = "ABBA"
    processes: int = 1  # worker processes per side (pair k on process k mod N on both sides)
    ttft_pairs: int = 0  # extra one-token pairs that measure TTFT alone (ttft_requests)
    budget_s: float | None = None  # --budget: the wall time the plan was chosen to fill
    # --budget: the costs the plan was priced with (seconds: a start, a new process's first pair, a pair, a
    # TTFT-only pair), whether process 0's first start found a cold file cache (MB read from storage; it then
    # started again), the design chosen with its projected MDCs, and the one it was chosen instead of, with why
    budget_plan: dict | None = None
    # --budget: the full pairs in all when the last round was partly measured (fewer than prompts x config.repeats:
    # the first full_pairs (prompt, repeat) keys, round by round); None: every round whole
    full_pairs: int | None = None
    # how each process was set up: {"hash_seed": [...], "env_pad": [...], "first": [...]} per process (randomized)
    setup: rec.AbSetup | None = None


class RunConfig(_Model):
    mode: Literal["in-process", "endpoint"] = _match(RESUME, COMPARE, default="in-process")
    # the engine that generated (in-process runs): transformers, llama.cpp, openvino, onnxruntime; a run written
    # before engines existed reads as transformers. None: an endpoint run (the server's own engine)
    engine: str | None = _match(RESUME, COMPARE, default=None)
    # what the weights and activations are on that engine: {format, weights, activations, kv_cache} (engines
    # other than transformers, whose dtype and quantization say it)
    precision: rec.Precision | None = _match(RESUME, COMPARE, default=None)
    # thread counts per phase, context, attention; ab's worker processes
    engine_settings: rec.EngineSettings | None = _match(RESUME, default=None)
    model: str = _match(RESUME, COMPARE, default=...)
    model_source: str  # "hub" | "folder" | "gguf" | "builtin" | "endpoint"
    # unknown: an endpoint that doesn't say
    weights: Literal["pretrained", "random", "unknown"] = _match(RESUME, COMPARE, default=...)
    device: str = _match(RESUME, COMPARE, default=...)
    dtype: str = _match(RESUME, COMPARE, default=...)
    dtype_reason: str = ""
    threads: Positive | None = _match(RESUME, COMPARE)
    max_new_tokens: Positive = _match(RESUME, COMPARE, default=...)
    ignore_eos: bool = _match(RESUME, COMPARE, default=...)
    warmup: Count
    repeats: Positive = _match(RESUME, COMPARE, default=...)
    prompt_file: str
    prompt_sha256: str = _match(RESUME, COMPARE, default=...)
    prompt_count: Count
    sampling: Sampling = _match(RESUME, COMPARE, default_factory=lambda: Sampling())
    chat_template: bool = _match(RESUME, COMPARE, default=True)
    system_prompt: str | None = _match(RESUME, COMPARE)
    device_map: str | None = _match(RESUME, COMPARE)  # --device-map as given (None: straight onto the device)
    # prompts longer than the context were cut (left side) instead of refused
    truncate: bool = _match(RESUME, COMPARE, default=False)
    attn_implementation: str | None = _match(RESUME, COMPARE)  # --attn; None: transformers' default for the model
    cache_implementation: Literal["dynamic", "static"] = _match(RESUME, COMPARE, default="dynamic")  # --cache
    compile: bool = _match(RESUME, COMPARE, default=False)  # decode steps run through torch.compile (static cache)
    quantization: str | None = _match(
        RESUME, COMPARE
    )  # "int8" weight-only, "int8-dynamic" (llmbench.engines.hf.quantize)
    # --speculative: {method, draft_tokens, max_ngram | draft_model} (core.speculative; the draft's load record is
    # load.draft); None: plain decoding
    speculative: rec.Speculative | None = _match(RESUME, COMPARE, default=None)
    # the reader's pace the shape of the wait was measured against: {words_per_minute, chars_per_s}, written always;
    # read back, the default pace (238 words a minute) is None, as runs from before the pace could be set recorded
    # it, so that they and newer runs are the same setup (compare, the history's setup hash)
    reader: rec.Reader | None = _match(RESUME, COMPARE, default=None)
    # --prefix-cache: "system" (the shared prefix's keys and values computed once per process and reused);
    # None: every request prefills its whole prompt, nothing reused between requests
    prefix_cache: str | None = _match(RESUME, COMPARE, default=None)
    endpoint: EndpointConfig | None = None  # mode "endpoint": where and how the requests went (fields: own match)
    # the fields above that llmbench or transformers chose because they were left to it (--dtype auto, no
    # --threads, ...): compare says "auto chose X, then Y" for them
    auto: list[str] = []
    ab: ABConfig | None = None  # llmbench ab: the run it was interleaved with
    # --synthetic / scan: {tokens, count, seed, generator, corpus_sha256[, scan_point]}: the prompts are a
    # function of these and the model's tokenizer (prompt_sha256 covers them)
    synthetic: rec.Synthetic | None = None
    # a dataset (llmbench.workloads.dataset): {version, path, format, file_sha256, prompt_column, output_len_column,
    # output_tokens_from, output_tokens, min/max_prompt_tokens, num_prompts, seed, entries, kept, dropped_*,
    # skipped, rows}; prompt_sha256 covers the chosen prompts and their output lengths
    prompt_source: rec.PromptSource | None = None
    # --turns (workloads.sessions): {turns, conversations, think_time_s, later_turns, follow_ups}; each turn is a
    # prompt of its own (prompt_count counts turns)
    sessions: rec.Sessions | None = None
    # a workload of tool calls or structured output (workloads.tools): {prompts_with_tools,
    # prompts_with_response_format, tool_names, constraints, tasks}; its run is schema version 3
    tools: rec.Tools | None = None
    # the settings the run was asked for, table by table as llmbench.spec declares them (None values left out,
    # URLs without credentials): what `run --config-from` repeats; the fields above are what they resolved to
    spec: rec.SpecRecord | None = None

    @model_validator(mode="after")
    def _engine(self) -> RunConfig:
        if self.engine is None and self.mode == "in-process":
            self.engine = "transformers"  # files from before --engine
        return self

    @field_validator("reader", mode="before")
    @classmethod
    def _default_pace_is_none(cls, v: Any) -> Any:
        from llmbench.results.reader import Pace

        keys = {"words_per_minute", "chars_per_s"}
        return None if isinstance(v, dict) and v and set(v) <= keys and Pace.of(v) == Pace() else v

    @field_serializer("reader", when_used="json")
    def _pace_written(self, v: Any) -> Any:
        from llmbench.results.reader import WORDS_PER_MINUTE

        return v if v is not None else {"words_per_minute": WORDS_PER_MINUTE, "chars_per_s": None}


class GPUInfo(_Model):
    name: str
    memory_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None


class Environment(_Model):
    python: str = _match(RESUME, ENV, default=...)
    torch: str | None = _match(RESUME, ENV)
    transformers: str | None = _match(RESUME, ENV)
    platform: str = _match(ENV, default=...)  # the kernel version: a resume across a reboot is allowed
    cpu_model: str = _match(RESUME, ENV, default=...)
    cpu_count: int | None = _match(RESUME, ENV)
    cpu_physical_cores: int | None = None
    ram_total_bytes: int | None = None
    gpu: GPUInfo | None = _match(RESUME, ENV)
    engine: str | None = _match(RESUME, ENV)  # the engine's package and version (--engine other than transformers)
    cpu_flags: list[str] | None = None  # instruction-set flags (avx*, amx*, fma, ...): the history's fingerprint
    git: rec.Git | None = None  # the checkout llmbench ran in: {commit, branch, dirty} (the history's measured code)


class Offload(_Model):
    disk: list[str] = []
    cpu: list[str] = []
    meta: list[str] = []
    missing_bytes: int = 0  # bytes of weights that are not in the memory of the device that computes


class LoadInfo(_Model):
    seconds: float
    device_map: dict[str, str] | None = None
    offload: Offload = Offload()
    allowed_offload: bool = False
    parameters: int | None = None
    weights_bytes: int | None = None
    decode_weight_bytes: int | None = None  # weights read per decode step: tied embeddings once, an untied
    # input embedding not at all (one row is gathered)
    quantize_s: float | None = None  # --quantize: seconds spent quantizing, after loading
    compile_s: float | None = None  # --compile: wall time of a 2-token generate() that compiles (untimed)
    convert_s: float | None = None  # --engine: converting the model for the engine (0 when cached; untimed)
    converted: rec.Converted | None = None  # --engine: {steps: [{step, tool, seconds, cached, cache_key}], path}
    # --weights random: the content-addressed safetensors file the weights came from {path, key, hit, build_s}
    weights_cache: rec.WeightsCache | None = None
    weights_mmapped: bool | None = None  # the weights' memory is the file's pages (shared), not a private copy
    startup_s: float | None = None  # a worker: from its process's start to ready (imports, load, checks)
    # --speculative draft:MODEL: the draft model's own load, checked as the target's ({model, source, dtype,
    # parameters, weights_bytes, seconds, offload, vocab_size})
    draft: dict | None = None
    # the cold start, phase by phase, in seconds (results.metrics.cold_start reads them with the rest):
    # before_load_s (process start to the load's start: the interpreter, imports, parsing), locate_s (finding
    # the files), config_tokenizer_s, model_code_s (importing the architecture's code, which transformers does on
    # first use), files_s and engine_import_s (an engine's files found or made, its package imported), weights_s
    # (reading the weights and placing them: one step where the
    # loader does both), build_s (the model or engine made ready: eval, attention, the offload check, the
    # engine's own load), warmup_s (the warm-up requests), first_ttft_ms (the first request after loading,
    # which warm-ups hide from the measured ones)
    phases: rec.Phases | None = None


class RequestResult(_Model):
    prompt_index: Index
    repeat: Index
    prompt_tokens: Count | None  # None: unknown (an endpoint that sent no usage, no --tokenizer)
    output_tokens: Count
    tokenize_ms: Ms
    ttft_ms: Ms | None  # None: the answer had no visible text (tool calls alone; schema version 3)
    tpot_ms: Ms | None  # None when output_tokens < 2
    e2e_ms: Ms
    token_times_ms: list[Ms]
    output_token_ids_sha256: str
    output_text: str
    started_s: Finite = 0.0  # seconds since the first measured request started: shows drift over a run
    truncated_tokens: Count = 0  # prompt tokens cut to fit the context (--truncate)
    session: Count = 0  # index into Run.sessions: which invocation measured it (--resume adds sessions)
    # endpoint runs only: stamps are per content event, not per token
    chunks: Count | None = None  # content events received (== len(token_times_ms))
    tokens_from: Literal["usage", "tokenizer", "chunks"] | None = None  # where output_tokens came from
    stream_end_ms: Finite | None = None  # [DONE] (or the body's end) arrived, ms since request_start
    server_ttft_ms: Finite | None = None  # llmbench serve's own stamp of the first token (from arrival)
    server_queue_ms: Finite | None = None  # llmbench serve: arrival until the model started on it (templating + wait)
    # the server's usage.prompt_tokens_details.cached_tokens: prompt tokens its prefix cache served (vLLM, SGLang,
    # OpenAI); None when it does not say
    cached_tokens: Count | None = None
    # the server's own send stamp of each content event, ms on this request's timeline (llmbench serve, the
    # stamping stub: their usage chunk's llmbench.arrived_unix_ms + token_times_ms, placed by the wall clock read
    # beside the request's start); None when the server sends none, or not one per event
    server_send_ms: list[Finite] | None = None
    # a workload with shared prefixes (--trace's hash ids): the first request to send its prefix (True), or one
    # whose prefix an earlier request sent (False); None without such structure
    cold: bool | None = None
    # (warmup_requests[].prompt_index is -1 for a workload's own warm-up prompt: --prefix-groups, --trace)
    # --turns: the conversation (the prompt that opened it) and the turn (0: the first) this request was
    conversation: Count | None = None
    turn: Count | None = None
    eos_ms: Finite | None = None  # endpoint runs: arrival of the finishing event of an end-of-sequence token that
    # carried no text but that usage counts (TPOT's span ends there)
    # open-loop runs (--rate): when it was due, and how late the client sent it
    scheduled_s: Finite | None = None  # seconds since the run's start
    send_lateness_ms: Finite | None = None  # request start - scheduled time (the client's own delay)
    ttft_from_schedule_ms: Finite | None = None  # send_lateness_ms + ttft_ms: what a user arriving on time waits
    e2e_from_schedule_ms: Finite | None = None
    # reasoning streams: ttft_ms stays the first *content* event
    ttfrt_ms: Finite | None = None  # time to the first reasoning event (delta.reasoning_content / .reasoning)
    reasoning_events: Count | None = None
    reasoning_tokens: Count | None = None  # usage.completion_tokens_details.reasoning_tokens
    # both counts, when the server sent usage and --tokenizer counted the text (tokens_from says which one the
    # metrics used)
    output_tokens_server: Count | None = None
    output_tokens_client: Count | None = None
    process: Count | None = None  # ab --processes: which of the side's worker processes measured it (0-based)
    pinned_cpu: Count | None = None  # ab --duet: the CPU the worker ran it on (compare balances TPOT's gaps over them)
    ttft_only: bool = False  # one output token, for TTFT alone: kept in Run.ttft_requests, never in requests
    cpu_ms: Finite | None = None  # in-process runs: this process's CPU time (user + system) during the request
    # in-process runs: the input ids' hash (equal across engines when they were fed the same ids)
    prompt_token_ids_sha256: str | None = None
    # --engine other than transformers: the engine's own stopwatch and counters (ENGINE_METRIC_FORMULAS)
    engine_ttft_ms: float | None = None
    engine_tpot_ms: float | None = None
    engine_prompt_tokens_evaluated: Count | None = None
    # --speculative (METRIC_FORMULAS): the target's forward passes, the drafter's proposals and the target's
    # acceptances; draft_ms: the drafter's own time inside the request where the engine shows it
    forwards: Count | None = None
    drafted_tokens: Count | None = None
    accepted_tokens: Count | None = None
    draft_ms: float | None = None
    # --speculative/--prefix-cache with greedy decoding: equal to a plain uncached generate() of the same ids
    lossless: bool | None = None
    first_difference: Count | None = None
    prompt_tokens_computed: Count | None = None  # --prefix-cache: prompt tokens this request prefilled itself
    # the shape of the wait (METRIC_FORMULAS, llmbench.results.reader): each stamp's text's end in output_text,
    # and what a reader at the default pace went through
    text_offsets: list[Count] | None = None
    first_visible_ms: float | None = None
    reader_stall_ms: float | None = None
    reader_stalls: int | None = None
    reader_longest_stall_ms: float | None = None
    andes_qoe: float | None = None
    fluidity: float | None = None
    decode_chars_per_s: float | None = None  # visible characters after the first event / (last - first stamp)
    decode_words_per_s: float | None = None
    # tool calls (delta.tool_calls, assembled across events; METRIC_FORMULAS): ttft_ms stays the first visible text
    tool_calls: Count | None = None  # calls in the answer (None: no tools offered, none came)
    tool_call_names: list[str] | None = None
    tool_call_arguments: list[str] | None = None  # each call's arguments as assembled, in call order
    tool_call_ids: list[str] | None = None  # the server's id of each call ("" where it sent none)
    tool_call_events: Count | None = None  # events that carried a call's name or arguments
    tool_name_ms: Finite | None = None  # the first call's name arrived
    tool_args_ms: Finite | None = None  # the first call's arguments complete, parsing as JSON
    tool_calls_ms: Finite | None = None  # every call's arguments complete and parsing (the last one's)
    tool_args_valid: bool | None = None  # every call names an offered tool, its arguments matching its schema
    tool_args_error: str | None = None  # the first reason they don't
    tool_call_tokens: Count | None = None  # usage's completion tokens beyond the text's and the reasoning's
    # structured output (response_format): the answer's text parses and matches the schema
    output_valid: bool | None = None
    output_error: str | None = None
    # what a server compiles into a grammar (workloads.tools.Ask.constraint_sha256), and whether this request was
    # the run's first to send it (its first use: the compile is in its wait)
    constraint_sha256: str | None = None
    constraint_first_use: bool | None = None
    # an agent task's later step (conversation/turn): the previous step's answer ended -> this request was sent
    # (the tool's latency from the answer's end, and what of the client's own work outlasted it); tool_wait_set_ms:
    # the latency as the workload set it
    tool_wait_ms: Finite | None = None
    tool_wait_set_ms: Finite | None = None

    def shapeless(self) -> bool:
        """True when recorded before the shape of the wait: stamps, but no reader's figures
        (:func:`llmbench.results.metrics.fill_shape` computes them)."""
        return self.andes_qoe is None and bool(self.token_times_ms)

    @model_validator(mode="after")
    def _invariants(self) -> RequestResult:
        stamps = self.output_tokens if self.chunks is None else self.chunks
        if len(self.token_times_ms) != stamps:
            raise ValueError("len(token_times_ms) != output_tokens (chunks, for endpoint runs)")
        if (self.ttft_ms is None) != (not self.token_times_ms):
            raise ValueError("ttft_ms is null exactly when token_times_ms is empty (an answer without text)")
        if self.token_times_ms and self.token_times_ms[0] != self.ttft_ms:
            raise ValueError("token_times_ms[0] != ttft_ms")
        return self


class Stats(_Model):
    n: Count
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    std: float


class Share(_Model):
    """k of n, with its Wilson 95% interval (llmbench.results.agents.share)."""

    k: Count
    n: Count
    share: float = Field(ge=0, le=1)
    low: float = Field(ge=0, le=1)
    high: float = Field(ge=0, le=1)


class TaskFigures(_Model):
    """Agent tasks (llmbench.results.agents.task_figures): each task's end-to-end time, split exactly into model
    time (its steps' requests, sent -> stream end) and tool time (the waits between them)."""

    tasks: Count  # whole tasks: every step it sent finished
    tasks_partial: Count = 0  # a step failed: the task ended there (not in the figures below)
    ended_by_answer: Count = 0  # the model's last answer called no tool (it finished before its results ran out)
    steps: Stats | None = None  # requests per task
    e2e_ms: Stats | None = None  # first step sent -> last step's stream end
    model_ms: Stats | None = None  # sum of its steps' request lives
    model_first_event_ms: Stats | None = None  # of which each step's wait for its first answer event, summed
    model_after_first_ms: Stats | None = None  # and the rest: decoding, each stream's end
    tool_ms: Stats | None = None  # sum of the waits between steps (measured)
    tool_set_ms: Stats | None = None  # sum of the tool latencies the workload set
    model_share: float | None = None  # sum(model_ms) / sum(e2e_ms) over the tasks
    step_ttft_ms: Stats | None = None  # each step's first answer event (text, else a tool call's name)
    cached_tokens_share_later_steps: float | None = None  # steps after the first: sum(cached) / sum(prompt tokens)


class Summary(_Model):
    requests: Count
    ttft_ms: Stats | None  # None: no answer had visible text (tool calls alone)
    tpot_ms: Stats | None = None
    e2e_ms: Stats
    output_tokens: Stats
    decode_tokens_per_s: Stats | None = None
    tokenize_ms: Stats | None = None
    prefill_tokens_per_s: Stats | None = None
    tpot_bound_ms: float | None = None  # roofline: decode_weight_bytes / mem_read_gbps
    tpot_efficiency: float | None = None  # tpot_bound_ms / mean TPOT (1.0 = at the memory limit)
    roofline_mem_read_gbps: float | None = None  # the bandwidth the bound used
    stream_buffered: bool | None = None  # endpoint runs: the events arrived in bursts (see metrics)
    stream_gaps_under_1ms_share: float | None = None
    stream_largest_burst: int | None = None
    stream_buffered_requests: int | None = None
    # endpoint runs whose server reports usage.prompt_tokens_details.cached_tokens (metrics.cache_figures)
    cached_tokens_share: float | None = None  # sum(cached_tokens) / sum(prompt_tokens)
    # TTFT of cold and warm requests: by the workload's structure (requests[].cold) where it has one, else by
    # the server's cache (nothing cached: cold)
    ttft_cold_ms: Stats | None = None
    ttft_warm_ms: Stats | None = None
    failed_requests: int = 0
    # open-loop runs
    offered_rate_rps: float | None = None  # the schedule's rate
    achieved_rate_rps: float | None = None  # finished requests / (last end - first scheduled send)
    send_lateness_ms: Stats | None = None
    ttft_from_schedule_ms: Stats | None = None
    ttfrt_ms: Stats | None = None  # reasoning streams
    # the shape of the wait, over the requests that have it (METRIC_FORMULAS)
    reader_stall_ms: Stats | None = None
    reader_stalls: Stats | None = None
    andes_qoe: Stats | None = None
    fluidity: Stats | None = None
    decode_chars_per_s: Stats | None = None
    decode_words_per_s: Stats | None = None
    token_count_disagreements: int | None = None  # requests whose server and client counts differ
    # --engine: the engine's own timers beside llmbench's stamps, and requests that reused a cached prefix
    engine_ttft_ms: Stats | None = None
    engine_tpot_ms: Stats | None = None
    tpot_vs_engine_pct: float | None = None
    prompt_reuse_requests: int | None = None
    # --speculative (metrics.speculative_figures): sums over the requests, and the lossless check's count
    forwards: int | None = None
    tokens_per_forward: float | None = None
    drafted_tokens: int | None = None
    accepted_tokens: int | None = None
    acceptance_rate: float | None = None
    draft_ms: Stats | None = None
    lossless_checked: int | None = None
    lossless_mismatches: int | None = None
    # tool calls and structured output (llmbench.results.agents.tool_figures)
    tool_offered: int | None = None  # requests that offered tools (or got calls unasked)
    tool_answers: Share | None = None  # of those, answers with at least one call
    tool_calls_per_answer: Stats | None = None
    tool_name_ms: Stats | None = None  # over the answers with calls
    tool_args_ms: Stats | None = None  # over the answers whose first call's arguments parsed
    tool_args_valid: Share | None = None  # answers whose every call names an offered tool with matching arguments
    output_valid: Share | None = None  # answers to a response_format whose text matches its schema
    constraint_first_use_ms: Stats | None = None  # first answer event of a constraint's first request
    constraint_reuse_ms: Stats | None = None  # ... of its later requests
    tasks: TaskFigures | None = None


class Probe(_Model):
    method: Literal["torch", "numpy"] = "torch"  # numpy: an endpoint run's client (no torch there), 1 thread
    mem_read_gbps: float  # float32 sum over 256 MB (1 GB on GPU), the run's device and threads, median of 7
    matmul_gflops: float  # float32 256x1024 @ 1024x1024, the run's device and threads, median of 25
    threads: int
    seconds: float


class MachineSample(_Model):
    t_s: float  # seconds since sampling started
    cpu_busy_pct: float  # whole machine, 100 = every CPU busy
    own_cpu_pct: float  # this process, same scale
    other_cpu_pct: float  # busy - own: every other process
    steal_pct: float  # time the hypervisor gave this VM's CPUs to someone else
    load1: float
    freq_mhz: float | None = None
    rss_bytes: int
    swap_used_bytes: int


class MachineSummary(_Model):
    samples: int
    cpu_busy_pct_mean: float
    own_cpu_pct_mean: float
    other_cpu_pct_mean: float
    other_cpu_pct_max: float
    steal_pct_mean: float
    steal_pct_max: float
    load1_max: float
    freq_mhz_mean: float | None = None
    rss_max_bytes: int
    swap_used_max_bytes: int
    # the sampler's own CPU time over the run (its thread's, every sample and NVML read included), and that as
    # a share of the run's wall time: what watching the machine cost it at most
    sampler_cpu_ms: float | None = None
    sampler_cpu_pct_of_wall: float | None = None


class MachineState(_Model):
    swap_in_bytes: int = 0  # system-wide, during the requests
    swap_out_bytes: int = 0
    process_swap_bytes: int = 0  # this process's pages in swap at the end (VmSwap)
    probe_before: Probe | None = None
    probe_after: Probe | None = None
    summary: MachineSummary | None = None
    samples: list[MachineSample] = []
    # runs on a CUDA device: the card's record (machine.telemetry.gpu_summary: energy, J per output token, clocks,
    # clock events, temperature, memory peaks, other processes; what the card can't give, and why) and samples
    gpu: rec.Gpu | None = None
    gpu_samples: list[rec.GpuSampleDict] = []


class ClientStats(_Model):
    """What the endpoint client itself cost: it shares the machine with a co-located server."""

    cpu_s: float  # this process's CPU time (user + system) during the measured requests
    wall_s: float
    cpu_pct_of_one_core: float  # 100 * cpu_s / wall_s
    cpu_ms_per_event: float | None = None  # cpu_s / content events received
    # the client's self-check (ENDPOINT_METRIC_FORMULAS "client_lag_ms", "loop_lag_ms"): how late its stamps were
    # behind the server's sends (where the server sends its send stamps), and how late its event loop woke
    processes: int = 1  # client processes whose cost this is (the run's --workers)
    lag_events: int | None = None
    lag_p50_ms: Finite | None = None
    lag_p99_ms: Finite | None = None
    lag_max_ms: Finite | None = None
    loop_lag_p50_ms: Finite | None = None
    loop_lag_p99_ms: Finite | None = None
    loop_lag_max_ms: Finite | None = None
    # how long the event loop's thread was ready to run but waited for a CPU (Linux schedstat: another process or
    # thread had its core), over the window: summed over processes; per run: the worst process's mean per wake-up
    sched_wait_ms: Ms | None = None
    sched_runs: Count | None = None
    sched_wait_per_run_ms: Ms | None = None
    fell_behind: bool | None = None  # the self-check's verdict (llmbench.results.client.behind_reasons)
    host: str | None = None  # a client process's machine (per_process; --ray's workers may run on several)
    # --workers, --ray: each client process's own record (its requests' lag, its loop's, its CPU): which fell behind
    per_process: list[ClientStats] | None = None


class ServerBoot(_Model):
    """``run --endpoint --server-command``: the server llmbench started, its cold start as its first user sees it
    (seconds from its exec on this process's clock; ENDPOINT_METRIC_FORMULAS "server_boot" says what each spans)."""

    program: str  # the command's program, its file name alone: the arguments may hold a secret
    poll_s: float  # the polling interval: the resolution of exec_to_listening_s and exec_to_ready_s
    log: str | None = None  # the file beside the run that holds the server's stdout and stderr
    exec_to_listening_s: float
    exec_to_ready_s: float
    ready_to_first_request_s: float | None = None
    exec_to_first_token_s: float | None = None
    first_prompt_index: int | None = None  # the first request ever sent (requests[0])
    first_repeat: int | None = None
    first_request_ttft_ms: float | None = None
    warm_ttft_p50_ms: float | None = None  # the median TTFT of the run's other requests
    warm_requests: int = 0
    first_request_penalty_ms: float | None = None  # first_request_ttft_ms - warm_ttft_p50_ms


class FailedRequest(_Model):
    prompt_index: Index
    repeat: Index
    error: str
    status: int | None = None  # HTTP status, when there was one
    started_s: Finite = 0.0
    session: Count = 0
    scheduled_s: Finite | None = None  # open-loop runs: when it was due


class Columns(_Model):
    """Where a version-2 run's requests are (llmbench.results.columns): one row per request, ab's one-token
    requests among them (``ttft_only``)."""

    file: str  # a file name in the JSON's own folder (no folder part: the two are copied together)
    format: Literal["arrow-ipc-stream"] = "arrow-ipc-stream"
    rows: Count | None = None  # None (with sha256) while the run was being written: a killed run's stream
    sha256: str | None = None
    size_bytes: Count | None = None  # the file's size (a reader that needs no request checks this alone)

    @field_validator("file")
    @classmethod
    def _plain_name(cls, v: str) -> str:
        if not v or v != v.strip() or "/" in v or "\\" in v or v.startswith(".") or not v.endswith(".arrow"):
            raise ValueError(f"{v!r} is not a columns file name beside the run (NAME.arrow, no folder)")
        return v

    @model_validator(mode="after")
    def _both_or_neither(self) -> Columns:
        if not (self.rows is None) == (self.sha256 is None) == (self.size_bytes is None):
            raise ValueError("rows, sha256 and size_bytes are given together (all null while the run was written)")
        if self.sha256 is not None and (len(self.sha256) != 64 or set(self.sha256) - set("0123456789abcdef")):
            raise ValueError("sha256 is 64 lowercase hex digits")
        return self


def _columns_match_version(run: Any) -> Any:
    if run.schema_version != 3 and (run.schema_version == 2) != (run.columns is not None):
        raise ValueError("schema_version 2 names its columns file (columns); version 1 holds its requests inline")
    return run


class Session(_Model):
    """One invocation that contributed requests (a resumed run has several)."""

    started_at: str
    environment: Environment
    load: LoadInfo | None = None
    interrupted_by: str | None = None  # "SIGINT" | "SIGTERM" when it stopped early


class Run(_Model):
    schema_version: Literal[1, 2, 3]  # SCHEMA_VERSIONS; a file of another version is refused, never misread
    llmbench_version: str
    run_id: str
    created_at: str  # ISO 8601, UTC
    complete: bool
    columns: Columns | None = None  # version 2: the requests are in this file beside the JSON, not in it
    config: RunConfig
    environment: Environment
    load: LoadInfo | None = None
    metrics: dict[str, str] = METRIC_FORMULAS
    warnings: list[str] = []
    requests: list[RequestResult] = []
    warmup_requests: list[RequestResult] = []
    # ab's TTFT-only requests (one output token each): compare's TTFT rows pool them with ``requests``; every
    # other figure, the summary included, is over ``requests`` alone
    ttft_requests: list[RequestResult] = []
    summary: Summary | None = None
    machine: MachineState | None = None
    sessions: list[Session] = []
    client: ClientStats | None = None  # endpoint runs
    failed_requests: list[FailedRequest] = []  # endpoint runs: requests the server failed, the rest went on
    quality: rec.Quality | None = None  # sweep --quality: the setup against the reference (llmbench quality's)
    # in-process runs: what the tokens cost the CPU (llmbench.machine.telemetry.cpu_record): cpu_s, cores_busy,
    # cpu_ms_per_output_token, cpu_ms_per_request, freq_mhz_mean, energy_j (RAPL) or energy_missing
    cpu: rec.Cpu | None = None
    # endpoint runs with --server-metrics: the server's Prometheus page over the window (servermetrics.summarize)
    server_metrics: rec.ServerMetrics | None = None
    server_boot: ServerBoot | None = None  # endpoint runs with --server-command: the server's cold start

    @model_validator(mode="after")
    def _versions(self) -> Any:
        return _columns_match_version(self)


class _Lean(BaseModel):
    # Fields not declared are skipped, not built: reading a 10,000-request run this way takes ~0.1 s.
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class RequestScalars(_Lean):
    """A request without its token stamps and text: what compare needs."""

    prompt_index: Index
    repeat: Index
    prompt_tokens: Count | None
    output_tokens: Count
    ttft_ms: Ms | None
    tpot_ms: Ms | None
    e2e_ms: Ms
    output_token_ids_sha256: str
    prompt_token_ids_sha256: str | None = None
    process: Count | None = None
    pinned_cpu: Count | None = None
    tokenize_ms: Ms = 0.0
    ttft_only: bool = False
    tool_name_ms: Finite | None = None  # compare's rows of what a program waits for
    tool_args_ms: Finite | None = None
    cached_tokens: Count | None = None  # compare's lever lines: the prefix's length, the first lossless mismatch
    lossless: bool | None = None
    first_difference: Count | None = None
    # the shape of the wait (compare's shape rows); None in a run from before it, which is then read whole
    reader_stall_ms: float | None = None
    reader_stalls: int | None = None
    reader_longest_stall_ms: float | None = None
    andes_qoe: float | None = None
    fluidity: float | None = None
    decode_chars_per_s: float | None = None


class RunScalars(_Lean):
    """A run without per-token data (``load_run(..., scalars_only=True)``)."""

    schema_version: Literal[1, 2, 3]
    llmbench_version: str
    run_id: str
    created_at: str
    complete: bool
    columns: Columns | None = None
    config: RunConfig
    environment: Environment
    load: LoadInfo | None = None
    machine: MachineState | None = None
    summary: Summary | None = None
    requests: list[RequestScalars] = []
    ttft_requests: list[RequestScalars] = []
    failed_requests: list[FailedRequest] = []  # small: what failed, when it was due (load's report draws them)
    quality: rec.Quality | None = None
    warnings: list[str] = []
    cpu: rec.Cpu | None = None
    server_metrics: rec.ServerMetrics | None = None
    server_boot: ServerBoot | None = None
    client: ClientStats | None = None  # compare says whose client fell behind

    @model_validator(mode="after")
    def _versions(self) -> Any:
        return _columns_match_version(self)


def must_match(purpose: str, model: type[BaseModel] = RunConfig, prefix: str = "") -> tuple[str, ...]:
    """The (dotted) field names of ``model`` whose ``match`` includes ``purpose``, nested models walked."""
    keys: list[str] = []
    for name, f in model.model_fields.items():
        extra = f.json_schema_extra if isinstance(f.json_schema_extra, dict) else {}
        if purpose in (extra.get("match") or ()):  # type: ignore[operator]
            keys.append(prefix + name)
        sub = f.annotation
        for arg in getattr(sub, "__args__", ()) or (sub,):
            if isinstance(arg, type) and issubclass(arg, _Model) and arg is not model:
                keys += must_match(purpose, arg, f"{prefix}{name}.")
    return tuple(keys)


def field_value(data: dict, key: str) -> Any:
    """``data["a"]["b"]`` for ``"a.b"`` (None where a level is missing or None)."""
    for part in key.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)  # type: ignore[assignment]
    return data


def differences(a: dict, b: dict, keys: tuple[str, ...]) -> list[tuple[str, Any, Any]]:
    """(key, a's value, b's value) for each key whose values differ."""
    return [(k, field_value(a, k), field_value(b, k)) for k in keys if field_value(a, k) != field_value(b, k)]


def utc_now() -> str:
    """ISO 8601 UTC to the second, as every timestamp in a run is written."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def llmbench_version() -> str:
    """This package's version."""
    from llmbench.core.version import __version__

    return __version__


def new_run_record(config: RunConfig, environment: Environment, **fields: Any) -> Run:
    """A run before its first request (every mode): version stamps, a fresh id, ``complete: false``."""
    import uuid

    return Run(
        schema_version=1,  # SCHEMA_VERSION, as the Literal the model declares
        llmbench_version=llmbench_version(),
        run_id=uuid.uuid4().hex,
        created_at=utc_now(),
        complete=False,
        config=config,
        environment=environment,
        **fields,
    )
