"""llmbench paint's numbers from hand-made stamps (no browser), its record read back by show, and its command's
bad inputs as one line each (exit 2) before any browser or socket. The browser and nginx: tests/e2e/test_paint.py."""

from __future__ import annotations

import json
import sys

import pytest

from llmbench.results import paint as pf
from tests.helpers import cli

URL = "http://127.0.0.1:9/v1"


def _events(texts, reads, paints):
    return [{"text": t, "read_ms": r, "appended_ms": r + 0.1, "painted_ms": p, "after_frame_ms": p + 2}
            for t, r, p in zip(texts, reads, paints, strict=True)]  # fmt: skip


def _page(start=1000.0, server=None):
    return {"time_origin_ms": 1_700_000_000_000.0, "start_ms": start, "headers_ms": start + 5, "server": server}


def test_the_first_paint_is_the_first_visible_character_not_whitespace():
    events = _events([" ", "\n", "Hi", " there"], [1100, 1100, 1140, 1180], [1105, 1105, 1150, 1190])
    assert pf.first_visible(events) == 2 and pf.visible("\u00a0x") and not pf.visible(" \n\t\u3000")
    f = pf.request_figures(_page(), events, python_before_unix_ms=1_700_000_000_990.0)
    # TTFT counts the first content event, whitespace or not; the first paint waits for something to see
    assert f["ttft_ms"] == 100 and f["first_paint_ms"] == 150 and f["e2e_ms"] == 180 and f["last_paint_ms"] == 190
    assert f["headers_ms"] == 5 and f["events"] == 4 and f["text_chars"] == 10
    assert f["clock_check_ms"] == 10  # the page started 10 ms after Python asked: the clocks agree
    assert pf.request_figures(_page(), _events(["  "], [1100], [1110]), 0.0)["first_paint_ms"] is None


def test_render_lag_is_paint_minus_read_per_event():
    assert pf.render_lag([10, 20, 30], [16, 33, 50]) == {"p50": 13, "max": 20}
    assert pf.render_lag([], []) == {"p50": None, "max": None}


def test_paint_gaps_are_between_painted_frames():
    # two events painted in one frame are one frame: gaps 16.7, 133.3, 10
    g = pf.paint_gaps([100.0, 100.0, 116.7, 250.0, 260.0])
    assert g == {"max": pytest.approx(133.3), "over_100ms": 1, "frames": 4}
    assert pf.paint_gaps([5.0]) == {"max": None, "over_100ms": 0, "frames": 1}


def test_an_answer_painted_in_one_frame_is_painted_at_once_and_the_detector_agrees():
    reads = [2000.0] * 6  # one read held the whole answer
    events = _events(list("abcdef"), reads, [2004.0] * 6)
    f = pf.request_figures(_page(), events, 0.0)
    assert f["first_frame_share"] == 1.0 and f["painted_at_once"] is True and f["page_buffered"] is True
    assert f["page_gaps_under_1ms_share"] == 1.0 and f["paint_gaps_ms"]["frames"] == 1
    assert f["render_lag_ms"] == {"p50": 4.0, "max": 4.0}
    client = pf.client_figures(1.7e12, [900.0, 900.2, 900.3, 900.3, 900.4, 900.4])
    assert client["buffered"] is True and client["ttft_ms"] == 900 and client["largest_burst"] == 6
    assert pf.agreement(f, client) is True


def test_a_streamed_answer_is_painted_frame_by_frame_and_a_disagreement_is_said():
    reads = [1100.0 + 40 * k for k in range(6)]
    events = _events(list("abcdef"), reads, [r + 8 for r in reads])
    f = pf.request_figures(_page(), events, 0.0)
    assert f["painted_at_once"] is False and f["page_buffered"] is False and f["first_frame_share"] == 0.1667
    assert f["paint_gaps_ms"] == {"max": 40.0, "over_100ms": 0, "frames": 6}
    assert pf.agreement(f, pf.client_figures(0.0, [100.0, 140.0, 180.0, 220.0])) is True
    assert pf.agreement(f, pf.client_figures(0.0, [500.0, 500.0, 500.0, 500.0])) is False  # the client saw a burst
    assert pf.agreement(f, pf.client_figures(0.0, [100.0, 140.0])) is None  # too few events for a verdict
    assert pf.painted_at_once([1.0, 1.0]) == (1.0, None) and pf.painted_at_once([]) == (None, None)


