"""``llmbench export --format trace``: a run as a Chrome Trace Event Format file (Perfetto's UI, chrome://tracing).

No trace viewer runs here (Perfetto's trace processor is a binary its Python package downloads on first use; this
machine reaches package registries only), so the events are checked against the format's documented fields: the
Trace Event Format document (the "JSON Object Format", each phase's required keys) and Perfetto's JSON importer
(slices on one thread must nest strictly; "M" events name processes and threads).
"""

from __future__ import annotations

import itertools
import json
import math
from collections import defaultdict
from typing import Any

import pytest

from llmbench.present.trace import STALL_COLOUR, trace_events, write_trace
from llmbench.results.reader import STALL_MS, chars_per_s, read, visible_per_event, wait_spans
from llmbench.results.schema import FailedRequest, MachineSample, MachineState, RequestResult, Run
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

TILING = {"ttft", "decode", "tail"}  # the categories of the slices that tile a request's track
WORD = "hello "  # 5 visible characters, one word: the default pace reads it in 252.1 ms


def _request(times: list[float], *, index: int = 0, started_s: float = 0.0, text: str | None = None,
             offsets: bool = True, **extra: Any) -> RequestResult:  # fmt: skip
    """A request whose stamps are ``times`` (ms from its start), each bringing one WORD of text."""
    text = WORD * len(times) if text is None else text
    fields: dict[str, Any] = {
        "prompt_index": index,
        "repeat": 0,
        "prompt_tokens": 10,
        "output_tokens": len(times),
        "tokenize_ms": 0.0,
        "ttft_ms": times[0] if times else float("nan"),
        "tpot_ms": (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else None,
        "e2e_ms": times[-1] if times else float("nan"),
        "token_times_ms": times,
        "output_token_ids_sha256": "0" * 64,
        "output_text": text,
        "started_s": started_s,
        "text_offsets": [len(WORD) * (k + 1) for k in range(len(times))] if offsets else None,
    }
    if not times:  # no stamp: a NaN TTFT, which a run's file can't hold (the schema refuses it): built unchecked
        return RequestResult.model_construct(**{**fields, **extra})
    return RequestResult(**{**fields, **extra})


def _run(*requests: RequestResult, **fields: Any) -> Run:
    """A run (synthetic_run's setup) holding ``requests``."""
    run = synthetic_run(n=1)
    run.requests = list(requests)
    for name, value in fields.items():
        setattr(run, name, value)
    return run


def _slices(trace: dict, tid: int, cats: set[str] = TILING) -> list[dict]:
    return sorted((e for e in trace["traceEvents"] if e["ph"] == "X" and e["tid"] == tid and e["cat"] in cats),
                  key=lambda e: e["ts"])  # fmt: skip


def _tracks(trace: dict) -> dict[str, int]:
    """Thread name -> tid."""
    return {e["args"]["name"]: e["tid"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "thread_name"}


def _varied_run() -> Run:
    """Requests of every shape the tiling handles: in-process with tokenization, an endpoint's with a server
    queue and a tail after its last stamp, a speculative bundle (stamps that share a time), odd microseconds."""
    return _run(
        _request([123.457, 140.001, 140.001, 140.001, 171.999], tokenize_ms=2.345, started_s=0.000123),
        _request(
            [80.5, 95.25, 110.125],
            index=1,
            started_s=0.05,
            chunks=3,
            tokens_from="usage",
            server_queue_ms=30.333,
            stream_end_ms=112.0,
            e2e_ms=111.5,
        ),
        _request([1000.0, 1000.0, 1333.333], index=2, started_s=1.234567, send_lateness_ms=12.5, scheduled_s=1.2),
    )


def test_slices_tile_each_request_exactly_from_its_start_to_its_e2e():
    run = _varied_run()
    trace = trace_events(run)
    tracks = _tracks(trace)
    for r in run.requests:
        slices = _slices(trace, tracks[f"prompt {r.prompt_index} repeat 0"])
        start = round(r.started_s * 1e6)
        assert slices[0]["ts"] == start
        for a, b in itertools.pairwise(slices):
            assert a["ts"] + a["dur"] == b["ts"]  # no gap, no overlap
        assert all(s["dur"] > 0 for s in slices)
        total = sum(s["dur"] for s in slices)
        assert total == round(r.e2e_ms * 1000)  # integer microseconds: the durations telescope exactly
        assert abs(total / 1000 - r.e2e_ms) <= 0.0005
    names = [s["name"] for s in _slices(trace, tracks["prompt 0 repeat 0"])]
    assert names == ["tokenize", "prefill (until first token)", "gap", "gap"]  # the bundle is one arrival
    bundle = _slices(trace, tracks["prompt 0 repeat 0"])[2]
    assert bundle["args"]["stamps"] == 3 and bundle["args"]["tokens"] == 3 and bundle["args"]["text"] == WORD * 3
    endpoint = _slices(trace, tracks["prompt 1 repeat 0"])
    assert [s["name"] for s in endpoint] == ["queue", "prefill (until first token)", "gap", "gap", "tail"]
    assert endpoint[0]["dur"] == 30333 and "tokens" not in endpoint[2]["args"]  # an event's token count: unknown
    late = _slices(trace, tracks["prompt 2 repeat 0"], {"schedule"})
    assert [(s["ts"], s["dur"]) for s in late] == [(1234567 - 12500, 12500)]  # before the start, outside the tiling


def test_a_request_with_only_its_first_token_is_one_ttft_slice():
    run = _run(_request([250.0]), _request([80.0], index=1, tokenize_ms=3.0))
    trace = trace_events(run)
    tracks = _tracks(trace)
    only = _slices(trace, tracks["prompt 0 repeat 0"])
    assert [(s["name"], s["ts"], s["dur"]) for s in only] == [("time to first token", 0, 250000)]
    assert only[0]["args"]["ttft_ms"] == 250.0 and "tpot_ms" not in only[0]["args"]  # None is left out
    split = _slices(trace, tracks["prompt 1 repeat 0"])
    assert [(s["name"], s["dur"]) for s in split] == [("tokenize", 3000), ("prefill (until first token)", 77000)]


def test_a_500_ms_pause_is_a_stall_on_the_reader_track_where_the_reader_waits():
    """One WORD every 300 ms; the reader needs 252.1 ms for each, so it waits 47.9 ms (not a stall) before each
    next one, except after the fifth: the stream pauses 500 ms more, and the reader waits 547.9 ms."""
    times = [100.0 + 300.0 * k for k in range(5)]
    times += [times[-1] + 800.0, times[-1] + 1100.0, times[-1] + 1400.0]
    run = _run(_request(times, started_s=2.0), _request([100.0 + 300.0 * k for k in range(8)], index=1))
    trace = trace_events(run)
    tracks = _tracks(trace)
    assert "reader: prompt 1 repeat 0" not in tracks  # a steady stream: no stall, no reader track
    stalls = _slices(trace, tracks["reader: prompt 0 repeat 0"], {"stall"})
    assert len(stalls) == 1
    read_ms = 1000.0 * len(WORD.strip()) / chars_per_s(WORD * len(times))
    start = 2_000_000
    assert stalls[0]["ts"] == start + round((times[4] + read_ms) * 1000)  # when the reader caught up
    assert stalls[0]["ts"] + stalls[0]["dur"] == start + round(times[5] * 1000)  # until the next word arrived
    assert stalls[0]["args"]["wait_ms"] == pytest.approx(800.0 - read_ms, abs=1e-3)
    assert stalls[0]["cname"] == STALL_COLOUR and stalls[0]["dur"] > STALL_MS * 1000
    pause = [s for s in _slices(trace, tracks["prompt 0 repeat 0"]) if s["args"].get("stamp") == 5]
    assert pause[0]["args"]["gap_ms"] == 800.0  # the stall lies inside the slice of the pause
    assert pause[0]["ts"] <= stalls[0]["ts"] and stalls[0]["ts"] + stalls[0]["dur"] == pause[0]["ts"] + pause[0]["dur"]
    # a run without offsets: its text spread evenly over the stamps (here the same words), the same stall
    spread = trace_events(_run(_request(times, started_s=2.0, offsets=False)))
    again = _slices(spread, _tracks(spread)["reader: prompt 0 repeat 0"], {"stall"})
    assert [(s["ts"], s["dur"]) for s in again] == [(s["ts"], s["dur"]) for s in stalls]


def test_wait_spans_are_the_waits_read_sums_counts_and_maximises():
    times = [0.0, 10.0, 400.0, 410.0, 1500.0, 1500.0, 1510.0]
    visible = [3, 0, 4, 2, 5, 1, 2]
    spans = wait_spans(times, visible, 30.0)
    r = read(times, visible, 30.0)
    waits = [w for _, w in spans]
    assert sum(waits) == r.stall_ms and max(waits) == r.longest_stall_ms
    assert sum(1 for w in waits if w > STALL_MS) == r.stalls
    assert all(start + wait in times for start, wait in spans)  # each wait ends when an event arrives
    assert wait_spans([], [], 30.0) == [] and wait_spans([5.0], [0], 30.0) == []
    assert visible_per_event(WORD * 2, [6, 12], 2) == [5, 5]


def test_the_in_flight_counter_rises_and_falls_with_two_overlapping_requests():
    run = _run(_request([20.0, 100.0]), _request([30.0, 100.0], index=1, started_s=0.05))
    counter = [(e["ts"], e["args"]["requests"]) for e in trace_events(run)["traceEvents"] if e["name"] == "in flight"]
    assert counter == [(0, 1), (50000, 2), (100000, 1), (150000, 0)]
    # a stream that ends after its last token keeps its request in flight until then
    run = _run(_request([20.0, 100.0], chunks=2, stream_end_ms=130.0), _request([100.0], index=1, started_s=0.13))
    counter = [(e["ts"], e["args"]["requests"]) for e in trace_events(run)["traceEvents"] if e["name"] == "in flight"]
    assert counter == [(0, 1), (130000, 1), (230000, 0)]  # one ends as the other starts: never 2, never 0 between


def _rich_run() -> Run:
    """Every kind of event: stalls, marks, failed requests, machine samples with GPU power, a second session."""
    times = [100.0, 400.0, 1300.0, 1600.0]
    sample = {"cpu_busy_pct": 50.0, "own_cpu_pct": 40.0, "other_cpu_pct": 10.0, "steal_pct": 0.0, "load1": 1.0,
              "rss_bytes": 1, "swap_used_bytes": 0}  # fmt: skip
    machine = MachineState(
        samples=[MachineSample(t_s=12.5 + 0.5 * k, **sample) for k in range(3)],
        gpu={"energy_j": 1.0},
        gpu_samples=[{"t_s": 12.5 + 0.5 * k, "power_w": 100.0 + k} for k in range(3)] + [{"t_s": 14.0}],
    )
    return _run(
        _request(times, chunks=4, stream_end_ms=1650.0, ttfrt_ms=40.0, send_lateness_ms=3.0, scheduled_s=0.0),
        _request(times, index=1, started_s=0.2, process=1),
        _request([50.0], index=2, session=1, text="…"),
        _request([], index=3, output_tokens=0),
        machine=machine,
        failed_requests=[
            FailedRequest(prompt_index=4, repeat=0, error="HTTP 500", status=500, started_s=0.5),
            FailedRequest.model_validate({"prompt_index": 5, "repeat": 0, "error": "x"}),
        ],
    )


def test_every_event_has_the_fields_the_format_documents_for_its_phase():
    trace = json.loads(json.dumps(trace_events(_rich_run()), allow_nan=False))  # plain JSON: no NaN anywhere
    assert trace["displayTimeUnit"] == "ms" and trace["metadata"]["model"] == "synthetic"
    events = trace["traceEvents"]
    assert {e["ph"] for e in events} == {"M", "X", "i", "C"}
    named: set[tuple[int, int]] = set()
    for e in events:
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int)
        assert isinstance(e["ts"], int) and e["ts"] >= 0  # whole microseconds
        assert isinstance(e.get("args", {}), dict)
        if e["ph"] == "X":
            assert isinstance(e["dur"], int) and e["dur"] >= 0 and isinstance(e["cat"], str)
        elif e["ph"] == "i":
            assert e["s"] == "t"  # scoped to its thread
        elif e["ph"] == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        elif e["ph"] == "M":
            assert e["name"] in ("process_name", "process_sort_index", "thread_name", "thread_sort_index")
            key = "name" if e["name"].endswith("_name") else "sort_index"
            assert key in e["args"]
            if e["name"] == "thread_name":
                named.add((e["pid"], e["tid"]))
    drawn = {(e["pid"], e["tid"]) for e in events if e["ph"] in ("X", "i")}
    assert drawn <= named  # every track that holds something has a name
    process_of: dict[int, set[int]] = defaultdict(set)
    for e in events:
        process_of[e["tid"]].add(e["pid"])
    assert all(len(pids) == 1 for pids in process_of.values())  # Perfetto names threads by tid alone
    processes = [e["args"] for e in events if e["name"] == "process_name"]
    assert [p["name"] for p in processes] == [
        "llmbench run: synthetic (session 0)",
        "llmbench run: synthetic (session 1)",
    ]
    assert all(p["model"] == "synthetic" and p["llmbench_version"] == "0" for p in processes)
    tracks = _tracks(trace)
    assert "prompt 0 repeat 0 session 0" in tracks and "prompt 1 repeat 0 process 1 session 0" in tracks
    assert "prompt 3 repeat 0 session 0" in tracks  # no stamps: a named, empty track


def test_slices_on_each_track_nest_strictly_as_perfettos_importer_requires():
    by_track: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in trace_events(_rich_run())["traceEvents"]:
        if e["ph"] == "X":
            by_track[(e["pid"], e["tid"])].append((e["ts"], e["ts"] + e["dur"]))
    for spans in by_track.values():
        for a0, a1 in spans:
            for b0, b1 in spans:
                disjoint = a1 <= b0 or b1 <= a0
                nested = (a0 <= b0 and b1 <= a1) or (b0 <= a0 and a1 <= b1)
                assert disjoint or nested


def test_failed_requests_with_a_start_are_marked_and_the_rest_skipped():
    events = trace_events(_rich_run())["traceEvents"]
    failed = [e for e in events if e["name"] == "failed"]
    assert [(e["ts"], e["args"]["status"], e["args"]["error"]) for e in failed] == [(500000, 500, "HTTP 500")]
    assert failed[0]["cname"] == STALL_COLOUR and failed[0]["pid"] == 1


def test_machine_counters_where_recorded_and_nothing_where_not():
    events = trace_events(_rich_run())["traceEvents"]
    power = [(e["ts"], e["args"]["W"], e["pid"]) for e in events if e["name"] == "GPU power"]
    assert power == [(500000, 100.0, 2), (1000000, 101.0, 2), (1500000, 102.0, 2)]  # the last session's machine
    cpu = [e["args"] for e in events if e["name"] == "CPU busy %"]
    assert cpu[0] == {"machine": 50.0, "llmbench": 40.0} and len(cpu) == 3
    marks = {e["name"] for e in events if e["ph"] == "i"}
    assert {"first reasoning event", "stream end", "failed"} <= marks
    bare = trace_events(_run(_request([20.0, 40.0])))["traceEvents"]
    assert not [e for e in bare if e["name"] in ("GPU power", "CPU busy %")]


def test_write_trace_writes_what_trace_events_builds(tmp_path):
    run = _rich_run()
    n = write_trace(run, tmp_path / "t.json")
    written = json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))
    assert written == json.loads(json.dumps(trace_events(run))) and n == len(written["traceEvents"])


