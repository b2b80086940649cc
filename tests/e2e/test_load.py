"""Open-loop arrivals, rate sweeps with goodput under SLOs, load generators over several processes, reasoning
streams and token counts that disagree: against real uvicorn servers on loopback.

The server under load is ``llmbench serve``'s app around a model whose forward passes take known times
(tests/delayed_model.py), one request at a time with a queue of 4 and 429 beyond: its capacity is known, so
a rate far below it must hold and a rate far above it must not.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/integration/test_load.py."""

from __future__ import annotations

import asyncio
import json

import pytest

from llmbench.drivers import load as ld
from llmbench.drivers.run import run as run_driver
from llmbench.options import EndpointOptions
from llmbench.results.storage import load_run, read_load
from tests.integration.test_load import (
    NEW_TOKENS,
    OPTIONS,
    PROMPTS,
    _open,
    _prompts,
    server,  # noqa: F401 (fixtures)
)


def test_a_rate_sweep_holds_below_capacity_and_fails_above_with_429s(cli, server, tmp_path):
    out = tmp_path / "load"
    r = cli("load", _prompts(tmp_path), "--endpoint", server, "--rates", "2,200", "--requests", "12",
            "--slo", "ttft_ms:p90=400", "--slo", "tpot_ms:p90=200", "--max-new-tokens", str(NEW_TOKENS),
            "--ignore-eos", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = read_load(out / "load.json")
    low, high = record["rates"]
    assert low["offered_rate_rps"] == 2 and low["attainment"] == 1.0 and low["holds"] and low["http_429"] == 0
    assert high["http_429"] > 0 and not high["holds"] and high["goodput_rps"] < high["offered_rate_rps"]
    assert record["saturation"]["rate_rps"] == 2 and record["saturation"]["first_failing_above_rps"] == 200
    assert (out / low["run_file"]).exists() and load_run(out / high["run_file"]).config.endpoint.arrival
    assert "saturation: 2 requests/s" in r.stdout
    # show and compare read load.json; report draws it
    assert cli("show", out / "load.json").returncode == 0
    c = cli("compare", out / "load.json", out / "load.json")
    assert c.returncode == 0 and "goodput" in c.stdout and "rate-2.json" in c.stdout, c.stderr
    rep = cli("report", out / "load.json", "-o", tmp_path / "load.html")
    assert rep.returncode == 0 and "<svg" in (tmp_path / "load.html").read_text(encoding="utf-8")


def test_the_saturation_search_lands_between_a_holding_and_a_failing_rate(server, tmp_path):
    spec = ld.LoadSpec(rates=None, slos=[ld.Slo("ttft_ms", 90, 400.0)], arrival="constant", duration_s=1.0,
                       auto_start=2.0, auto_steps=2)  # fmt: skip
    record, path = asyncio.run(ld.load(PROMPTS, EndpointOptions(endpoint=server), OPTIONS, spec, tmp_path / "auto"))
    sat = record["saturation"]
    lo, hi = sat["bracket_rps"]
    assert sat["method"] == "auto" and sat["rate_rps"] == lo and lo < hi
    # the server serves ~20 requests/s at best: the bracket straddles a rate between a slow and an overload
    assert 2.0 <= lo <= 40.0 and hi <= 200.0
    rows = {r["offered_rate_rps"]: r for r in record["rates"]}
    assert rows[lo]["holds"] and not rows[hi]["holds"] and json.loads(path.read_text())["complete"]


@pytest.mark.subprocess
def test_two_worker_processes_share_the_schedule_and_reach_the_same_rate(server, tmp_path):
    ep1 = _open(server, 5.0, arrival="constant", requests=12)
    one, _ = asyncio.run(run_driver(PROMPTS, ep1, OPTIONS))
    out = tmp_path / "w2.json"
    two, _ = asyncio.run(run_driver(PROMPTS, _open(server, 5.0, arrival="constant", requests=12, workers=2),
                                    OPTIONS, output=out))  # fmt: skip
    saved = load_run(out)
    assert saved.config.endpoint.workers == 2 and saved.complete
    # every request of the schedule is accounted for, once, whichever worker sent it
    due = sorted([r.scheduled_s for r in saved.requests] + [f.scheduled_s for f in saved.failed_requests])
    assert due == pytest.approx([i / 5 for i in range(12)])
    # each worker sent on the one shared clock: no request went out before its due time, none far after
    assert all(0 <= r.send_lateness_ms < 200 for r in saved.requests)
    assert two.summary.achieved_rate_rps == pytest.approx(one.summary.achieved_rate_rps, rel=0.2)
