"""``llmbench paint``'s numbers: one request's stamps in a real page -> TTFT, the first painted character, render lag
and paint gaps, on one timeline with the server's own stamps; and the record's formulas. Pure: no browser here.

A page's stamps are ``performance.now()`` readings (ms, the page's monotonic clock). ``performance.timeOrigin +
performance.now()`` is wall-clock ms, the same timeline as Python's ``time.time()`` and llmbench serve's
``arrived_unix_ms`` on one machine: that is how the server's stamps are placed beside the page's.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Sequence
from typing import Any

from llmbench.results.metrics import BURST_GAP_MS, buffered_stream, stream_shape

SLOW_PAINT_GAP_MS = 100.0  # a gap between two paints a reader notices: a tenth of a second without new text
AT_ONCE_SHARE = 0.5  # an answer is painted at once when its first painted frame holds at least this share of it

PAINT_FORMULAS = {
    "timeline": "every *_ms of a request is ms from its start in the page: performance.now() just before fetch(); "
    "the raw stamps (events[].read_ms, appended_ms, painted_ms, after_frame_ms, page.start_ms) are performance.now() "
    "readings, wall clock = page.time_origin_ms + stamp",
    "read_ms": "performance.now() when reader.read() returned the chunk that held the event (events of one chunk "
    "share it)",
    "appended_ms": "performance.now() after the event's text node was appended to the DOM",
    "painted_ms": "performance.now() in the first requestAnimationFrame callback after the append: the frame that "
    "draws it. rAF runs before that frame's style, layout and paint, so the pixels follow within the frame (~16.7 ms "
    "at 60 Hz): a paint time is precise to about one frame",
    "after_frame_ms": "performance.now() in the first task after that frame (a message posted from its rAF "
    "callback): its rendering is done by then",
    "ttft_ms": "events[0].read_ms - start: the first content event read",
    "first_paint_ms": "painted_ms of the first event holding a visible (not whitespace) character - start",
    "e2e_ms": "events[-1].read_ms - start: the last content event read",
    "last_paint_ms": "events[-1].painted_ms - start",
    "render_lag_ms": "painted_ms - read_ms per event: p50 and max over the request's events",
    "paint_gaps_ms": "gaps between successive painted frames (distinct painted_ms) from the first paint to the last: "
    f"max, and how many are over {SLOW_PAINT_GAP_MS:g} ms (over_100ms); frames: how many frames painted text",
    "first_frame_share": "share of the answer's events painted in the frame of the first paint",
    "painted_at_once": f"first_frame_share >= {AT_ONCE_SHARE:g} (3 events or more; else null): the page drew the "
    "answer in one go",
    "page_buffered": f"llmbench's buffering detector (run's stream_buffered) on the page's read_ms: 3 events or more "
    f"and at least half of the gaps between them under {BURST_GAP_MS:g} ms (they came out of one read)",
    "client.buffered": "the same detector on llmbench's own endpoint client's arrival stamps, the same prompt streamed "
    "once more after the page's request",
    "agree": "page_buffered, client.buffered (when measured) and painted_at_once all say the same",
    "server": "llmbench serve's own stamps (its usage chunk's llmbench block): arrived_ms = arrived_unix_ms - "
    "(page.time_origin_ms + page.start_ms), or 0 (the request's start; anchored: request-start) when the server "
    "sends no wall clock; first_token_ms = arrived_ms + ttft_ms; last_token_ms = arrived_ms + token_times_ms[-1]",
    "clock_check_ms": "page start on the wall clock - Python's time.time() before it asked the page to send: >= 0 "
    "when the page's and Python's clocks agree (the page's reaction time)",
}


def visible(text: str) -> bool:
    """Whether ``text`` holds a character a reader sees (not only whitespace)."""
    return any(not c.isspace() for c in text)


def first_visible(events: Sequence[dict]) -> int | None:
    """The index of the first event whose text holds a visible character; None when none does."""
    return next((i for i, e in enumerate(events) if visible(e.get("text") or "")), None)


def paint_gaps(painted_ms: Sequence[float]) -> dict[str, Any]:
    """The gaps between successive painted frames (distinct stamps, in order): their max, how many are over
    :data:`SLOW_PAINT_GAP_MS`, and the frames."""
    frames = sorted(set(painted_ms))
    gaps = [b - a for a, b in itertools.pairwise(frames)]
    return {"max": round(max(gaps), 3) if gaps else None, "over_100ms": sum(g > SLOW_PAINT_GAP_MS for g in gaps),
            "frames": len(frames)}  # fmt: skip


def render_lag(read_ms: Sequence[float], painted_ms: Sequence[float]) -> dict[str, float | None]:
    """Paint minus read, per event: p50 and max."""
    lags = [p - r for r, p in zip(read_ms, painted_ms, strict=True)]
    if not lags:
        return {"p50": None, "max": None}
    return {"p50": round(statistics.median(lags), 3), "max": round(max(lags), 3)}


def painted_at_once(painted_ms: Sequence[float]) -> tuple[float | None, bool | None]:
    """(first_frame_share, painted_at_once): the share of events painted in the first painted frame, and whether
    it is at least :data:`AT_ONCE_SHARE` (None below 3 events, as the detector)."""
    if not painted_ms:
        return None, None
    first = min(painted_ms)
    share = sum(p == first for p in painted_ms) / len(painted_ms)
    return round(share, 4), (share >= AT_ONCE_SHARE if len(painted_ms) >= 3 else None)


def _rel(t: float | None, start: float) -> float | None:
    return None if t is None else round(t - start, 3)


def server_on_timeline(server: dict | None, page_start_unix_ms: float) -> dict[str, Any] | None:
    """llmbench serve's stamps (ms since the request arrived there) on the page request's timeline."""
    if not isinstance(server, dict) or not isinstance(server.get("token_times_ms"), list):
        return None
    wall = server.get("arrived_unix_ms")
    arrived = round(wall - page_start_unix_ms, 3) if isinstance(wall, int | float) else 0.0
    times = [t for t in server["token_times_ms"] if isinstance(t, int | float)]
    return {
        "anchored": "server-clock" if isinstance(wall, int | float) else "request-start",
        "arrived_ms": arrived,
        "queue_ms": server.get("queue_ms"),
        "ttft_ms": server.get("ttft_ms"),
        "first_token_ms": round(arrived + times[0], 3) if times else None,
        "last_token_ms": round(arrived + times[-1], 3) if times else None,
        "token_times_ms": [round(arrived + t, 3) for t in times],
    }


def request_figures(page: dict, events: Sequence[dict], python_before_unix_ms: float) -> dict[str, Any]:
    """One request's figures from the page's raw record (``page``: time_origin_ms, start_ms, ..., server) and its
    content ``events`` (text, read_ms, appended_ms, painted_ms, ...), every figure in ms from the request's start."""
    start = page["start_ms"]
    reads = [e["read_ms"] for e in events]
    paints = [e["painted_ms"] for e in events]
    first = first_visible(events)
    share, at_once = painted_at_once(paints)
    page_start_unix = page["time_origin_ms"] + start
    rel_reads = [r - start for r in reads]
    gaps, under, _ = stream_shape(rel_reads)
    return {
        "events": len(events),
        "text_chars": sum(len(e.get("text") or "") for e in events),
        "ttft_ms": _rel(reads[0], start) if reads else None,
        "first_paint_ms": _rel(paints[first], start) if first is not None else None,
        "e2e_ms": _rel(reads[-1], start) if reads else None,
        "last_paint_ms": _rel(paints[-1], start) if paints else None,
        "headers_ms": _rel(page.get("headers_ms"), start),
        "render_lag_ms": render_lag(reads, paints),
        "paint_gaps_ms": paint_gaps(paints),
        "first_frame_share": share,
        "painted_at_once": at_once,
        "page_buffered": buffered_stream(rel_reads),
        "page_gaps_under_1ms_share": round(under / gaps, 4) if gaps else None,
        "page_start_unix_ms": round(page_start_unix, 3),
        "clock_check_ms": round(page_start_unix - python_before_unix_ms, 3),
        "server": server_on_timeline(page.get("server"), page_start_unix),
    }


