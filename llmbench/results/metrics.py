"""Stamps -> numbers, for every mode: one request's metrics, and a run's summary (numpy, no torch).

The formulas are written in ``schema.METRIC_FORMULAS`` (and so into every run JSON); this module computes
exactly those. In-process runs stamp tokens, endpoint runs stamp SSE events: the same function turns either
into a :class:`RequestResult`.
"""

from __future__ import annotations

import hashlib
import statistics
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from llmbench.results.agents import tool_figures
from llmbench.results.describe import describe as describe  # re-exported: the name every reader imports
from llmbench.results.schema import RequestResult, RequestScalars, Summary

_NS_PER_MS = 1_000_000


def ids_sha256(ids: Sequence[int]) -> str:
    """A stable hash of a token-id sequence: compare uses it to spot changed outputs."""
    return hashlib.sha256(",".join(map(str, ids)).encode("ascii")).hexdigest()


def text_sha256(text: str) -> str:
    """The hash endpoint runs use in place of token ids (they receive text)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def first_difference(ours: Sequence[int], plain: Sequence[int]) -> int | None:
    """The first output position where ``ours`` differs from ``plain`` (where the shorter one ends, when one is a
    prefix of the other); None when they are equal: the lossless check's answer."""
    for i, (a, b) in enumerate(zip(ours, plain, strict=False)):
        if a != b:
            return i
    return None if len(ours) == len(plain) else min(len(ours), len(plain))


def bundle_stamps(stamps_ns: Sequence[int], sizes: Sequence[int]) -> list[int]:
    """One stamp per token from one stamp per bundle: the ``sizes[k]`` tokens of bundle ``k`` became visible
    together, at ``stamps_ns[k]`` (a speculative step hands over several tokens at once)."""
    return [t for t, n in zip(stamps_ns, sizes, strict=True) for _ in range(n)]


def request_result(
    *,
    prompt_index: int,
    repeat: int,
    start_ns: int,
    stamps_ns: Sequence[int],
    prompt_tokens: int | None,
    output_sha256: str,
    output_text: str,
    tokenized_ns: int | None = None,
    output_tokens: int | None = None,
    last_token_ns: int | None = None,
    started_s: float = 0.0,
    answered_ns: int | None = None,
    **extra: Any,
) -> RequestResult:
    """One request's metrics from raw clock readings, by the formulas in ``schema.METRIC_FORMULAS``.

    ``stamps_ns``: one stamp per token (in-process) or per content event (endpoint). ``output_tokens`` defaults
    to the number of stamps; an endpoint passes the count it got from usage or a tokenizer, and TPOT divides
    by tokens, not events. ``last_token_ns``: the stamp of the last counted token when it is not the last
    stamp (an end-of-sequence token that carried no text): TPOT's span ends there. ``tokenized_ns`` None:
    templating happened elsewhere (tokenize_ms 0). Times are rounded to the microsecond once, so
    ``token_times_ms[0] == ttft_ms`` exactly. ``answered_ns``: the answer's last event when it may be no text
    stamp (a tool call's arguments): E2E ends there; an answer without text has ``ttft_ms`` None.
    """
    times = [round((t - start_ns) / _NS_PER_MS, 3) for t in stamps_ns]
    n = len(times) if output_tokens is None else output_tokens
    last = round((last_token_ns - start_ns) / _NS_PER_MS, 3) if last_token_ns is not None else None
    span_end = last if last is not None else (times[-1] if times else None)
    tpot = (
        round((span_end - times[0]) / (n - 1), 4) if n >= 2 and span_end is not None and span_end > times[0] else None
    )
    if last is not None:
        extra["eos_ms"] = last
    extra |= shape_fields(times, output_text, extra.get("text_offsets"))
    return RequestResult(
        prompt_index=prompt_index,
        repeat=repeat,
        prompt_tokens=prompt_tokens,
        output_tokens=n,
        tokenize_ms=round((tokenized_ns - start_ns) / _NS_PER_MS, 3) if tokenized_ns is not None else 0.0,
        ttft_ms=times[0] if times else None,
        tpot_ms=tpot,
        e2e_ms=round((answered_ns - start_ns) / _NS_PER_MS, 3)
        if answered_ns is not None
        else times[-1]
        if times
        else float("nan"),
        token_times_ms=times,
        output_token_ids_sha256=output_sha256,
        output_text=output_text,
        started_s=round(started_s, 6),
        **extra,
    )