def test_cli_exports_a_trace_that_json_loads_and_never_overwrites(cli, tmp_path):
    run_file, out = tmp_path / "run.json", tmp_path / "run.trace.json"
    save_run(synthetic_run(n=3, tokens=5), run_file)
    r = cli("export", run_file, "--format", "trace", "-o", out)
    assert r.returncode == 0, r.stderr
    trace = json.loads(out.read_text(encoding="utf-8"))
    assert f"wrote {len(trace['traceEvents'])} trace events to {out}" in r.stdout
    e2e = [e["dur"] for e in _slices(trace, _tracks(trace)["prompt 0 repeat 0"])]
    assert math.isclose(sum(e2e) / 1000, synthetic_run(n=3, tokens=5).requests[0].e2e_ms)
    again = cli("export", run_file, "--format", "trace", "-o", out)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert cli("export", run_file, "--format", "trace", "-o", out, "--overwrite").returncode == 0


@pytest.mark.parametrize(
    ("content", "extra", "says"),
    [
        ("{not json", [], "not valid JSON"),
        ('{"schema_version": 1, "requests": "many"}', [], "run.json"),
        (None, ["--tokens"], "--tokens is for csv and parquet"),
        (None, ["--format", "xlsx"], "xlsx"),
    ],
    ids=["not-json", "not-a-run", "tokens", "unknown-format"],
)
def test_bad_input_is_one_line_on_stderr_and_a_non_zero_exit(cli, tmp_path, content, extra, says):
    run_file = tmp_path / "run.json"
    if content is None:
        save_run(synthetic_run(n=2, tokens=3), run_file)
    else:
        run_file.write_text(content, encoding="utf-8")
    args = ["export", run_file, "-o", tmp_path / "t.json", *(extra or ["--format", "trace"])]
    if extra == ["--tokens"]:
        args += ["--format", "trace"]
    r = cli(*args)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("llmbench: error: ") and says in r.stderr, r.stderr
    assert not (tmp_path / "t.json").exists()


def test_present_export_writes_a_trace_too_and_an_unwritable_path_is_one_user_error(tmp_path):
    pytest.importorskip("pandas")
    from llmbench.core.errors import UserError
    from llmbench.present.export import export

    run = _run(_request([20.0, 40.0]))
    n = export(run, tmp_path / "t.json", "trace")
    assert n == len(json.loads((tmp_path / "t.json").read_text(encoding="utf-8"))["traceEvents"])
    with pytest.raises(UserError, match="cannot write"):
        write_trace(run, tmp_path / "no" / "such" / "folder" / "t.json")
