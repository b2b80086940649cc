"""Open-loop arrivals, rate sweeps with goodput under SLOs, load generators over several processes, reasoning
streams and token counts that disagree: against real uvicorn servers on loopback.

The server under load is ``llmbench serve``'s app around a model whose forward passes take known times
(tests/delayed_model.py), one request at a time with a queue of 4 and 429 beyond: its capacity is known, so
a rate far below it must hold and a rate far above it must not.

This file: the part that needs no child process and no socket (tests/unit); the rest is in
tests/integration/test_load.py."""

from __future__ import annotations

import json

import numpy as np
import pytest

from llmbench.core.errors import UserError
from llmbench.drivers import load as ld
from llmbench.results.storage import read_load
from llmbench.workloads.arrivals import offsets_of, parse_arrival, plan_arrivals
from tests.integration.test_load import _prompts


def test_schedules_are_drawn_in_advance_reproducibly_with_the_asked_rate_and_shape():
    for process, cv in (("poisson", 1.0), ("gamma:3", 3.0), ("gamma:0.5", 0.5)):
        record, offsets = plan_arrivals(50.0, process, requests=20_000, seed=7)
        gaps = np.diff(offsets)
        assert offsets[0] == 0.0 and record.requests == 20_000 and record.cv == cv
        assert gaps.mean() == pytest.approx(1 / 50, rel=0.05)  # 20,000 gaps: the mean is within a few %
        assert gaps.std() / gaps.mean() == pytest.approx(cv, rel=0.1)
        assert offsets == plan_arrivals(50.0, process, requests=20_000, seed=7)[1]  # the same every time
        assert offsets != plan_arrivals(50.0, process, requests=20_000, seed=8)[1]
    assert offsets_of(plan_arrivals(4.0, "constant", requests=3)[0], 3) == [0.0, 0.25, 0.5]
    record, offsets = plan_arrivals(10.0, "poisson", duration_s=5.0, seed=1)
    assert max(offsets) < 5.0 and record.requests == len(offsets) and 25 < len(offsets) < 80
    # a duration cut is a prefix of the longer schedule: the same seed draws the same first arrivals
    assert offsets == plan_arrivals(10.0, "poisson", requests=len(offsets), seed=1)[1]


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"rate_rps": 0, "requests": 3}, "--rate must be a positive"),
        ({"rate_rps": 1, "requests": 3, "duration_s": 2}, "--requests N or --duration S"),
        ({"rate_rps": 1}, "--requests N or --duration S"),
        ({"rate_rps": 1, "requests": 0}, "--requests must be at least 1"),
        ({"rate_rps": 1, "duration_s": -1}, "--duration -1: expected a number above 0"),
        ({"rate_rps": 1, "requests": 3, "arrival": "burst"}, "unknown --arrival"),
        ({"rate_rps": 1, "requests": 3, "arrival": "gamma:x"}, "coefficient of variation"),
    ],
)
def test_bad_schedules_are_user_errors(kw, message):
    rate = kw.pop("rate_rps")
    with pytest.raises(UserError, match=message):
        plan_arrivals(rate, kw.pop("arrival", "poisson"), **kw)
    assert parse_arrival("gamma:2") == ("gamma", 2.0)


def test_slo_and_rate_parsing():
    assert ld.Slo.parse("ttft_ms:p90=1000") == ld.Slo("ttft_ms", 90.0, 1000.0)
    assert ld.Slo.parse(" tpot_ms : p99.9 = 50 ").text == "tpot_ms:p99.9=50"
    assert ld.Slo.parse("e2e_ms:p90=500") == ld.Slo("e2e_ms", 90.0, 500.0)  # a metric name with a digit
    assert ld.Slo.parse("e2e_from_schedule_ms:p50=900").metric == "e2e_from_schedule_ms"
    bad_slos = ("ttft:p90=1", "ttft_ms:90=1", "ttft_ms:p90=x", "ttft_ms:p0=5", "itl_ms:p90=5", "ttft_ms:p90=-1",
                "ttft_ms:p90=nan", "ttft_ms:p90=inf")  # fmt: skip
    for bad in bad_slos:
        with pytest.raises(UserError, match="--slo"):
            ld.Slo.parse(bad)
    assert ld.parse_rates("4, 0.5,1") == [0.5, 1.0, 4.0] and ld.parse_rates("AUTO") is None
    for bad in ("", "1,-2", "1,1", "a"):
        with pytest.raises(UserError):
            ld.parse_rates(bad)


