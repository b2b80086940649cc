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
    r = cli("run", p, "--endpoint", "http://127.0.0.1:9", "--workers", "2")
    assert r.returncode == 2 and "open loop (--rate)" in r.stderr
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
