"""Open-loop arrival schedules: when each request is due, drawn in advance.

A closed loop (``--concurrency N``) sends a request when one finishes, so it can never offer more than the
server takes. An open loop sends request i at ``offsets[i]`` seconds after the start whatever the server does,
as users arrive: past the server's capacity the queue (or 429s) grows, which is what a rate sweep looks for.

Gaps between arrivals (mean ``1 / rate_rps``):

- ``poisson``: exponential gaps (independent users; coefficient of variation 1);
- ``gamma:CV``: gamma gaps with shape ``1 / CV**2`` (CV > 1: burstier than Poisson, < 1: smoother);
- ``constant``: every ``1 / rate_rps`` seconds.

The first request is due at 0. numpy's PCG64 generator seeded with ``seed`` draws the gaps, so a schedule is
the same on every machine and every run with the same arguments (and is recorded in the run JSON).
"""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np

from llmbench.core.errors import UserError
from llmbench.results.schema import Arrival
from llmbench.workloads.limits import MAX_RATE_RPS, MAX_SCHEDULE_S, check_range
from llmbench.workloads.prompts import MAX_REQUESTS, check_whole

PROCESSES = ("poisson", "constant", "gamma")
MAX_CV = 1e6  # a gamma's coefficient of variation: beyond it every gap is 0 but a few astronomic ones


def parse_arrival(text: str) -> tuple[str, float]:
    """``poisson`` | ``constant`` | ``gamma:CV`` -> (process, cv); UserError otherwise."""
    name, _, value = text.strip().lower().partition(":")
    if name == "gamma":
        try:
            cv = float(value)
        except ValueError:
            raise UserError(f"--arrival gamma needs a coefficient of variation, e.g. gamma:2, not '{text}'") from None
        if not 0 < cv <= MAX_CV:  # NaN fails this too; above it the gamma's shape 1 / CV**2 underflows
            raise UserError(f"--arrival gamma:CV needs 0 < CV <= {MAX_CV:g}, not {value}")
        return "gamma", cv
    if name in ("poisson", "constant") and not value:
        return name, 1.0 if name == "poisson" else 0.0
    raise UserError(f"unknown --arrival '{text}'; expected poisson, constant or gamma:CV")


def check_schedule(rate_rps: float, requests: int | None, duration_s: float | None) -> None:
    """UserError for an open loop that can't be drawn or kept, checked without drawing it: a rate that is no
    positive number up to :data:`MAX_RATE_RPS`, neither or both of ``requests`` and ``duration_s``, more requests
    than a plan holds, or a schedule longer than :data:`MAX_SCHEDULE_S` (a week)."""
    if not (rate_rps > 0 and math.isfinite(rate_rps)):
        raise UserError(f"--rate must be a positive number of requests per second, not {rate_rps}")
    if rate_rps > MAX_RATE_RPS:
        raise UserError(f"--rate {rate_rps:g}: expected at most {MAX_RATE_RPS:,g} requests per second")
    if (requests is None) == (duration_s is None):
        raise UserError("an open-loop run needs --requests N or --duration S (one of them)")
    if requests is not None:
        check_whole("--requests", requests, what=" requests")
        if (requests - 1) / rate_rps > MAX_SCHEDULE_S:  # the last one's mean due time
            raise UserError(f"--requests {requests} at --rate {rate_rps:g} is a schedule of "
                            f"{(requests - 1) / rate_rps:.3g} s: longer than a run keeps (at most a week)")  # fmt: skip
    if duration_s is not None:
        check_range("--duration", duration_s, 0, MAX_SCHEDULE_S, unit=" s (a week)", above=True)
    if duration_s is not None and rate_rps * duration_s > MAX_REQUESTS:  # drawn in advance: they must fit
        raise UserError(f"--rate {rate_rps:g} for --duration {duration_s:g} s is {rate_rps * duration_s:.3g} "
                        f"requests: more than llmbench can plan (at most {MAX_REQUESTS:,})")  # fmt: skip


def plan_arrivals(
    rate_rps: float,
    arrival: str = "poisson",
    *,
    requests: int | None = None,
    duration_s: float | None = None,
    seed: int = 0,
) -> tuple[Arrival, list[float]]:
    """The schedule's record and its offsets (seconds): ``requests`` of them, or as many as fall within
    ``duration_s``. UserError for a rate or length that is not positive, or neither/both given."""
    check_schedule(rate_rps, requests, duration_s)
    process, cv = parse_arrival(arrival)
    record = Arrival(
        rate_rps=rate_rps,
        process=process,  # type: ignore[arg-type]  # parse_arrival returns one of PROCESSES
        cv=cv,
        seed=seed,
        requests=1,
        duration_s=duration_s,
    )
    if requests is not None:
        offsets = offsets_of(record, requests)
    else:
        assert duration_s is not None
        # draw more than enough, then cut: the first `n` offsets do not depend on how many were drawn
        n = max(8, int(rate_rps * duration_s * 2 + 10 * math.sqrt(rate_rps * duration_s) + 10))
        drawn = offsets_of(record, n)
        offsets = [o for o in drawn if o < duration_s]
    if not math.isfinite(offsets[-1]):  # a rate so low that its gaps overflow: the schedule would never end
        raise UserError(f"--rate {rate_rps:g}: the gaps between arrivals are longer than any clock counts")
    record.requests = len(offsets)
    return record, offsets


def offsets_of(arrival: Arrival, n: int) -> list[float]:
    """The first ``n`` due times of ``arrival`` (seconds; the first is 0)."""
    mean_gap = 1.0 / arrival.rate_rps
    rng = np.random.Generator(np.random.PCG64(arrival.seed))
    if arrival.process == "constant":
        gaps = np.full(n - 1, mean_gap)
    elif arrival.process == "poisson":
        gaps = rng.exponential(mean_gap, n - 1)
    else:
        shape = 1.0 / arrival.cv**2
        gaps = rng.gamma(shape, mean_gap / shape, n - 1)
    return [0.0, *np.cumsum(gaps).round(6).tolist()]


def trace_arrivals(trace: Any) -> tuple[Arrival, list[float]]:
    """A replayed trace's schedule (:class:`llmbench.workloads.trace.Trace`): its rows' scaled times, recorded with the
    trace; ``rate_rps`` is their mean rate, ``cv`` their gaps' coefficient of variation."""
    offsets = trace.offsets
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    span = offsets[-1] if offsets else 0.0
    mean = sum(gaps) / len(gaps) if gaps else 0.0
    cv = (math.sqrt(sum((g - mean) ** 2 for g in gaps) / len(gaps)) / mean) if gaps and mean > 0 else 0.0
    rate = round(len(gaps) / span, 6) if span > 0 else float(len(offsets))
    record = Arrival(rate_rps=rate, process="trace", cv=round(cv, 6), requests=len(offsets),
                     duration_s=round(span, 6), trace=trace.record())  # fmt: skip
    return record, offsets