def test_bad_load_input_is_one_line(cli, tmp_path):
    p = _prompts(tmp_path)
    for args, message in (
        (("--slo", "ttft_ms=5"), "--slo"),
        (("--slo", "ttft_ms:p90=5", "--rates", "0"), "--rates"),
        ((), "at least one --slo"),
        (("--slo", "ttft_ms:p90=5", "--min-attainment", "2"), "--min-attainment"),
        (("--slo", "ttft_ms:p90=5", "--arrival", "zipf"), "unknown --arrival"),
    ):
        r = cli("load", p, "--endpoint", "http://127.0.0.1:9", *args, "-o", tmp_path / "x", "-q")
        assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    done = tmp_path / "done"
    done.mkdir()
    (done / "load.json").write_text("{}", encoding="utf-8")
    r = cli("load", p, "--endpoint", "http://127.0.0.1:9", "--slo", "ttft_ms:p90=5", "-o", done, "-q")
    assert r.returncode == 2 and "already holds a load (load.json)" in r.stderr  # nothing is overwritten
    assert (done / "load.json").read_text(encoding="utf-8") == "{}"
    r = cli("run", p, "--weights", "random", "--rate", "2")
    assert r.returncode == 2 and "--rate" in r.stderr and "--endpoint" in r.stderr
    # --workers splits a closed loop's streams too: not more processes than streams
    r = cli("run", p, "--endpoint", "http://127.0.0.1:9", "--workers", "2")
    assert r.returncode == 2 and "--workers 2 with --concurrency 1: each client process needs a stream" in r.stderr
    r = cli("run", p, "--endpoint", "http://127.0.0.1:9", "--rate", "2", "--concurrency", "3")
    assert r.returncode == 2 and "--concurrency" in r.stderr


def test_a_load_json_of_another_version_is_refused_in_one_line(cli, tmp_path):
    path = tmp_path / "load.json"
    path.write_text(json.dumps({"load_version": 99, "rates": []}), encoding="utf-8")
    for args in (("show", path), ("compare", path, path), ("report", path, "-o", tmp_path / "r.html")):
        r = cli(*args)
        assert r.returncode == 2 and "load_version 99" in r.stderr and "reads version 1" in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1
    assert read_load(tmp_path / "missing.json") is None  # not a load.json: the caller's reader says what's wrong


# -- fluidity (Etalon) and the reader's stalls under load ------------------------------------------------------

MS = 1_000_000


def _answer(i: int, ttft_ms: float, gaps_ms: list[float], rate: float = 2.0):
    """A finished open-loop request whose stamps are known: TTFT, then one token per gap (a word each)."""
    from llmbench.results.metrics import ids_sha256, request_result

    stamps = [int(ttft_ms * MS)]
    for gap in gaps_ms:
        stamps.append(stamps[-1] + int(gap * MS))
    n = len(stamps)
    return request_result(prompt_index=i, repeat=0, start_ns=0, tokenized_ns=MS, stamps_ns=stamps, prompt_tokens=30,
                          output_sha256=ids_sha256(list(range(n))), output_text=" ".join(["word"] * n),
                          scheduled_s=i / rate, send_lateness_ms=0.0, e2e_from_schedule_ms=stamps[-1] / MS)  # fmt: skip


