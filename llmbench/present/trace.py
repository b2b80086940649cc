"""A run as a trace in the Chrome Trace Event Format (JSON), which Perfetto's UI (ui.perfetto.dev: "Open trace
file") and chrome://tracing open: the run's requests on a shared timeline, each split into where its time went.

- One process per session ("llmbench run: MODEL"; a resumed run has several), one track (thread) per request,
  named by its prompt index and repeat (and its worker process, its session when there are several).
- A request's track is tiled by complete ("X") slices, from its start to its E2E with no gap and no overlap:
  "tokenize" (in-process runs), or "queue" (a server that reports its queue: ``server_queue_ms``), then
  "prefill (until first token)"; or, when nothing inside the TTFT is known, one "time to first token" slice.
  Then one "gap" slice per arrival after the first (stamps that share a time arrive together and share a slice:
  a speculative bundle, a burst), and a "tail" slice from the last stamp to ``e2e_ms`` when that is later.
- An answer of tool calls alone (no text stamps) is tiled "until the tool call's name", "tool call arguments" (to
  its calls' arguments whole) and a "tail" to ``e2e_ms``.
- Marks beside the tiling: "sent late" before the start (an open-loop request sent after its due time), "tool"
  before an agent task's step (the wait for the previous step's tool: ``tool_wait_ms``), "first reasoning event",
  "tool call name", "tool call arguments whole" and "stream end" instants.
- The reader's stalls (:mod:`llmbench.results.reader`, at the run's pace): each wait over ``STALL_MS`` is a
  "stall" slice on a "reader" track under the request (only requests that stall get one), coloured as bad.
- Counters ("C"): requests in flight (each request from its start to the later of its E2E and its stream's end),
  and the machine's samples where the run recorded them (GPU power; CPU busy share).
- Failed requests with a start time: a "failed" instant on a "failed requests" track.

Time. The format counts microseconds. Time 0 is the first measured request's start (``started_s`` counts from
it). A request's slice boundaries are whole microseconds from its start (the run's stamps are whole microseconds
already), ``ts`` = start + boundary and ``dur`` = next boundary - this one, so the durations telescope: they sum
to ``round(e2e_ms * 1000)`` exactly, within 0.5 us of ``e2e_ms``. The machine's samples count from the sampler's
creation (before the warm-up), not from the first request: the trace shifts them so that the first lands one
sampling interval (0.5 s) after time 0, when the sampler takes it (accurate to a few ms). ``displayTimeUnit``
("ms") sets chrome://tracing's display only; Perfetto ignores it: ``ts`` and ``dur`` are microseconds in both.

Pure Python (no numpy, no pandas): ``llmbench export --format trace`` needs no extra.
"""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError
from llmbench.results.reader import STALL_MS, Pace, visible_per_event, wait_spans
from llmbench.results.schema import RequestResult, Run, llmbench_version

SAMPLE_INTERVAL_S = 0.5  # llmbench.machine.probe.Sampler's interval: its first sample comes one interval in
TEXT_CHARS = 80  # an arrival's text in its slice's args, cut to this many characters
STALL_COLOUR = "terrible"  # one of chrome://tracing's reserved colour names (red)
FAILED_COLOUR = "terrible"


def trace_events(run: Run, pace: Pace | None = None) -> dict[str, Any]:
    """The run as one Chrome Trace Event Format object: ``{"traceEvents": [...], "displayTimeUnit": "ms",
    "metadata": {...}}``. ``pace``: the reader's pace for the stalls (None: the pace the run records)."""
    return {"traceEvents": list(iter_events(run, pace)), "displayTimeUnit": "ms", "metadata": trace_metadata(run, pace)}


def write_trace(run: Run, path: str | Path, pace: Pace | None = None) -> int:
    """Write :func:`trace_events`'s object to ``path`` as JSON, one event a line, streamed (a 10,000-request run
    never holds its events in memory at once); returns the number of events. :class:`UserError` when the file
    can't be written."""
    p = Path(path)
    n = 0
    try:
        with p.open("w", encoding="utf-8") as f:
            f.write('{"traceEvents": [')
            for event in iter_events(run, pace):
                f.write(("," if n else "") + "\n" + json.dumps(event, separators=(",", ":")))
                n += 1
            f.write(f'\n],\n"displayTimeUnit": "ms",\n"metadata": {json.dumps(trace_metadata(run, pace))}}}\n')
    except OSError as e:
        with contextlib.suppress(OSError):  # no half trace left behind: a viewer would refuse it anyway
            p.unlink(missing_ok=True)
        raise UserError(f"cannot write {p}: {e.strerror or e}") from None
    return n