def shape_fields(
    times_ms: Sequence[float], text: str, offsets: Sequence[int] | None, reader: dict[str, Any] | None = None
) -> dict[str, Any]:
    """A request's shape-of-the-wait fields (:mod:`llmbench.results.reader`) at the pace ``reader`` records (a
    run's ``config.reader``; None: the default); the offsets are dropped when they don't match the stamps (one per
    stamp)."""
    return _shape_fields_of([(times_ms, text, offsets)], reader)[0]


def _shape_fields_of(answers: Sequence[Any], reader: dict[str, Any] | None) -> list[dict[str, Any]]:
    """:func:`shape_fields` of each (stamps, text, offsets), computed together (:func:`reader.shapes`)."""
    from llmbench.results.reader import Pace, shapes

    answers = [(t, text, list(o) if o is not None and len(o) == len(t) else None) for t, text, o in answers]
    out: list[dict[str, Any]] = []
    for (times, _, ends), s in zip(answers, shapes(answers, Pace.of(reader)), strict=True):
        if not len(times):
            out.append({})
            continue
        # decode speed in visible characters and words (schema.METRIC_FORMULAS), which two tokenizers share
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        chars = s.later_chars * 1000.0 / span if span > 0 else None
        out.append({
            "text_offsets": ends,
            "first_visible_ms": s.reading.first_visible_ms,
            "reader_stall_ms": round(s.reading.stall_ms, 3),
            "reader_stalls": s.reading.stalls,
            "reader_longest_stall_ms": round(s.reading.longest_stall_ms, 3),
            "andes_qoe": round(s.andes_qoe, 4),
            "fluidity": round(s.fluidity, 4) if s.fluidity is not None else None,
            "decode_chars_per_s": round(chars, 3) if chars is not None else None,
            "decode_words_per_s": round(chars / s.chars_per_word, 3) if chars is not None else None,
        })  # fmt: skip
    return out


def reshape(request: RequestResult, reader: dict[str, Any] | None) -> RequestResult:
    """``request`` with its shape-of-the-wait fields at the pace ``reader`` records (a run's ``config.reader``), in
    place: backends stamp at the default pace; a run asked another one reshapes each request as it is recorded."""
    return _reshape([request], reader)[0]


def _reshape(requests: Sequence[Any], reader: dict[str, Any] | None) -> Sequence[Any]:
    """:func:`reshape` of many requests at once (a run read from before the shape: one array pass)."""
    answers = [(r.token_times_ms, r.output_text, r.text_offsets) for r in requests]
    for r, fields in zip(requests, _shape_fields_of(answers, reader), strict=True):
        for name, value in fields.items():
            setattr(r, name, value)
    return requests


def fill_shape(run: Any) -> int:
    """A run recorded before the shape of the wait: each request's shape (its text spread evenly over its events:
    it kept no offsets) and the summary's, in place. Returns the requests filled (0: nothing was missing)."""
    todo = [r for r in (*run.requests, *run.ttft_requests) if r.shapeless()]
    _reshape(todo, run.config.reader)
    if todo and run.summary is not None:
        for name, stats in shape_summary(run.requests).items():
            setattr(run.summary, name, stats)
    return len(todo)


# a request's shape and its speed in characters, summarised
SHAPE_METRICS = ("reader_stall_ms", "reader_stalls", "andes_qoe", "fluidity", "decode_chars_per_s",
                 "decode_words_per_s")  # fmt: skip


def shape_summary(requests: Sequence[Any]) -> dict[str, Any]:
    """The summary's shape-of-the-wait figures over ``requests`` (those that have each)."""
    return {k: describe(v for r in requests if (v := getattr(r, k)) is not None) for k in SHAPE_METRICS}