# Each kind's fluidity at the default pace (Etalon's deadlines: 1000 ms for the first token, a token's reading
# time, ~194 ms, for each next one, plus the slack earlier tokens left), checked below before they are counted.
STEADY = (100.0, [20.0] * 15)  # fluidity 1, no stall
LATE = (1500.0, [20.0] * 15)  # TTFT past the 1 s deadline (a queue): 15 met of 18, 0.833
PAUSED = (100.0, [600.0] + [20.0] * 14)  # the slack covers a 600 ms pause (fluid), the reader waits for it (a stall)
SLOW = (100.0, [400.0] * 15)  # every token past its deadline: 0.19, and the reader stalls on each


def _rate_run(rate: float, kinds: list[tuple[float, list[float]]], failed: int = 0):
    from llmbench.results.metrics import summarize
    from llmbench.results.schema import Arrival, EndpointConfig, FailedRequest
    from tests.helpers import synthetic_run

    run = synthetic_run(n=1)
    run.requests = [_answer(i, ttft, gaps, rate) for i, (ttft, gaps) in enumerate(kinds)]
    run.failed_requests = [FailedRequest(prompt_index=len(kinds) + k, repeat=0, error="HTTP 429", status=429,
                                         scheduled_s=(len(kinds) + k) / rate) for k in range(failed)]  # fmt: skip
    run.config.endpoint = EndpointConfig(url="http://127.0.0.1:9/v1/chat/completions",
                                         arrival=Arrival(rate_rps=rate, requests=len(kinds) + failed))  # fmt: skip
    run.summary = summarize(run.requests)
    return run


def test_the_kinds_of_answer_have_the_fluidity_and_stalls_the_counts_below_rely_on():
    shapes = {name: _answer(0, *kind) for name, kind in
              (("steady", STEADY), ("late", LATE), ("paused", PAUSED), ("slow", SLOW))}  # fmt: skip
    assert shapes["steady"].fluidity == 1.0 and shapes["steady"].reader_stalls == 0
    assert shapes["late"].fluidity == pytest.approx(15 / 18, abs=1e-4) and shapes["late"].reader_stalls == 0
    assert shapes["paused"].fluidity == 1.0 and shapes["paused"].reader_stalls == 1
    assert shapes["slow"].fluidity < 0.5 and shapes["slow"].reader_stalls == 15


def test_fluidity_attainment_is_fluid_requests_of_those_sent_failed_and_tokenless_ones_not_fluid():
    spec = ld.LoadSpec(rates=[50.0], slos=[ld.Slo("ttft_ms", 90, 1e9)])
    assert (spec.fluidity_target, spec.fluidity_share) == (0.9, 0.99)  # the spec's defaults (Etalon's)
    # a rate past capacity: 5 answers in time, 2 held in a queue past the prefill deadline, 1 paused, 2 refused
    run = _rate_run(50.0, [STEADY] * 5 + [LATE] * 2 + [PAUSED], failed=2)
    row = ld.rate_figures(run, spec)
    assert row["sent"] == 10 and row["fluid"] == 6 and row["fluidity_attainment"] == 0.6 and not row["fluid_holds"]
    assert row["stall_free"] == 0.7  # the paused answer stalled and the 429s never streamed: 7 of 10
    stalls = [r.reader_stall_ms for r in run.requests]
    assert row["reader_stall_ms"] == {"p50": round(float(np.percentile(stalls, 50)), 3),
                                      "p90": round(float(np.percentile(stalls, 90)), 3)}  # fmt: skip
    assert row["reader_stall_ms"]["p90"] > 0 == row["reader_stall_ms"]["p50"]
    spec.fluidity_target = 0.8  # a looser target: the queued answers' 0.833 is fluid now
    assert ld.rate_figures(run, spec)["fluid"] == 8
    # a one-token answer has a fluidity (its one deadline): in time it is fluid, late it is not, whatever
    # one_token_passes says about TPOT; an answer without a token has none and is not fluid
    spec.fluidity_target = 0.9
    one = _rate_run(50.0, [(100.0, []), (1500.0, []), STEADY])
    one.requests.append(one.requests[0].model_copy(update={"fluidity": None, "reader_stalls": None}))
    for passes in (False, True):
        spec.one_token_passes = passes
        figures = ld.rate_figures(one, spec)
        assert (figures["fluid"], figures["fluidity_attainment"], figures["stall_free"]) == (2, 0.5, 0.75)


