"""The client's self-check and its processes (issue 59), as logic: when a run says its client fell behind, how a
server's send stamps are placed on a request's timeline, and how many client processes a run is dealt to."""

from __future__ import annotations

import os

import pytest

from llmbench.core.errors import UserError
from llmbench.options import STREAMS_PER_PROCESS, client_processes
from llmbench.results.client import BEHIND_MS, behind_reasons, behind_warning, client_record, server_sends
from llmbench.results.schema import ClientStats
from tests.helpers import synthetic_run


def _with_sends(lag_ms: float):
    """A run whose every event arrived ``lag_ms`` after the server sent it."""
    run = synthetic_run(n=4, tokens=8)
    for q in run.requests:
        q.chunks = len(q.token_times_ms)
        q.server_send_ms = [t - lag_ms for t in q.token_times_ms]
    return run


def test_the_stamps_delay_behind_the_sends_is_measured_and_judged_with_the_loop():
    for lag, loop, behind in ((0.3, 0.1, False), (BEHIND_MS + 2.0, 0.1, False), (BEHIND_MS + 2.0, BEHIND_MS * 2, True)):
        run = _with_sends(lag)
        c = client_record(run.requests, cpu_s=0.1, wall_s=10.0, loop_lags=[[loop] * 50])
        assert c.lag_events == 4 * 8 and c.lag_p50_ms == pytest.approx(lag, abs=1e-3)
        # late stamps with an idle loop: the stream was held on the way (a relay), not read late by the client
        assert c.fell_behind is behind, c
        run.client = c
        said = behind_warning(run)
        assert (said is not None and "event loop woke" in said and "stamps were p99" in said) is behind


def test_a_lagging_event_loop_or_a_busy_process_is_falling_behind_too():
    quiet = ClientStats(cpu_s=1, wall_s=10, cpu_pct_of_one_core=10.0, loop_lag_p99_ms=0.5)
    assert behind_reasons(quiet) == []
    assert "event loop woke" in behind_reasons(quiet.model_copy(update={"loop_lag_p99_ms": BEHIND_MS + 1}))[0]
    busy = quiet.model_copy(update={"cpu_pct_of_one_core": 190.0, "processes": 2})
    assert "95% of a core per process" in behind_reasons(busy)[0]
    assert behind_reasons(busy.model_copy(update={"processes": 4})) == []  # 47% each


def test_several_processes_name_the_one_that_fell_behind():
    run = _with_sends(0.2)
    ok = client_record(run.requests, 0.1, 10.0, [[0.1]])
    late = client_record(run.requests, 0.1, 10.0, [[BEHIND_MS * 4] * 10])
    run.client = ok.model_copy(update={"processes": 2, "per_process": [ok, late]})
    assert "client process 1 of 2" in (behind_warning(run) or "")


def test_server_send_stamps_are_placed_on_the_requests_timeline_or_dropped():
    start_unix_ns = 1_000_000_000_000_000  # the client's wall clock at the request's start
    timing = {"arrived_unix_ms": 1_000_000_000.0 + 2.0, "token_times_ms": [10.0, 20.5]}  # arrived 2 ms later
    assert server_sends(timing, start_unix_ns, 2) == [12.0, 22.5]
    assert server_sends(timing, start_unix_ns, 3) is None  # not one per content event
    for bad in ({"arrived_unix_ms": "x", "token_times_ms": [1.0, 2.0]}, {"token_times_ms": [1.0, 2.0]},
                {"arrived_unix_ms": 1.0, "token_times_ms": [1.0, float("nan")]},
                {"arrived_unix_ms": 1.0, "token_times_ms": [True, 2.0]}):  # fmt: skip
        assert server_sends(bad, start_unix_ns, 2) is None, bad


def test_client_processes_auto_and_asked():
    cores = os.cpu_count() or 1
    assert client_processes(None, streams=1, events_per_s=None, unshared=None) == 1
    assert client_processes(None, streams=STREAMS_PER_PROCESS, events_per_s=None, unshared=None) == 1
    assert client_processes(None, streams=STREAMS_PER_PROCESS + 1, events_per_s=None, unshared=None) == min(2, cores)
    assert client_processes(None, streams=10**5, events_per_s=None, unshared=None) == cores  # as many as the machine
    assert client_processes(None, streams=10**5, events_per_s=None, unshared="--turns ...") == 1
    assert client_processes(None, streams=None, events_per_s=1.0, unshared=None) == 1
    assert client_processes(3, streams=4, events_per_s=None, unshared=None) == 3
    with pytest.raises(UserError, match="--workers 5 with --concurrency 4"):
        client_processes(5, streams=4, events_per_s=None, unshared=None)
    with pytest.raises(UserError, match="--workers 2: why not"):
        client_processes(2, streams=4, events_per_s=None, unshared="why not")


def test_compare_says_whose_client_fell_behind(cli, tmp_path):
    import llmbench

    base, new = _with_sends(0.2), _with_sends(BEHIND_MS * 3)
    for run, loop in ((base, 0.1), (new, BEHIND_MS * 3)):
        run.client = client_record(run.requests, 0.1, 10.0, [[loop] * 20])
    llmbench.save_run(base, tmp_path / "base.json")
    llmbench.save_run(new, tmp_path / "new.json")
    r = cli("compare", tmp_path / "base.json", tmp_path / "new.json")
    assert r.returncode == 0, r.stderr
    text = " ".join((r.stdout + r.stderr).split())
    assert "new's CLIENT FELL BEHIND (its event loop woke p99" in text and "base's CLIENT" not in text, text