def decode_tokens_per_s(r: RequestResult | RequestScalars) -> float | None:
    """(n - 1) / (last - first) for one request; None with fewer than 2 tokens or no time between them. The
    first and last stamps are ``ttft_ms`` and ``e2e_ms`` (the run's invariants), so a reader without the stamps
    gets the same number."""
    if r.output_tokens < 2 or r.ttft_ms is None:
        return None
    span_ms = r.e2e_ms - r.ttft_ms
    return (r.output_tokens - 1) / (span_ms / 1000.0) if span_ms > 0 else None


def prefill_tokens_per_s(r: RequestResult | RequestScalars) -> float | None:
    """prompt_tokens / (ttft - tokenize), per second; None when the prompt's length is unknown or there is no
    time between them."""
    if r.ttft_ms is None:
        return None
    span_ms = r.ttft_ms - getattr(r, "tokenize_ms", 0.0)
    return r.prompt_tokens / (span_ms / 1000.0) if r.prompt_tokens and span_ms > 0 else None


def roofline(decode_weight_bytes: int | None, mem_read_gbps: float | None, tpot_mean_ms: float | None):
    """(tpot_bound_ms, tpot_efficiency): the memory-bandwidth floor of a decode step, and how close TPOT is."""
    if not decode_weight_bytes or not mem_read_gbps:
        return None, None
    bound = decode_weight_bytes / (mem_read_gbps * 1e9) * 1000.0
    return round(bound, 3), (round(bound / tpot_mean_ms, 4) if tpot_mean_ms else None)


BURST_GAP_MS = 1.0  # events closer than this arrived together: a few ms of network/scheduling jitter is not it


def stream_shape(times_ms: Sequence[float]) -> tuple[int, int, int]:
    """(gaps, gaps under BURST_GAP_MS, largest burst) of one request's event arrival times."""
    gaps = [b - a for a, b in pairwise(times_ms)]
    under = largest = run = 0
    for g in gaps:
        if g < BURST_GAP_MS:
            under += 1
            run += 1
            largest = max(largest, run)
        else:
            run = 0
    return len(gaps), under, (largest + 1 if times_ms else 0)


def buffered_stream(times_ms: Sequence[float]) -> bool | None:
    """The buffering detector's verdict on one request's event arrival times: buffered when it has >= 3 events and
    at least half of its gaps are under :data:`BURST_GAP_MS`; None with fewer events."""
    if len(times_ms) < 3:
        return None
    gaps, under, _ = stream_shape(times_ms)
    return 2 * under >= gaps


# A mid-stream stall: one gap far above the request's own pace. A server that preempts a request (evicts its KV
# cache and later recomputes it) or swaps it out shows this way, as one long gap about a re-prefill of its context
# (vLLM counts preemptions only on the server, vllm:num_preemptions). The rule, per request with at least
# STALL_MIN_GAPS gaps between its stamps: a gap is a stall when it is at least STALL_RATIO times the request's median
# gap *and* at least STALL_MIN_MS longer than it (a 3 ms gap in a 0.3 ms stream is no stall anyone waits on).
STALL_RATIO = 8.0
STALL_MIN_MS = 50.0
STALL_MIN_GAPS = 4


def mid_stream_stalls(times_ms: Sequence[float]) -> list[float]:
    """The gaps (ms) of one request's stamps that are mid-stream stalls (the rule above); [] when it has fewer
    than ``STALL_MIN_GAPS`` gaps to judge its own pace by."""
    import numpy as np

    if len(times_ms) < STALL_MIN_GAPS + 1:
        return []
    gaps = np.diff(np.asarray(times_ms, dtype=float))
    median = float(np.median(gaps))
    return [float(g) for g in gaps[(gaps >= STALL_RATIO * median) & (gaps - median >= STALL_MIN_MS)]]