def test_a_rate_holds_fluidity_at_exactly_the_share_and_not_a_request_below_it():
    run = _rate_run(8.0, [STEADY] * 99 + [SLOW])  # 99 of 100 fluid
    spec = ld.LoadSpec(rates=[8.0], slos=[ld.Slo("ttft_ms", 90, 1e9)])
    row = ld.rate_figures(run, spec)
    assert row["fluidity_attainment"] == 0.99 and row["fluid_holds"] and row["stall_free"] == 0.99
    spec.fluidity_share = 0.995
    assert not ld.rate_figures(run, spec)["fluid_holds"]
    assert ld.rate_figures(_rate_run(8.0, [], failed=3), spec)["fluidity_attainment"] == 0.0  # nothing streamed


def test_the_fluid_capacity_is_the_highest_rate_below_the_first_that_is_not_fluid():
    def rows(*holds: bool) -> list[dict]:
        return [{"offered_rate_rps": 2.0**k, "fluid_holds": h, "output_tokens_per_s": 10.0 * 2**k}
                for k, h in enumerate(holds)]  # fmt: skip

    assert ld.fluid_capacity(rows(True, True, False, True)) == {  # a lucky rate above a failure is no capacity
        "fluid_capacity_rps": 2.0, "fluid_tokens_per_s": 20.0, "fluid_first_failing_rps": 4.0}  # fmt: skip
    assert ld.fluid_capacity(rows(True, True))["fluid_capacity_rps"] == 2.0
    assert ld.fluid_capacity(rows(True, True))["fluid_first_failing_rps"] is None
    assert ld.fluid_capacity(rows(False, True)) == {"fluid_capacity_rps": None, "fluid_tokens_per_s": None,
                                                   "fluid_first_failing_rps": 1.0}  # fmt: skip
    assert ld.fluid_capacity(list(reversed(rows(True, False))))["fluid_capacity_rps"] == 1.0  # by rate, not order


def _load_folder(tmp_path, share: float = 0.99):
    """A load.json as ``llmbench load`` writes it, over hand-built rates: 2/s all fluid, 8/s 99% fluid, 50/s
    past capacity."""
    from llmbench.options import EndpointOptions, RunOptions
    from llmbench.results.storage import save_run
    from tests.integration.test_load import PROMPTS

    spec = ld.LoadSpec(rates=[2.0, 8.0, 50.0], slos=[ld.Slo("ttft_ms", 90, 1e9)], fluidity_share=share)
    folder = tmp_path / f"load-{share:g}"
    folder.mkdir()
    driver = ld.LoadDriver(PROMPTS, EndpointOptions(endpoint="http://127.0.0.1:9"), RunOptions(), spec, folder, None,
                           None)  # fmt: skip
    for rate, run in ((2.0, _rate_run(2.0, [STEADY] * 9 + [PAUSED])), (8.0, _rate_run(8.0, [STEADY] * 99 + [SLOW])),
                      (50.0, _rate_run(50.0, [STEADY] * 5 + [LATE] * 2 + [PAUSED], failed=2))):  # fmt: skip
        path = folder / f"rate-{rate:g}.json"
        save_run(run, path)
        driver._add(rate, run, path)
    driver.save(complete=True)
    return folder / "load.json"


