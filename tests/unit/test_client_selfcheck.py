"""The client's self-check and its processes (issue 59), as logic: when a run says its client fell behind, how a
server's send stamps are placed on a request's timeline, and how many client processes a run is dealt to."""

from __future__ import annotations

import os

import pytest

from llmbench.core.errors import UserError
from llmbench.options import client_processes
from llmbench.results.client import BEHIND_MS, behind_reasons, behind_warning, client_record, server_sends
from llmbench.results.schema import ClientStats
from llmbench.spec import STREAMS_PER_PROCESS
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
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
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


def test_a_read_that_held_several_arrivals_is_cut_and_stamped_at_each():
    from llmbench.backends.http.client import at_arrival

    # the reader woke once, at 500, for 12 bytes the protocol received at 100 (5 bytes) and 300 (7 more)
    assert at_arrival([(500, b"data1data222")], [(100, 5), (300, 12)]) == [(100, b"data1"), (300, b"data222")]
    # bytes past the last arrival keep the reader's stamp; an arrival never makes a stamp later than the reader's
    assert at_arrival([(500, b"abcdef")], [(100, 2), (900, 4)]) == [(100, b"ab"), (500, b"cd"), (500, b"ef")]
    # several reads: arrivals of bytes already taken are skipped, and each read's pieces stay in order
    reads = [(200, b"ab"), (400, b"cdef"), (600, b"g")]
    assert at_arrival(reads, [(150, 1), (160, 2), (350, 5), (380, 6), (590, 7)]) == [
        (150, b"a"), (160, b"b"), (350, b"cde"), (380, b"f"), (590, b"g")]  # fmt: skip
    assert b"".join(d for _, d in at_arrival(reads, [(1, 3)])) == b"abcdefg"  # an arrival inside a read: no bytes lost


def test_the_wait_for_a_cpu_is_recorded_and_said_with_a_late_loop():
    run = _with_sends(0.2)
    c = client_record(run.requests, 0.5, 10.0, [[0.5] * 20], sched=[(1200.0, 1000)])
    assert c.sched_wait_ms == 1200.0 and c.sched_runs == 1000 and c.sched_wait_per_run_ms == pytest.approx(1.2)
    assert c.fell_behind is False  # waiting for a CPU with a loop that still woke on time: it kept up
    late = client_record(run.requests, 0.5, 10.0, [[BEHIND_MS * 2] * 20], sched=[(1200.0, 1000)])
    reasons = behind_reasons(late)
    assert late.fell_behind and any("waited for a CPU 12% of the window (1.20 ms a wake-up" in r for r in reasons)
    two = client_record(run.requests, 1.0, 10.0, [[0.1], [0.1]], processes=2, sched=[(10.0, 100), (400.0, 100)])
    assert two.sched_wait_ms == 410.0 and two.sched_runs == 200 and two.sched_wait_per_run_ms == 4.0  # the worst's


def test_several_hosts_name_the_machine_of_the_one_that_fell_behind():
    run = _with_sends(0.2)
    ok = client_record(run.requests, 0.1, 10.0, [[0.1]]).model_copy(update={"host": "node-a"})
    late = client_record(run.requests, 0.1, 10.0, [[BEHIND_MS * 4] * 10]).model_copy(update={"host": "node-b"})
    run.client = ok.model_copy(update={"processes": 2, "per_process": [ok, late], "host": None})
    assert "client process 1 on node-b of 2" in (behind_warning(run) or "")


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")
def test_auto_client_processes_count_the_cpus_this_process_may_use():
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # taskset -c N: one CPU, however many the machine has
    try:
        assert client_processes(None, streams=10**5, events_per_s=None, unshared=None) == 1
    finally:
        os.sched_setaffinity(0, allowed)