def stream_figures(requests: Sequence[RequestResult]) -> dict:
    """The buffering detector over an endpoint run's requests (fields of :class:`Summary`).

    A request is buffered when it has >= 3 events and at least half of its gaps are under 1 ms (they came
    out of one read); the run is, when at least half of such requests are. A direct stream's gaps are one
    decode step each (milliseconds); a relay that holds the body releases everything at once.
    """
    gaps = under = largest = buffered = eligible = 0
    for r in requests:
        g, u, big = stream_shape(r.token_times_ms)
        gaps, under, largest = gaps + g, under + u, max(largest, big)
        if (verdict := buffered_stream(r.token_times_ms)) is not None:
            eligible += 1
            buffered += verdict
    return {
        "stream_buffered": (2 * buffered >= eligible) if eligible else None,
        "stream_gaps_under_1ms_share": round(under / gaps, 4) if gaps else None,
        "stream_largest_burst": largest,
        "stream_buffered_requests": buffered,
    }


def summarize(
    requests: Sequence[RequestResult],
    decode_weight_bytes: int | None = None,
    mem_read_gbps: float | None = None,
    *,
    failed: int = 0,
    offered_rate_rps: float | None = None,
) -> Summary | None:
    """The run's summary block, or None when no request finished. With the weights read per decode step and
    the measured bandwidth it adds the roofline (``tpot_bound_ms``, ``tpot_efficiency``); ``failed`` is the
    number of recorded failures; ``offered_rate_rps``: an open-loop run's schedule rate."""
    if not requests:
        return None
    tps = [v for v in (decode_tokens_per_s(r) for r in requests) if v is not None]
    tpot = describe(r.tpot_ms for r in requests if r.tpot_ms is not None)
    bound, efficiency = roofline(decode_weight_bytes, mem_read_gbps, tpot.mean if tpot else None)
    # TTFT over the answers with visible text (an answer of tool calls alone has none: tool_name_ms is its wait)
    ttft = describe(r.ttft_ms for r in requests if r.ttft_ms is not None)
    e2e, tokens = describe(r.e2e_ms for r in requests), describe(r.output_tokens for r in requests)
    assert e2e is not None and tokens is not None  # requests is not empty
    return Summary(
        requests=len(requests),
        ttft_ms=ttft,
        tpot_ms=tpot,
        e2e_ms=e2e,
        output_tokens=tokens,
        decode_tokens_per_s=describe(tps),
        tokenize_ms=describe(r.tokenize_ms for r in requests),
        prefill_tokens_per_s=describe(v for v in map(prefill_tokens_per_s, requests) if v is not None),
        tpot_bound_ms=bound,
        tpot_efficiency=efficiency,
        roofline_mem_read_gbps=mem_read_gbps if bound is not None else None,
        failed_requests=failed,
        **(stream_figures(requests) if any(r.chunks is not None for r in requests) else {}),
        **open_loop_figures(requests, offered_rate_rps),
        ttfrt_ms=describe(r.ttfrt_ms for r in requests if r.ttfrt_ms is not None),
        **shape_summary(requests),
        token_count_disagreements=count_disagreements(requests),
        **engine_figures(requests),
        **cache_figures(requests),
        **speculative_figures(requests),
        **tool_figures(requests),
    )


def speculative_figures(requests: Sequence[RequestResult]) -> dict:
    """Bundled tokens and the lossless check (fields of :class:`Summary`); {} for a plain run. Sums over the
    requests that counted them, so ``tokens_per_forward`` weighs every forward pass alike."""
    out: dict[str, Any] = {}
    counted = [r for r in requests if r.forwards]
    if counted:
        forwards = sum(r.forwards or 0 for r in counted)
        out.update(forwards=forwards, tokens_per_forward=round(sum(r.output_tokens for r in counted) / forwards, 4))
    drafting = [r for r in requests if r.drafted_tokens is not None and r.accepted_tokens is not None]
    if drafting:
        drafted = sum(r.drafted_tokens or 0 for r in drafting)
        accepted = sum(r.accepted_tokens or 0 for r in drafting)
        out.update(drafted_tokens=drafted, accepted_tokens=accepted,
                   acceptance_rate=round(accepted / drafted, 4) if drafted else None)  # fmt: skip
    timed = [r.draft_ms for r in requests if r.draft_ms is not None]
    if timed:
        out["draft_ms"] = describe(timed)
    checked = [r for r in requests if r.lossless is not None]
    if checked:
        out.update(lossless_checked=len(checked), lossless_mismatches=sum(not r.lossless for r in checked))
    return out