def test_load_json_carries_the_fluid_capacity_and_show_history_and_compare_read_it_and_older_records(cli, tmp_path):
    from rich.console import Console

    from llmbench.history.records import results_of_file
    from llmbench.present.terminal import load_comparison

    path = _load_folder(tmp_path)
    record = read_load(path)
    assert (record["fluidity_target"], record["fluidity_share"]) == (0.9, 0.99)
    assert [r["fluidity_attainment"] for r in record["rates"]] == [1.0, 0.99, 0.6]
    assert [r["stall_free"] for r in record["rates"]] == [0.9, 0.99, 0.7]
    assert record["fluid_capacity_rps"] == 8.0 and record["fluid_first_failing_rps"] == 50.0
    assert record["fluid_tokens_per_s"] == record["rates"][1]["output_tokens_per_s"] > 0
    assert "fluid_capacity_rps" in record["definitions"]
    stricter = read_load(_load_folder(tmp_path, share=0.995))
    assert stricter["fluid_capacity_rps"] == 2.0 and stricter["fluid_first_failing_rps"] == 8.0
    shown = cli("show", path)
    assert shown.returncode == 0, shown.stderr
    assert "fluid capacity: 8 requests/s" in shown.stdout and "every lower rate too; 50/s did not" in shown.stdout
    assert "stall-free" in shown.stdout and "99%" in shown.stdout
    values = {m["metric"]: m["value"] for m in results_of_file(path)[-1].metrics}
    assert values["fluid_capacity_rps"] == 8.0 and values["fluidity_attainment@50"] == 0.6
    # a load.json from before: no fluidity anywhere; show, history and compare still read it
    old = json.loads(path.read_text(encoding="utf-8"))
    for key in ("fluidity_target", "fluidity_share", "fluid_capacity_rps", "fluid_tokens_per_s",
                "fluid_first_failing_rps"):  # fmt: skip
        del old[key]
    for row in old["rates"]:
        for key in ("fluid", "fluidity_attainment", "fluid_holds", "stall_free", "reader_stall_ms"):
            del row[key]
    old_path = path.with_name("old.json")
    old_path.write_text(json.dumps(old), encoding="utf-8")
    shown = cli("show", old_path)
    assert shown.returncode == 0 and "saturation:" in shown.stdout and "fluid capacity" not in shown.stdout
    old_values = {m["metric"] for m in results_of_file(old_path)[-1].metrics}
    assert "saturation_rps" in old_values and not any("fluid" in v for v in old_values)
    console = Console(record=True, width=200)
    console.print(load_comparison(old, record))
    assert "- -> 99%" in console.export_text()
    compared = cli("compare", old_path, path)
    assert compared.returncode == 0 and "fluid capacity: - -> 8 requests/s" in compared.stdout, compared.stderr


@pytest.mark.parametrize("option", ["--fluidity-target", "--fluidity-share"])
def test_the_fluidity_settings_are_bounded_in_one_line(cli, tmp_path, option):
    p = _prompts(tmp_path)
    for bad in ("0", "-0.5", "1.5", "nan", "inf", "x"):
        r = cli("load", p, "--endpoint", "http://127.0.0.1:9", "--slo", "ttft_ms:p90=5", option, bad, "-o",
                tmp_path / "x", "-q")  # fmt: skip
        assert r.returncode == 2 and option in r.stderr and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
    name = option.removeprefix("--").replace("-", "_")
    with pytest.raises(UserError, match=option):  # a LoadSpec made in Python is held to the same bounds
        ld.LoadSpec(
            rates=[1.0], slos=[ld.Slo("ttft_ms", 90, 5.0)], requests=3, duration_s=None, **{name: 0.0}
        ).validate()
    ld.LoadSpec(
        rates=[1.0], slos=[ld.Slo("ttft_ms", 90, 5.0)], requests=3, duration_s=None, **{name: 1.0}
    ).validate()  # 1: allowed


# -- the steady-state window, percentile bounds and verdicts (issue 63) --------------------------------------------