def client_figures(start_unix_ms: float, token_times_ms: Sequence[float]) -> dict[str, Any]:
    """llmbench's endpoint client on the same prompt: its arrival stamps (ms from its own request's start) and the
    buffering detector's verdict on them."""
    gaps, under, largest = stream_shape(token_times_ms)
    return {
        "start_unix_ms": round(start_unix_ms, 3),
        "ttft_ms": round(token_times_ms[0], 3) if token_times_ms else None,
        "e2e_ms": round(token_times_ms[-1], 3) if token_times_ms else None,
        "buffered": buffered_stream(token_times_ms),
        "gaps_under_1ms_share": round(under / gaps, 4) if gaps else None,
        "largest_burst": largest,
        "token_times_ms": [round(t, 3) for t in token_times_ms],
    }


def agreement(figures: dict, client: dict | None) -> bool | None:
    """Whether the page's detector, the client's (when measured) and the paint times say the same; None when one
    has no verdict (fewer than 3 events)."""
    verdicts = [figures["page_buffered"], figures["painted_at_once"]]
    if client is not None:
        verdicts.append(client["buffered"])
    if any(v is None for v in verdicts):
        return None
    return len(set(verdicts)) == 1


def _median(values: Sequence[float | None]) -> float | None:
    got = [v for v in values if v is not None]
    return round(statistics.median(got), 3) if got else None


def summarize(requests: Sequence[dict]) -> dict[str, Any]:
    """The measured requests' medians and verdicts."""
    lags = [r["render_lag_ms"]["max"] for r in requests if r["render_lag_ms"]["max"] is not None]
    gaps = [r["paint_gaps_ms"]["max"] for r in requests if r["paint_gaps_ms"]["max"] is not None]
    clients = [r["client"] for r in requests if r.get("client") is not None]
    return {
        "requests": len(requests),
        "ttft_ms_p50": _median([r["ttft_ms"] for r in requests]),
        "first_paint_ms_p50": _median([r["first_paint_ms"] for r in requests]),
        "e2e_ms_p50": _median([r["e2e_ms"] for r in requests]),
        "render_lag_ms_p50": _median([r["render_lag_ms"]["p50"] for r in requests]),
        "render_lag_ms_max": round(max(lags), 3) if lags else None,
        "paint_gap_ms_max": round(max(gaps), 3) if gaps else None,
        "paint_gaps_over_100ms": sum(r["paint_gaps_ms"]["over_100ms"] for r in requests),
        "page_buffered_requests": sum(r["page_buffered"] is True for r in requests),
        "painted_at_once_requests": sum(r["painted_at_once"] is True for r in requests),
        "client_ttft_ms_p50": _median([c["ttft_ms"] for c in clients]),
        "client_buffered_requests": sum(c["buffered"] is True for c in clients) if clients else None,
        "agree": all(r["agree"] is not False for r in requests),
    }