def lever_summary(run: Any) -> dict[str, Any] | None:
    """What a run's lever did, for the run's summary lines and compare: its label, tokens per forward and
    acceptance (--speculative), TTFT cold and warm and the prefix's length (--prefix-cache), and the lossless
    check with its first mismatch; None for a plain run. Reads a Run or RunScalars (no requests needed but for
    the first mismatch)."""
    c, s = run.config, run.summary
    spec, prefix = getattr(c, "speculative", None), getattr(c, "prefix_cache", None)
    if not spec and not prefix:
        return None
    if spec:
        label = (f"{spec['method']}:{spec['draft_tokens']}:{spec.get('max_ngram')}" if spec["method"] == "prompt-lookup"
                 else f"{spec['method']}:{spec.get('draft_model')}:{spec['draft_tokens']}")  # fmt: skip
    else:
        label = f"prefix-cache {prefix}"
    out: dict[str, Any] = {"label": label}
    if s is not None:
        out.update(tokens_per_forward=s.tokens_per_forward, acceptance_rate=s.acceptance_rate,
                   drafted_tokens=s.drafted_tokens, accepted_tokens=s.accepted_tokens,
                   lossless_checked=s.lossless_checked, lossless_mismatches=s.lossless_mismatches,
                   ttft_cold_p50_ms=s.ttft_cold_ms.p50 if s.ttft_cold_ms else None,
                   ttft_warm_p50_ms=s.ttft_warm_ms.p50 if s.ttft_warm_ms else None)  # fmt: skip
    cached = [r.cached_tokens for r in getattr(run, "requests", []) if getattr(r, "cached_tokens", None)]
    if cached:
        out["prefix_tokens"] = max(cached)
    first = next((r for r in getattr(run, "requests", []) if getattr(r, "lossless", None) is False), None)
    if first is not None:
        out["first_mismatch"] = {"prompt_index": first.prompt_index, "repeat": first.repeat,
                                 "position": first.first_difference}  # fmt: skip
    return out


def cache_figures(requests: Sequence[RequestResult]) -> dict:
    """Prefix reuse (fields of :class:`Summary`); {} without a workload structure or a server that says.

    ``cached_tokens_share`` = sum(cached_tokens) / sum(prompt_tokens) over the requests whose server reports
    both. TTFT split: by ``cold`` (the workload's structure: the first request to send its prefix) where the
    requests have it, else by the server's account (nothing cached: cold)."""
    told = [r for r in requests if r.cached_tokens is not None and r.prompt_tokens]
    structured = [r for r in requests if r.cold is not None]
    if not told and not structured:
        return {}
    prompt = sum(r.prompt_tokens or 0 for r in told)
    if structured:
        cold, warm = [r for r in structured if r.cold], [r for r in structured if not r.cold]
    else:
        cold, warm = [r for r in told if r.cached_tokens == 0], [r for r in told if (r.cached_tokens or 0) > 0]
    return {
        "cached_tokens_share": round(sum(r.cached_tokens or 0 for r in told) / prompt, 6) if prompt else None,
        "ttft_cold_ms": describe(r.ttft_ms for r in cold if r.ttft_ms is not None),
        "ttft_warm_ms": describe(r.ttft_ms for r in warm if r.ttft_ms is not None),
    }