def test_a_rate_is_judged_on_its_steady_window_where_a_cold_start_would_have_failed_it(cli, tmp_path):
    """320 requests at 10/s, the first 60 held 1.5 s before their first token (a server filling up): over the whole
    run the TTFT SLO holds for 81% of requests and the rate fails; on the steady window, which cuts those 60 (the
    arrival edges and MSER-5 on TTFT), it holds for all, with a lower bound that proves it."""
    from llmbench.options import EndpointOptions, RunOptions
    from llmbench.results.storage import save_run
    from tests.integration.test_load import PROMPTS

    run = _rate_run(10.0, [LATE] * 60 + [STEADY] * 260)
    spec = ld.LoadSpec(rates=[10.0], slos=[ld.Slo("ttft_ms", 90, 1000.0)])
    row = ld.rate_figures(run, spec)
    assert row["attainment"] == 0.8125 and row["ttft_ms"]["p90"] == 1500.0
    steady, window = row["steady"], row["steady"]["window"]
    # the 60 cut, within a batch of 5: the edge's 4 requests (one 0.4 s life at 10/s), then MSER-5's batches
    assert window["method"] == "edges+mser5" and 60 <= window["first"] <= 65
    assert window["start_s"] == pytest.approx(window["first"] / 10)
    assert steady["attainment"] == 1.0 and steady["ttft_ms"]["p90"] == 100.0
    assert steady["sent"] == window["last"] - window["first"] + 1
    assert row["holds"] and row["verdict"] == "holds" and steady["attainment_bounds"][0] >= 0.9
    # the whole run's 320 requests bound its p99; the window's fewer than 299 can't
    assert row["bounds_95"]["ttft_ms"]["p99"] == 1500.0 and steady["bounds_95"]["ttft_ms"]["p99"] is None
    assert steady["bounds_95"]["ttft_ms"]["p90"] == 100.0
    folder = tmp_path / "load"
    folder.mkdir()
    driver = ld.LoadDriver(PROMPTS, EndpointOptions(endpoint="http://127.0.0.1:9"), RunOptions(), spec, folder, None,
                           None)  # fmt: skip
    save_run(run, folder / "rate-10.json")
    driver._add(10.0, run, folder / "rate-10.json")
    record = driver.save(complete=True)
    assert record["saturation"]["proven_rate_rps"] == 10.0 and "verdict" in record["definitions"]
    from llmbench.history.records import results_of_file

    values = {m["metric"]: m["value"] for m in results_of_file(folder / "load.json")[-1].metrics}
    assert values["proven_rate_rps"] == 10.0 and "newcomer_capacity_rps" not in values  # no probes: not recorded
    shown = cli("show", folder / "load.json")
    assert shown.returncode == 0, shown.stderr
    assert "held at 95% confidence" in shown.stdout and "up to 10 requests/s" in shown.stdout
    from rich.console import Console

    from llmbench.present.terminal import load_table

    console = Console(record=True, width=250)
    console.print(load_table(record))
    table = console.export_text()
    assert "100 (n < 299)" in table and "100% (98.9%)" in table and "78.8%" in table  # p99 unbounded; the bound
    assert f"10/s: sends {window['start_s']:.1f}-" in shown.stdout and "whole run TTFT p90 1,500 ms" in shown.stdout