def trace_metadata(run: Run, pace: Pace | None = None) -> dict[str, Any]:
    """The trace's ``metadata``: which run it is, and how its times were laid out."""
    c, pace = run.config, pace or Pace.of(run.config.reader)
    return {
        "run_id": run.run_id,
        "model": c.model,
        "llmbench_version": run.llmbench_version,
        "exported_by": f"llmbench {llmbench_version()}",
        "created_at": run.created_at,
        "complete": run.complete,
        "mode": c.mode,
        "engine": c.engine,
        "device": c.device,
        "dtype": c.dtype,
        "time_origin": "the first measured request's start (requests[].started_s = 0); ts in microseconds",
        "reader": {"words_per_minute": pace.words_per_minute, "chars_per_s": pace.chars_per_s, "stall_ms": STALL_MS},
        "machine_samples": f"shifted so the first lands {SAMPLE_INTERVAL_S} s after time 0 (the sampler's interval)",
    }


def iter_events(run: Run, pace: Pace | None = None) -> Iterator[dict[str, Any]]:
    """The trace's events, process by process (one per session): metadata, each request's track (and its reader
    track when it stalls), the failed requests, the counters. Args that are None or not finite are left out (NaN
    is not JSON; a viewer refuses the file)."""
    for event in _events(run, pace or Pace.of(run.config.reader)):
        event["args"] = {k: v for k, v in event["args"].items() if _json_value(v)}
        yield event


def _events(run: Run, pace: Pace) -> Iterator[dict[str, Any]]:
    requests = [*run.requests, *run.ttft_requests]
    sessions = sorted({r.session for r in requests} | {f.session for f in run.failed_requests}) or [0]
    several = len(sessions) > 1
    # Every tid is unique in the trace: Perfetto's importer names a thread by its tid alone and starts a new
    # thread when a tid shows up in another process. Each process has its own tid for its name and counters.
    own = 1
    for session in sessions:
        pid = session + 1
        name = f"llmbench run: {run.config.model}" + (f" (session {session})" if several else "")
        yield _meta("process_name", pid, own, name=name, model=run.config.model,
                    llmbench_version=run.llmbench_version, run_id=run.run_id)  # fmt: skip
        yield _meta("process_sort_index", pid, own, sort_index=pid)
        mine = sorted((r for r in requests if r.session == session),
                      key=lambda r: (r.started_s, r.prompt_index, r.repeat))  # fmt: skip
        for i, r in enumerate(mine):  # two tids each: the request's track, its reader's
            yield from _request_events(r, pid, own + 1 + 2 * i, pace, session if several else None)
        yield from _failed_events(run, session, pid, own + 1 + 2 * len(mine))
        yield from _in_flight(mine, pid, own)
        if session == sessions[-1]:  # the machine record is the last session's
            yield from _machine_counters(run, pid, own)
        own += 2 * len(mine) + 2


def _us(ms: float) -> int:
    """Milliseconds as whole microseconds (the format's unit; the run's stamps are whole microseconds)."""
    return round(ms * 1000.0)