def engine_figures(requests: Sequence[RequestResult]) -> dict:
    """The engine's own timers beside llmbench's stamps (fields of :class:`Summary`); {} when no request has
    them (transformers, endpoints). ``tpot_vs_engine_pct``: the median per-request ratio, so a request the
    machine disturbed does not move it."""
    timed = [r for r in requests if r.engine_tpot_ms or r.engine_ttft_ms or r.engine_prompt_tokens_evaluated]
    if not timed:
        return {}
    ratios = [r.tpot_ms / r.engine_tpot_ms for r in timed if r.tpot_ms and r.engine_tpot_ms]
    counted = [r for r in timed if r.engine_prompt_tokens_evaluated is not None and r.prompt_tokens is not None]
    return {
        "engine_ttft_ms": describe(r.engine_ttft_ms for r in timed if r.engine_ttft_ms is not None),
        "engine_tpot_ms": describe(r.engine_tpot_ms for r in timed if r.engine_tpot_ms is not None),
        "tpot_vs_engine_pct": round(100 * (statistics.median(ratios) - 1), 3) if ratios else None,
        # --prefix-cache's own reuse is accounted (cached_tokens): only reuse beyond it counts
        "prompt_reuse_requests": sum(
            r.engine_prompt_tokens_evaluated < r.prompt_tokens - (r.cached_tokens or 0)  # type: ignore[operator]
            for r in counted
        )
        if counted
        else None,
    }


def open_loop_figures(requests: Sequence[RequestResult], offered_rate_rps: float | None) -> dict:
    """An open-loop run's rates and lateness (fields of :class:`Summary`); {} for a closed-loop run.

    achieved_rate_rps = finished requests / (the last one's end - the first one's due time), both on the
    schedule's clock (``scheduled_s + e2e_from_schedule_ms``)."""
    due = [
        (r, s, e) for r in requests if (s := r.scheduled_s) is not None and (e := r.e2e_from_schedule_ms) is not None
    ]
    if not due:
        return {}
    timed = [r for r, _, _ in due]
    first = min(s for _, s, _ in due)
    last = max(s + e / 1000.0 for _, s, e in due)
    return {
        "offered_rate_rps": offered_rate_rps,
        "achieved_rate_rps": round(len(timed) / (last - first), 4) if last > first else None,
        "send_lateness_ms": describe(r.send_lateness_ms for r in timed if r.send_lateness_ms is not None),
        "ttft_from_schedule_ms": describe(
            r.ttft_from_schedule_ms for r in timed if r.ttft_from_schedule_ms is not None
        ),
    }


def count_disagreements(requests: Sequence[RequestResult]) -> int | None:
    """How many requests' server and client token counts differ; None when no request had both."""
    both = [r for r in requests if r.output_tokens_server is not None and r.output_tokens_client is not None]
    return sum(r.output_tokens_server != r.output_tokens_client for r in both) if both else None


def cold_start(run: Any) -> dict[str, Any] | None:
    """What a person waits before the first answer, from ``run.load``: the process's start to ready
    (``ready_s``), the load and its phases, quantizing, compiling and converting (``convert_cached`` when a
    cached conversion was used), the warm-up, and the first request's TTFT after loading against the measured
    median. None for a run without a load record (an endpoint run)."""
    load = getattr(run, "load", None)
    if load is None:
        return None
    phases = dict(load.phases or {})
    steps = (load.converted or {}).get("steps") or []
    ttfts = sorted(r.ttft_ms for r in run.requests if getattr(r, "ttft_ms", None) is not None)
    first = phases.pop("first_ttft_ms", None)
    if first is None and run.requests and not run.config.warmup:  # no warm-up: the first measured request did
        first = run.requests[0].ttft_ms
    return {
        "ready_s": load.startup_s,
        "load_s": load.seconds,
        **phases,
        "quantize_s": load.quantize_s,
        "compile_s": load.compile_s,
        "convert_s": load.convert_s,
        "convert_cached": all(bool(s.get("cached")) for s in steps) if steps else None,
        "weights_cache_hit": (load.weights_cache or {}).get("hit"),
        "first_ttft_ms": first,
        "ttft_p50_ms": float(statistics.median(ttfts)) if ttfts else None,
    }