def test_the_servers_stamps_go_on_the_pages_timeline():
    server = {"arrived_unix_ms": 1_700_000_001_003.0, "queue_ms": 1.0, "ttft_ms": 90.0, "token_times_ms": [90.0, 130.0]}
    s = pf.request_figures(_page(server=server), _events(["a", "b"], [1100, 1140], [1101, 1141]), 0.0)["server"]
    # the page started at wall clock 1_700_000_001_000: the server got the request 3 ms later
    assert s["anchored"] == "server-clock" and s["arrived_ms"] == 3
    assert (s["first_token_ms"], s["last_token_ms"], s["token_times_ms"]) == (93, 133, [93, 133])
    bare = pf.server_on_timeline({"ttft_ms": 90.0, "token_times_ms": [90.0]}, 1.7e12)
    assert bare["anchored"] == "request-start" and bare["first_token_ms"] == 90
    assert pf.server_on_timeline(None, 0.0) is None and pf.server_on_timeline({"ttft_ms": 3}, 0.0) is None


def _record(requests):
    return {"paint_version": 1, "endpoint": URL, "model": "m[bold]", "browser": {"version": "120.0"},
            "formulas": pf.PAINT_FORMULAS, "summary": pf.summarize(requests), "requests": requests,
            "failed": [{"prompt_index": 1, "repeat": 0, "error": "HTTP 500: boom"}]}  # fmt: skip


def _request(reads, paints, client):
    f = pf.request_figures(_page(), _events(list("abcd"), reads, paints), 0.0)
    return {"prompt_index": 0, "repeat": 0, **f, "client": client, "agree": pf.agreement(f, client)}


def test_summary_and_show_print_a_paint_record(tmp_path):
    held = _request([2000.0] * 4, [2005.0] * 4, pf.client_figures(0.0, [900.0] * 4))
    s = pf.summarize([held])
    assert s["page_buffered_requests"] == s["painted_at_once_requests"] == s["client_buffered_requests"] == 1
    assert s["first_paint_ms_p50"] == 1005 and s["agree"] is True
    path = tmp_path / "paint.json"
    path.write_text(json.dumps(_record([held])), encoding="utf-8")
    r = cli("show", path)
    assert r.returncode == 0, r.stderr
    assert "m[bold]" in r.stdout and "buffered" in r.stdout and "at once" in r.stdout
    assert "something between server and browser buffers it" in r.stdout and "1 requests failed" in r.stdout
    path.write_text(json.dumps({**_record([held]), "paint_version": 2}), encoding="utf-8")
    r = cli("show", path)
    assert r.returncode == 2 and "paint_version 2" in r.stderr and r.stderr.count("\n") == 1, r.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.txt", "--endpoint", URL], "prompt file not found: missing.txt"),
        (["P", "--endpoint", URL, "--max-new-tokens", "0"], "--max-new-tokens must be"),
        (["P", "--endpoint", URL, "--max-new-tokens", "many"], "'--max-new-tokens': Input should be a valid integer"),
        (["P", "--endpoint", "ftp://x/v1"], "is not an http(s) URL"),
        (["P", "--endpoint", URL, "--chromium", "/nonexistent/chromium"], "--chromium /nonexistent/chromium: no such"),
        (["P"], "Missing option '--endpoint'"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(prompt_file, tmp_path, args, message):
    args = [str(prompt_file) if a == "P" else a for a in args]
    r = cli("paint", *args, "-o", tmp_path / "p.json", cwd=tmp_path)
    assert r.returncode == 2 and message in r.stderr and r.stderr.count("\n") == 1, r.stderr
    assert not (tmp_path / "p.json").exists()


def test_without_playwright_it_says_what_to_install(prompt_file, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "playwright", None)  # importlib then finds no such module
    r = cli("paint", prompt_file, "--endpoint", URL, "-o", tmp_path / "p.json")
    assert r.returncode == 2 and "needs playwright: pip install 'llmbench[paint]'" in r.stderr, r.stderr