def test_a_rate_of_too_few_requests_is_unproven_not_held():
    spec = ld.LoadSpec(rates=[2.0], slos=[ld.Slo("ttft_ms", 90, 1000.0)])
    # 20 of 20 good: the edges cut one request each (a life is 0.4 s, a send every 0.5 s), too few left for MSER-5;
    # 18 of 18 good proves only n / (n + z^2) = 86.9% (Wilson's lower bound at a share of 1)
    few = ld.rate_figures(_rate_run(2.0, [STEADY] * 20), spec)
    assert few["holds"] and few["verdict"] == "unproven" and few["steady"]["window"]["method"] == "edges"
    assert few["steady"]["sent"] == 18 and few["steady"]["attainment_bounds"][0] == pytest.approx(
        18 / (18 + 1.6448536**2), abs=1e-4
    )
    assert few["steady"]["bounds_95"]["ttft_ms"] == {"p90": None, "p99": None}  # a p90 needs 29
    tiny = ld.rate_figures(_rate_run(2.0, [STEADY] * 10), spec)
    assert tiny["steady"]["window"]["method"] == "whole run: 10 finished requests, fewer than 20"
    assert "sent" not in tiny["steady"] and tiny["verdict"] == "unproven"
    enough = ld.rate_figures(_rate_run(2.0, [STEADY] * 40), spec)
    assert enough["verdict"] == "holds" and enough["bounds_95"]["ttft_ms"]["p90"] == 100.0
    failing = ld.rate_figures(_rate_run(2.0, [STEADY] * 10 + [LATE] * 10), spec)
    assert not failing["holds"] and failing["verdict"] == "fails"
    refused = ld.rate_figures(_rate_run(2.0, [], failed=3), spec)  # nothing finished: no window, no bound
    assert refused["steady"] is None and refused["verdict"] == "fails" and refused["ttft_ms"] is None


@pytest.mark.parametrize("option", ["--stop-min-s", "--stop-window-s", "--probe-rate"])
def test_the_stop_and_probe_settings_are_bounded_in_one_line(cli, tmp_path, option):
    p = _prompts(tmp_path)
    for bad in ("0", "-1", "nan", "inf", "x", "1e9"):
        r = cli("load", p, "--endpoint", "http://127.0.0.1:9", "--slo", "ttft_ms:p90=5", "--stop-saturated", option,
                bad, "-o", tmp_path / "x", "-q")  # fmt: skip
        assert r.returncode == 2 and option in r.stderr and len(r.stderr.strip().splitlines()) == 1, (bad, r.stderr)
    name = option.removeprefix("--").replace("-", "_")
    with pytest.raises(UserError, match=option):
        ld.LoadSpec(
            rates=[1.0], slos=[ld.Slo("ttft_ms", 90, 5.0)], requests=3, duration_s=None, **{name: -1.0}
        ).validate()


def test_a_mid_stream_stall_is_a_gap_far_above_the_requests_own_pace():
    from llmbench.results.metrics import mid_stream_stalls

    steady = [10.0 * k for k in range(12)]
    assert mid_stream_stalls(steady) == []
    paused = steady[:6] + [t + 300 for t in steady[6:]]  # one gap of 310 ms in a 10 ms stream
    assert mid_stream_stalls(paused) == [pytest.approx(310.0)]
    assert mid_stream_stalls(steady[:6] + [t + 45 for t in steady[6:]]) == []  # 55 ms: 5.5x the pace, no stall
    fast = [0.5 * k for k in range(12)]
    assert mid_stream_stalls(fast[:6] + [t + 20 for t in fast[6:]]) == []  # 41x the pace, but 20 ms: nobody waits
    assert mid_stream_stalls([0.0, 10.0, 20.0, 400.0]) == []  # 3 gaps: too few to know the request's pace
    row = ld.rate_figures(_rate_run(2.0, [STEADY] * 3 + [PAUSED]), ld.LoadSpec(rates=[2.0], slos=[]))
    assert row["mid_stream_stalls"] == {"requests": 1, "share": 0.25, "stalls": 1, "longest_ms": 600.0,
                                        "stalled": [{"prompt_index": 3, "repeat": 0, "stalls": 1, "longest_ms": 600.0,
                                                     "stall_ms": 600.0}]}  # fmt: skip
    assert row["server_preemptions"] is None  # no --server-metrics


def test_probes_beside_a_load_spread_over_processes_are_refused_in_one_line(cli, tmp_path):
    r = cli("load", _prompts(tmp_path), "--endpoint", "http://127.0.0.1:9", "--slo", "ttft_ms:p90=5", "--rates", "1",
            "--probe-rate", "0.5", "--workers", "2", "-o", tmp_path / "x", "-q")  # fmt: skip
    assert r.returncode == 2 and "--probe-rate" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