def _meta(what: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": what, "ph": "M", "ts": 0, "pid": pid, "tid": tid, "args": args}


def _track_name(r: RequestResult, session: int | None) -> str:
    name = f"prompt {r.prompt_index} repeat {r.repeat}"
    if r.process is not None:
        name += f" process {r.process}"
    if session is not None:
        name += f" session {session}"
    return name + (" (TTFT only)" if r.ttft_only else "")


def _request_events(r: RequestResult, pid: int, tid: int, pace: Pace,
                    session: int | None) -> Iterator[dict[str, Any]]:  # fmt: skip
    """One request's track: its name, the slices that tile it, its marks; its reader track when it stalls."""
    name = _track_name(r, session)
    yield _meta("thread_name", pid, tid, name=name)
    yield _meta("thread_sort_index", pid, tid, sort_index=tid)
    start = round(r.started_s * 1e6)
    base = {"pid": pid, "tid": tid}
    at = 0
    for slice_name, cat, end, args in _tiling(r):
        end = max(end, at)  # stamps never go backwards; if a hand-edited file's do, no negative slice
        if end > at:
            yield {"name": slice_name, "cat": cat, "ph": "X", "ts": start + at, "dur": end - at, **base, "args": args}
        at = end
    late = r.send_lateness_ms
    if late is not None and _finite(late) and _us(late) > 0:  # an open-loop request sent after its due time
        ts = max(0, start - _us(late))
        yield {"name": "sent late", "cat": "schedule", "ph": "X", "ts": ts, "dur": start - ts, **base,
               "args": {"send_lateness_ms": late, "scheduled_s": r.scheduled_s}}  # fmt: skip
    wait = r.tool_wait_ms
    if wait is not None and _finite(wait) and _us(wait) > 0:  # an agent task's step: the tool ran before it
        ts = max(0, start - _us(wait))
        yield {"name": "tool", "cat": "agent", "ph": "X", "ts": ts, "dur": start - ts, **base,
               "args": {"tool_wait_ms": wait, "tool_wait_set_ms": r.tool_wait_set_ms}}  # fmt: skip
    marks = (("first reasoning event", r.ttfrt_ms), ("tool call name", r.tool_name_ms),
             ("tool call arguments whole", r.tool_calls_ms), ("stream end", r.stream_end_ms))  # fmt: skip
    for mark, ms in marks:
        if ms is not None and _finite(ms) and (mark != "stream end" or _us(ms) > at):
            yield {"name": mark, "cat": "mark", "ph": "i", "s": "t", "ts": start + _us(ms), **base,
                   "args": {"at_ms": ms}}  # fmt: skip
    stalls = _stalls(r, pace)
    if stalls:
        rtid = tid + 1
        yield _meta("thread_name", pid, rtid, name=f"reader: {name}")
        yield _meta("thread_sort_index", pid, rtid, sort_index=rtid)
        for begin_ms, wait_ms, args in stalls:
            b = _us(begin_ms)
            yield {"name": "stall", "cat": "stall", "ph": "X", "ts": start + b, "dur": _us(begin_ms + wait_ms) - b,
                   "pid": pid, "tid": rtid, "cname": STALL_COLOUR, "args": args}  # fmt: skip


def _tiling(r: RequestResult) -> list[tuple[str, str, int, dict[str, Any]]]:
    """(name, category, end in whole us from the request's start, args) of each slice, in order: the TTFT's
    parts, one per arrival after the first, the tail; an answer of tool calls alone: until its name, its
    arguments, the tail. Empty for a request without stamps."""
    times = r.token_times_ms
    if not len(times) and r.tool_name_ms is not None and _finite(r.tool_name_ms):  # tool calls alone, no text
        name = min(_us(r.tool_name_ms), _us(r.e2e_ms))
        whole = max(name, min(_us(r.tool_calls_ms or r.e2e_ms), _us(r.e2e_ms)))
        called = {"tool_name_ms": r.tool_name_ms, "tool_calls_ms": r.tool_calls_ms, "e2e_ms": r.e2e_ms,
                  "tool_calls": r.tool_calls, "tool_call_names": r.tool_call_names}  # fmt: skip
        return [("until the tool call's name", "ttft", name, called), ("tool call arguments", "tool", whole, {}),
                ("tail", "tail", _us(r.e2e_ms), {})]  # fmt: skip
    if not times or not all(_finite(t) for t in times):
        return []
    ttft, pieces = _us(times[0]), _offsets(r)
    out: list[tuple[str, str, int, dict[str, Any]]] = []
    at = 0
    if r.tokenize_ms and _finite(r.tokenize_ms) and r.tokenize_ms > 0:  # in-process: templating, tokenizing
        at = min(_us(r.tokenize_ms), ttft)
        out.append(("tokenize", "ttft", at, {"tokenize_ms": r.tokenize_ms}))
    if r.server_queue_ms is not None and _finite(r.server_queue_ms) and r.server_queue_ms > 0:
        # the server's queue, inside the TTFT; placed first (where the request arrived is unknown: the transport
        # to the server is not measured apart)
        at = min(at + _us(r.server_queue_ms), ttft)
        out.append(("queue", "ttft", at, {"server_queue_ms": r.server_queue_ms}))
    first = {
        "ttft_ms": r.ttft_ms,
        "e2e_ms": r.e2e_ms,
        "tpot_ms": r.tpot_ms,
        "output_tokens": r.output_tokens,
        "prompt_tokens": r.prompt_tokens,
        "reader_stall_ms": r.reader_stall_ms,
        **_text(r, pieces, 0, 1),
    }
    out.append(("prefill (until first token)" if out else "time to first token", "ttft", ttft, first))
    k, n = 1, len(times)
    while k < n:  # one slice per arrival: stamps at the same microsecond arrived together
        j = k
        while j + 1 < n and _us(times[j + 1]) == _us(times[k]):
            j += 1
        args: dict[str, Any] = {"stamp": k, "gap_ms": round(times[k] - times[k - 1], 3), "stamps": j - k + 1}
        if r.chunks is None:  # in-process: one stamp per token (endpoint events carry unknown counts)
            args["tokens"] = j - k + 1
        out.append(("gap", "decode", _us(times[k]), {**args, **_text(r, pieces, k, j + 1)}))
        k = j + 1
    if _finite(r.e2e_ms) and _us(r.e2e_ms) > _us(times[-1]):
        out.append(("tail", "tail", _us(r.e2e_ms), {"e2e_ms": r.e2e_ms}))
    return out


def _offsets(r: RequestResult) -> list[int] | None:
    """Each stamp's text end in output_text, when the run recorded one per stamp."""
    ends = r.text_offsets
    return list(ends) if ends is not None and len(ends) == len(r.token_times_ms) else None


def _text(r: RequestResult, ends: Sequence[int] | None, k: int, j: int) -> dict[str, Any]:
    """The text stamps k..j-1 brought (cut to TEXT_CHARS), as a slice's args; nothing without offsets."""
    if ends is None:
        return {}
    piece = r.output_text[(ends[k - 1] if k else 0) : ends[j - 1]]
    return {"text": piece if len(piece) <= TEXT_CHARS else piece[:TEXT_CHARS] + "..."}


def _stalls(r: RequestResult, pace: Pace) -> list[tuple[float, float, dict[str, Any]]]:
    """The reader's waits over STALL_MS in this request: (start ms, wait ms, args)."""
    times = r.token_times_ms
    if not times or not all(_finite(t) for t in times):
        return []
    ends = _offsets(r)
    chars_per_s = pace.chars_per_s_for(r.output_text)
    visible = visible_per_event(r.output_text, ends, len(times))
    where = "recorded" if ends is not None else "spread evenly over the stamps (the run kept no offsets)"
    common = {"pace_chars_per_s": round(chars_per_s, 3), "text_offsets": where}
    return [
        (begin, wait, {"wait_ms": round(wait, 3), "from_ms": round(begin, 3), **common})
        for begin, wait in wait_spans(times, visible, chars_per_s)
        if wait > STALL_MS
    ]


def _failed_events(run: Run, session: int, pid: int, tid: int) -> Iterator[dict[str, Any]]:
    """The session's failed requests that recorded a start, as "failed" instants on one track."""
    failed = [f for f in run.failed_requests if f.session == session and "started_s" in f.model_fields_set]
    if not failed:
        return
    yield _meta("thread_name", pid, tid, name="failed requests")
    yield _meta("thread_sort_index", pid, tid, sort_index=tid)
    for f in failed:
        yield {"name": "failed", "cat": "failed", "ph": "i", "s": "t", "ts": round(f.started_s * 1e6), "pid": pid,
               "tid": tid, "cname": FAILED_COLOUR, "args": {"prompt_index": f.prompt_index, "repeat": f.repeat,
                                                             "error": f.error, "status": f.status}}  # fmt: skip


def _in_flight(requests: Sequence[RequestResult], pid: int, tid: int) -> Iterator[dict[str, Any]]:
    """The "in flight" counter: each request counts from its start until the later of its E2E and its stream's
    end (its connection is still open until then). One value per moment anything changes."""
    changes: dict[int, int] = {}
    for r in requests:
        ends = [ms for ms in (r.e2e_ms, r.stream_end_ms) if ms is not None and _finite(ms)]
        if not ends:
            continue
        start = round(r.started_s * 1e6)
        changes[start] = changes.get(start, 0) + 1
        end = start + _us(max(ends))
        changes[end] = changes.get(end, 0) - 1
    level = 0
    for ts in sorted(changes):
        level += changes[ts]
        yield {"name": "in flight", "ph": "C", "ts": ts, "pid": pid, "tid": tid, "args": {"requests": level}}


def _machine_counters(run: Run, pid: int, tid: int) -> Iterator[dict[str, Any]]:
    """GPU power and CPU busy share over the run, where the run recorded samples (nothing otherwise)."""
    m = run.machine
    if m is None:
        return
    gpu = [(x["t_s"], x["power_w"]) for x in m.gpu_samples
           if _finite(x.get("t_s")) and _finite(x.get("power_w"))]  # fmt: skip
    cpu = [(s.t_s, s.cpu_busy_pct, s.own_cpu_pct) for s in m.samples]
    first = min([t for t, *_ in gpu] + [t for t, *_ in cpu], default=None)
    if first is None:
        return
    shift = first - SAMPLE_INTERVAL_S  # the sampler's clock starts before the warm-up; see the module docstring

    def ts(t_s: float) -> int:
        return max(0, round((t_s - shift) * 1e6))

    for t_s, watts in gpu:
        yield {"name": "GPU power", "ph": "C", "ts": ts(t_s), "pid": pid, "tid": tid, "args": {"W": watts}}
    for t_s, busy, own in cpu:
        yield {"name": "CPU busy %", "ph": "C", "ts": ts(t_s), "pid": pid, "tid": tid,
               "args": {"machine": busy, "llmbench": own}}  # fmt: skip


def _json_value(v: Any) -> bool:
    """Worth an arg: not None, and not a float JSON can't carry."""
    return v is not None and (not isinstance(v, float) or math.isfinite(v))


def _finite(x: Any) -> bool:
    """A real number that JSON can carry (NaN and infinities are not JSON)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)
