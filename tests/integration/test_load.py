"""Open-loop arrivals, rate sweeps with goodput under SLOs, load generators over several processes, reasoning
streams and token counts that disagree: against real uvicorn servers on loopback.

The server under load is ``llmbench serve``'s app around a model whose forward passes take known times
(tests/delayed_model.py), one request at a time with a queue of 4 and 429 beyond: its capacity is known, so
a rate far below it must hold and a rate far above it must not.
"""

from __future__ import annotations

import asyncio
import json
import time

import pytest

from llmbench.backends.endpoint import LATE_MS
from llmbench.drivers import load as ld
from llmbench.drivers.run import run as run_driver
from llmbench.options import EndpointOptions, OpenLoop, RunOptions
from llmbench.results.storage import load_run
from llmbench.runner.loop import NullReporter
from llmbench.serve import create_app
from llmbench.workloads.prompts import PromptSet
from tests.delayed_model import delayed_loaded
from tests.servers import BackgroundServer, faulty_server

PREFILL_MS, DECODE_MS, NEW_TOKENS = 20.0, 10.0, 4  # one request holds the model ~50 ms: capacity ~20/s
PROMPTS = PromptSet.from_list(["a plant dumps water at night", "某工厂夜间偷排废水", "mixed 文本 text"])
OPTIONS = RunOptions(max_new_tokens=NEW_TOKENS, ignore_eos=True, warmup=1)


@pytest.fixture(scope="module")
def server(qwen_tokenizer):
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=PREFILL_MS, decode_ms=DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=4)) as url:
        yield url


def _open(url: str, rate: float, **kw) -> EndpointOptions:
    return EndpointOptions(endpoint=url, open_loop=OpenLoop(rate=rate, **kw))


# -- schedules ----------------------------------------------------------------------------------------------


# -- one open-loop run -------------------------------------------------------------------------------------


