"""The endpoint client's self-check, as a run records it (``run.client``; ENDPOINT_METRIC_FORMULAS "client_lag_ms",
"loop_lag_ms", "client_fell_behind"): how late its stamps were behind the server's sends, how late its event loop
woke, and whether it fell behind the streams it measured. No HTTP here: compare and show read it too."""

from __future__ import annotations

import math

from llmbench.results.schema import ClientStats, RequestResult, Run

_NS_PER_MS = 1_000_000
BEHIND_MS = 5.0  # a p99 stamp delay or event-loop lag above this: the client's own delay is in the figures
BUSY_PCT = 90.0  # a client process above this share of one core has no room left to read on time


def server_sends(timing: dict, start_unix_ns: int, events: int) -> list[float] | None:
    """The server's send stamps of a request's content events on its timeline (ms since its start), from the
    usage chunk's ``llmbench`` record (``arrived_unix_ms`` + ``token_times_ms``: llmbench serve, the stamping
    stub); None when the server sends none, or not one per content event."""
    arrived, times = timing.get("arrived_unix_ms"), timing.get("token_times_ms")
    if not isinstance(arrived, int | float) or not isinstance(times, list) or len(times) != events or not start_unix_ns:
        return None
    if not all(isinstance(t, int | float) and not isinstance(t, bool) and math.isfinite(t) for t in times):
        return None
    offset = arrived - start_unix_ns / _NS_PER_MS
    return [round(offset + t, 3) for t in times] if math.isfinite(offset) else None


def client_record(requests: list[RequestResult], cpu_s: float, wall_s: float, loop_lags: list[list[float]],
                  processes: int = 1, sched: list[tuple[float, int]] | None = None) -> ClientStats:  # fmt: skip
    """The client's cost and self-check (``run.client``): its CPU over ``processes`` processes, its stamps'
    delay behind the server's sends (every event of ``requests`` that has them), its event loops' lag (each
    process's samples in ``loop_lags``), its loop threads' wait for a CPU (each process's (ms, runs) in ``sched``,
    where it could be read), and whether it fell behind (ENDPOINT_METRIC_FORMULAS)."""
    import numpy as np

    events = sum(r.chunks or 0 for r in requests)
    lag = [t - x for r in requests if r.server_send_ms for t, x in zip(r.token_times_ms, r.server_send_ms, strict=True)]
    loop = [v for part in loop_lags for v in part]

    def q(v: list[float], p: float) -> float | None:
        return round(float(np.percentile(v, p)), 3) if v else None

    # p99 of the loop's lag: the worst process's, as each reads its own streams
    loop_p99 = max((q(part, 99) or 0.0 for part in loop_lags if part), default=None)
    pct = round(100 * cpu_s / wall_s, 2) if wall_s > 0 else 0.0
    record = ClientStats(cpu_s=round(cpu_s, 4), wall_s=round(wall_s, 4), cpu_pct_of_one_core=pct,
                         cpu_ms_per_event=round(1000 * cpu_s / events, 4) if events else None, processes=processes,
                         lag_events=len(lag) or None, lag_p50_ms=q(lag, 50), lag_p99_ms=q(lag, 99),
                         lag_max_ms=round(max(lag), 3) if lag else None, loop_lag_p50_ms=q(loop, 50),
                         loop_lag_p99_ms=loop_p99, loop_lag_max_ms=round(max(loop), 3) if loop else None)  # fmt: skip
    if sched:
        record.sched_wait_ms = round(sum(w for w, _ in sched), 3)
        record.sched_runs = sum(n for _, n in sched)
        record.sched_wait_per_run_ms = round(max(w / n if n else 0.0 for w, n in sched), 4)
    record.fell_behind = bool(behind_reasons(record)) if (lag or loop or events) else None
    return record


def behind_reasons(c: ClientStats) -> list[str]:
    """Why the client's own delay is in the figures (nothing: it kept up): its event loop woke late, or a process
    had no CPU left. Stamps late behind the server's sends alone are no verdict on the client: a relay that holds
    the stream makes them late too, while the client's loop is idle (the buffering detector's case); with a late
    loop, they say by how much."""
    reasons = []
    if c.loop_lag_p99_ms is not None and c.loop_lag_p99_ms > BEHIND_MS:
        reasons.append(f"its event loop woke p99 {c.loop_lag_p99_ms:.1f} ms late")
    if c.cpu_pct_of_one_core / max(c.processes, 1) > BUSY_PCT:
        reasons.append(f"it used {c.cpu_pct_of_one_core / max(c.processes, 1):.0f}% of a core per process")
    if reasons and (share := sched_share(c)) is not None and share >= 1.0:  # why: its core was taken, or it was busy
        reasons.append(f"its event loop waited for a CPU {share:.0f}% of the window ({c.sched_wait_per_run_ms:.2f} "
                       "ms a wake-up on average: other processes or threads held its cores)")  # fmt: skip
    if reasons and c.lag_p99_ms is not None:
        reasons.append(f"its stamps were p99 {c.lag_p99_ms:.1f} ms (max {c.lag_max_ms:.1f}) behind the server's sends")
    return reasons


def sched_share(c: ClientStats) -> float | None:
    """The share of the window (%) a client process's event loop waited for a CPU while ready to run (the mean over
    its processes); None where the kernel did not say."""
    if c.sched_wait_ms is None or c.wall_s <= 0:
        return None
    return 100 * c.sched_wait_ms / 1000 / c.wall_s / max(c.processes, 1)


def behind_warning(run: Run) -> str | None:
    """Said loudly when the client itself fell behind the streams it measures: the figures then hold its delay.
    With several client processes, it names those that did."""
    c = run.client
    reasons = behind_reasons(c) if c is not None else []
    parts = (c.per_process or []) if c is not None else []
    late = [k for k, p in enumerate(parts) if p.fell_behind]
    if not reasons and not late:
        return None
    hosts = {p.host for p in parts}
    named = [f"{k} on {parts[k].host}" if len(hosts) > 1 and parts[k].host else str(k) for k in late]
    which = (
        f" (client process{'es' if len(late) > 1 else ''} {', '.join(named)} of {c.processes})"
        if c is not None and late
        else ""
    )
    return (f"THE CLIENT FELL BEHIND{which}: {'; '.join(reasons) or 'see client.per_process'}. TTFT and ITL include "
            "the client's own delay, and events it read late arrive together (not a proxy's buffering); measure "
            "with more client processes (--workers N) or fewer streams")  # fmt: skip