def test_an_open_loop_run_sends_on_schedule_and_records_how_late(cli, server, tmp_path):
    out = tmp_path / "r.json"
    run, _ = asyncio.run(run_driver(PROMPTS, _open(server, 8.0, arrival="constant", requests=12), OPTIONS,
                                    output=out))  # fmt: skip
    saved = load_run(out)
    assert saved.summary == run.summary
    a = saved.config.endpoint.arrival
    assert (a.rate_rps, a.process, a.requests) == (8.0, "constant", 12) and saved.complete
    assert [r.scheduled_s for r in saved.requests] == pytest.approx([i / 8 for i in range(12)])
    # request i is prompt i % 3, repeat i // 3: the schedule walks the prompt list round and round
    assert [(r.prompt_index, r.repeat) for r in saved.requests] == [(i % 3, i // 3) for i in range(12)]
    for r in saved.requests:
        assert r.send_lateness_ms is not None and r.send_lateness_ms >= 0
        assert r.ttft_from_schedule_ms == pytest.approx(r.ttft_ms + r.send_lateness_ms, abs=0.01)
        # the sends really went out on schedule: started_s (the loop's clock) follows the due times
        assert r.started_s == pytest.approx(r.scheduled_s, abs=0.25)
    s = saved.summary
    assert s.offered_rate_rps == 8.0 and s.send_lateness_ms.n == 12 and s.achieved_rate_rps > 0
    shown = cli("show", out)
    assert shown.returncode == 0 and "open loop: offered 8/s (constant), achieved" in shown.stdout


def test_an_open_loop_does_not_wait_for_answers_but_a_closed_loop_does(server):
    """10 requests due within 90 ms against a server that takes ~50 ms each: an open loop has them all in
    flight at once (the server queues 4 and refuses the rest with 429), a closed loop never more than one."""
    run, _ = asyncio.run(run_driver(PROMPTS, _open(server, 100.0, arrival="constant", requests=10), OPTIONS))
    assert len(run.failed_requests) >= 3 and all(f.status == 429 for f in run.failed_requests)
    assert all(f.scheduled_s is not None for f in run.failed_requests)
    served = sorted(run.requests, key=lambda r: r.scheduled_s)
    # queued requests wait their turn: TTFT grows with the place in the queue
    assert served[-1].ttft_ms > served[0].ttft_ms + 2 * PREFILL_MS
    closed, _ = asyncio.run(run_driver(PROMPTS, EndpointOptions(endpoint=server), OPTIONS.replaced(repeats=3)))
    assert not closed.failed_requests and len(closed.requests) == 9


class _SlowReporter(NullReporter):
    """A progress display that blocks the event loop for 100 ms after every answer: a load generator that
    can't keep up, on purpose. (40 ms once left the max lateness at 27.9 ms when 429s cut the answers to 11.)"""

    def request(self, result, done: int, total: int) -> None:
        time.sleep(0.1)


def test_a_load_generator_that_falls_behind_says_so_loudly(server):
    ep = _open(server, 60.0, arrival="constant", requests=24)
    run, _ = asyncio.run(run_driver(PROMPTS, ep, OPTIONS, reporter=_SlowReporter()))
    assert run.summary.send_lateness_ms.max > 30  # 100 ms blocks against a 16.7 ms schedule
    assert any("THE CLIENT FELL BEHIND ITS SCHEDULE" in w for w in run.warnings)
    on_time, _ = asyncio.run(run_driver(PROMPTS, _open(server, 4.0, arrival="constant", requests=4), OPTIONS))
    # without the block the client is on time unless the machine itself is starved: the warning says which
    # the warning's own test, on the raw stamps (the summary's max is rounded: 10.004 ms would read 10.0)
    late = any(r.send_lateness_ms is not None and r.send_lateness_ms > LATE_MS for r in on_time.requests)
    assert any("FELL BEHIND" in w for w in on_time.warnings) == late


class _StopAfterFirst(NullReporter):
    def __init__(self, stop) -> None:
        self.stop = stop

    def request(self, result, done: int, total: int) -> None:
        self.stop.request("SIGINT")


def test_a_stop_between_due_times_ends_an_open_loop_at_once(server, tmp_path):
    """At 0.1 requests/s the next request is due 10 s after the first: a stop right after the first answer
    ends the run then, keeping it, instead of waiting for the next due time."""
    from llmbench.core.errors import RunInterrupted
    from llmbench.core.process import Stop

    stop = Stop()
    out = tmp_path / "r.json"
    t = time.monotonic()
    with pytest.raises(RunInterrupted):
        asyncio.run(run_driver(PROMPTS, _open(server, 0.1, arrival="constant", requests=3), OPTIONS, output=out,
                               stop=stop, reporter=_StopAfterFirst(stop)))  # fmt: skip
    assert time.monotonic() - t < 8.0  # warm-up + one request + saving; the second was due 10 s in
    saved = load_run(out)
    assert len(saved.requests) == 1 and not saved.complete and saved.sessions[-1].interrupted_by == "SIGINT"


# -- load: rates, SLOs, goodput, saturation -----------------------------------------------------------------


def test_goodput_counts_only_requests_meeting_every_slo_and_one_token_answers_fail_tpot(server):
    run, _ = asyncio.run(run_driver(PROMPTS, _open(server, 5.0, arrival="constant", requests=6), OPTIONS))
    ttfts = sorted(r.ttft_ms for r in run.requests)
    limit = (ttfts[2] + ttfts[3]) / 2  # exactly 3 of 6 under it
    spec = ld.LoadSpec(rates=[5.0], slos=[ld.Slo("ttft_ms", 50, limit)])
    row = ld.rate_figures(run, spec)
    assert row["good"] == 3 and row["attainment"] == 0.5 and row["slos"][f"ttft_ms:p50={limit:g}"]["holds"]
    assert row["goodput_rps"] < row["achieved_rate_rps"]
    one = run.model_copy(deep=True)
    for r in one.requests:
        r.tpot_ms, r.output_tokens = None, 1
    tpot = ld.LoadSpec(rates=[5.0], slos=[ld.Slo("tpot_ms", 90, 1e9)])
    assert ld.rate_figures(one, tpot)["good"] == 0  # no TPOT does not pass a TPOT limit ...
    tpot.one_token_passes = True
    assert ld.rate_figures(one, tpot)["good"] == 6  # ... unless asked


def test_fluidity_holds_far_below_capacity_and_not_far_above_it(server):
    """At 5/s every answer streams far inside Etalon's deadlines (TTFT ~20 ms of 1 s, a token every 10 ms of
    ~194); at 100/s the server refuses what its queue can't hold (429s), and a refused request is not fluid.
    (TTFT pushed past 1 s by the queue alone, at this server's speed, would take a long run: tests/unit has it.)"""
    spec = ld.LoadSpec(rates=[5.0, 100.0], slos=[ld.Slo("ttft_ms", 90, 1000.0)])
    low, _ = asyncio.run(run_driver(PROMPTS, _open(server, 5.0, arrival="constant", requests=6), OPTIONS))
    high, _ = asyncio.run(run_driver(PROMPTS, _open(server, 100.0, arrival="constant", requests=10), OPTIONS))
    rows = [ld.rate_figures(low, spec), ld.rate_figures(high, spec)]
    assert all(r.fluidity == 1.0 for r in low.requests)
    assert rows[0]["fluidity_attainment"] == 1.0 and rows[0]["fluid_holds"] and rows[0]["reader_stall_ms"]
    refused = len(high.failed_requests)
    assert refused >= 3 and rows[1]["fluid"] <= 10 - refused and not rows[1]["fluid_holds"]
    assert rows[1]["fluidity_attainment"] == round(rows[1]["fluid"] / 10, 4) <= 0.7
    assert rows[1]["stall_free"] <= 0.7  # a refused request never streamed: not stall-free either
    capacity = ld.fluid_capacity(rows)
    assert capacity["fluid_capacity_rps"] == 5.0 and capacity["fluid_first_failing_rps"] == 100.0


def _prompts(tmp_path):
    p = tmp_path / "p.txt"
    p.write_text("\n".join(PROMPTS.prompts) + "\n", encoding="utf-8")
    return p


# -- several load generators ----------------------------------------------------------------------------------


# -- reasoning and token counts ----------------------------------------------------------------------------


def test_reasoning_is_stamped_apart_from_the_answer(qwen_tokenizer, tmp_path):
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=20.0, decode_ms=15.0)
    with BackgroundServer(create_app(lm, max_queue=4, reasoning_tokens=3)) as url:
        run, _ = asyncio.run(run_driver(PROMPTS, EndpointOptions(endpoint=url),
                                        RunOptions(max_new_tokens=8, ignore_eos=True)))  # fmt: skip
    for r in run.requests:
        assert r.reasoning_tokens == 3 and r.reasoning_events and r.reasoning_events <= 3
        # the first answer token comes three decode steps after the first thought
        assert r.ttfrt_ms < r.ttft_ms and r.ttft_ms - r.ttfrt_ms >= 3 * 15.0 * 0.9
        assert r.output_tokens == 5 and r.tokens_from == "usage"  # 8 generated, 3 of them reasoning
        assert r.tpot_ms >= 15.0 * 0.9  # the answer's own pace
    assert run.summary.ttfrt_ms is not None and run.summary.ttfrt_ms.n == 3


def test_server_and_client_token_counts_are_both_kept_and_disagreements_counted(cli, qwen_tokenizer, tiny_model_dir,
                                                                                 tmp_path):  # fmt: skip
    app = faulty_server()
    app.state.mode, app.state.calls = "usage-count", 0
    client_count = len(qwen_tokenizer("alpha beta gamma delta", add_special_tokens=False)["input_ids"])
    with BackgroundServer(app) as url:
        out = tmp_path / "r.json"
        r = cli("run", _prompts(tmp_path), "--endpoint", url, "--tokenizer", tiny_model_dir, "--repeats", "2", "-o",
                out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    assert all(q.output_tokens_client == client_count and q.tokens_from == "usage" for q in run.requests)
    assert {q.output_tokens_server for q in run.requests} == {4, 6}
    expected = sum(q.output_tokens_server != client_count for q in run.requests)
    assert run.summary.token_count_disagreements == expected > 0
    assert any(f"token counts disagree on {expected} of 6 requests" in w for w in run.warnings)


def test_a_load_tests_rates_past_the_line_are_columns_every_reader_reads(cli, server, prompt_file, tmp_path):
    """Issue 61: a rate's run is written as JSON plus columns past the line (here from its first request), and
    compare, show, export, report and history add read it as any run."""
    out = tmp_path / "load"
    env = {"LLMBENCH_COLUMNS_FROM": "0", "XDG_DATA_HOME": str(tmp_path / "data")}
    r = cli("load", prompt_file, "--endpoint", server, "--rates", "5,8", "--requests", "6", "--max-new-tokens", "4",
            "--ignore-eos", "--slo", "ttft_ms:p90=5000", "--warmup", "0", "-o", out, "-q", env=env)  # fmt: skip
    assert r.returncode == 0, r.stderr
    for rate in ("5", "8"):
        path = out / f"rate-{rate}.json"
        run = load_run(path)
        assert run.schema_version == 2 and run.columns is not None and run.columns.rows == len(run.requests) == 6
        assert (out / run.columns.file).is_file() and run.summary is not None and run.summary.requests == 6
    a, b = out / "rate-5.json", out / "rate-8.json"
    assert cli("compare", a, b).returncode == 0
    assert cli("show", a).returncode == 0
    assert cli("export", a, "--tokens", "-o", tmp_path / "t.csv").returncode == 0
    assert len((tmp_path / "t.csv").read_text(encoding="utf-8").splitlines()) == 1 + sum(
        len(q.token_times_ms) for q in load_run(a).requests
    )
    assert cli("report", a, b, "-o", tmp_path / "r.html").returncode == 0
    assert cli("history", "add", a, env=env).returncode == 0


# -- the over-saturation stop (issue 63) ---------------------------------------------------------------------------


def _stopping(rates: list[float], **kw) -> ld.LoadSpec:
    return ld.LoadSpec(rates=rates, slos=[ld.Slo("ttft_ms", 90, 1000.0)], arrival="constant", stop_saturated=True,
                       stop_min_s=2.0, **kw)  # fmt: skip


def test_a_rate_past_a_queueing_servers_capacity_stops_early_and_keeps_its_unfinished_requests(qwen_tokenizer,
                                                                                                tmp_path):  # fmt: skip
    """The server takes ~50 ms a request, one at a time, and queues everything (capacity ~20/s): at 60/s its
    queue grows by ~40 requests a second and TTFT with it. Asked for 12 s, the rate stops a few seconds in with
    the reason; the requests the stop dropped in flight are recorded as unfinished failures, and the rate's run
    file says why it ended. A rate under capacity on the same server runs to its end."""
    from llmbench.results.storage import load_run

    lm = delayed_loaded(qwen_tokenizer, prefill_ms=PREFILL_MS, decode_ms=DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=10_000)) as url:
        spec = _stopping([5.0, 60.0], duration_s=12.0)
        t = time.monotonic()
        record, path = asyncio.run(ld.load(PROMPTS, EndpointOptions(endpoint=url), OPTIONS, spec, tmp_path / "q"))
        took = time.monotonic() - t
    calm, past = record["rates"]
    assert calm["stopped"] is None and calm["sent"] == 60 and calm["verdict"] == "holds"
    stopped = past["stopped"]
    assert stopped["reason"].startswith("queueing:") and 2.0 <= stopped["at_s"] < 9.0, stopped
    assert stopped["schedule_s"] == 12.0 and stopped["unsent"] > 0 and stopped["unfinished"] > 0
    assert past["unfinished"] == stopped["unfinished"] and past["verdict"] == "fails" and not past["holds"]
    rule = stopped["rule"]
    assert rule["in_flight"]["slope_low"] > 0 and rule["ttft_ms"]["slope_low"] > 0
    assert rule["in_flight"]["end"] >= 1.5 * rule["in_flight"]["start"]
    run = load_run(tmp_path / "q" / past["run_file"])
    assert run.sessions[-1].interrupted_by == "over-saturation" and not run.complete
    unfinished = [f for f in run.failed_requests if f.error.startswith("unfinished:")]
    assert len(unfinished) == stopped["unfinished"] and all(f.status is None for f in unfinished)
    # every request sent is accounted for: finished, refused or unfinished, none dropped
    assert len(run.requests) + len(run.failed_requests) + stopped["unsent"] == 12 * 60
    assert took < 12.0 + 12.0  # the calm rate's 12 s, and the stopped rate well under its 12 s plus its drain
    assert json.loads(path.read_text())["complete"]
    from llmbench.results.storage import rate_runs

    runs = rate_runs(path, record)  # what the report reads: the dropped requests are there to draw
    assert len([f for f in runs[60.0][0].failed_requests if f.error.startswith("unfinished:")]) == stopped["unfinished"]


def test_a_rate_past_a_refusing_servers_queue_stops_on_its_429s(server, tmp_path):
    """The module's server queues 4 and refuses the rest with 429: at 100/s three requests in four are refused, so
    the rate can't hold 90% whatever the others do, and it stops on that, not on a queue (which stays short)."""
    spec = _stopping([100.0], duration_s=10.0)
    record, _ = asyncio.run(ld.load(PROMPTS, EndpointOptions(endpoint=server), OPTIONS, spec, tmp_path / "r"))
    (row,) = record["rates"]
    stopped = row["stopped"]
    assert stopped["reason"].startswith("refusing:") and stopped["at_s"] < 8.0, stopped
    assert stopped["rule"]["refused"]["lower_bound"] > 0.1 and row["http_429"] > 0 and stopped["unsent"] > 0


def test_the_stop_is_off_for_a_list_of_rates_unless_asked_and_on_for_auto():
    assert not ld.LoadSpec(rates=[1.0], slos=[]).stops and ld.LoadSpec(rates=None, slos=[]).stops
    assert ld.LoadSpec(rates=[1.0], slos=[], stop_saturated=True).stops
    assert not ld.LoadSpec(rates=None, slos=[], stop_saturated=False).stops


def test_mid_stream_stalls_are_flagged_per_request_beside_the_servers_own_preemption_count(tmp_path):
    """A server that preempts every third request it gets for 0.5 s after its 5th event, and counts it on /metrics
    as vLLM does: the client flags exactly those requests (calls 3, 6, 9 and 12; the warm-up is call 1, so the
    measured requests 1, 4, 7 and 10: prompt 1 each time round), each stall about the pause, and the row puts the
    server's count beside them."""
    from tests.servers import preempting_server

    app = preempting_server(tokens=12, gap_s=0.01, every=3, pause_s=0.5)
    with BackgroundServer(app) as url:
        ep = EndpointOptions(endpoint=url, server_metrics=True, metrics_interval_s=0.2)
        spec = ld.LoadSpec(rates=[10.0], slos=[ld.Slo("ttft_ms", 90, 1000.0)], arrival="constant", requests=12,
                           duration_s=None)  # fmt: skip
        record, _ = asyncio.run(ld.load(PROMPTS, ep, RunOptions(max_new_tokens=12, warmup=1), spec, tmp_path / "p"))
    (row,) = record["rates"]
    stalls = row["mid_stream_stalls"]
    long = {(x["prompt_index"], x["repeat"]) for x in stalls["stalled"] if x["longest_ms"] >= 400}
    assert long == {(1, 0), (1, 1), (1, 2), (1, 3)} and app.state.preempted == [3, 6, 9, 12]
    assert stalls["requests"] >= 4 and 500 <= stalls["longest_ms"] < 1500
    assert row["server_preemptions"] == 4.0


# -- probes beside the load (issue 63) ---------------------------------------------------------------------------


def test_probes_beside_the_load_report_a_newcomers_wait_apart_and_its_capacity(cli, server, tmp_path):
    """Probes at 2/s beside each rate: at 2/s the server (one request at a time, ~50 ms each) serves them as it
    serves the load, fluid; at 60/s it refuses most of what arrives, probes included, and a refused probe is not
    fluid. The newcomer's capacity is the rate below; each rate's probes have their own run file."""
    out = tmp_path / "probed"
    r = cli("load", _prompts(tmp_path), "--endpoint", server, "--rates", "2,60", "--duration", "3",
            "--arrival", "constant", "--probe-rate", "2", "--slo", "ttft_ms:p90=1000", "--max-new-tokens",
            str(NEW_TOKENS), "--ignore-eos", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "load.json").read_text(encoding="utf-8"))
    low, high = record["rates"]
    assert record["probe_rate_rps"] == 2.0 and low["probes"]["probe_rate_rps"] == 2.0
    assert low["probes"]["sent"] == 6 and low["sent"] == 6  # 2/s over the load's 3 s, apart from the load's own
    assert low["probes"]["fluidity_attainment"] == 1.0 and low["probes"]["andes_qoe"]["min"] > 0.9
    assert low["probes"]["reader_stall_ms"] is not None and low["probes"]["ttft_ms"]["p50"] > 0
    assert high["probes"]["http_429"] > 0 and not high["probes"]["fluid_holds"]
    assert record["newcomer_capacity_rps"] == 2.0 and record["newcomer_first_failing_rps"] == 60.0
    probes = load_run(out / low["probes"]["run_file"])
    assert low["probes"]["run_file"] == "rate-2.probes.json" and probes.config.endpoint.arrival.rate_rps == 2.0
    assert len(probes.requests) == 6 and probes.complete
    assert "newcomer" in r.stdout and "probes" in r.stdout
    rep = cli("report", out / "load.json", "-o", tmp_path / "probed.html")  # each rate over its run, from its files
    page = (tmp_path / "probed.html").read_text(encoding="utf-8")
    assert rep.returncode == 0 and "Each rate over its run" in page and "TTFT, probe" in page, rep.stderr
