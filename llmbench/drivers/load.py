"""``llmbench load``: a server under open-loop load, rate by rate, against service-level objectives.

Every rate is an ordinary open-loop run (``DIR/rate-<R>.json``: requests sent on a schedule drawn in advance,
whatever the server does). ``DIR/load.json`` holds, per offered rate: the achieved rate, output tokens/s,
TTFT/TPOT/E2E percentiles, errors and 429s, send lateness, SLO attainment and goodput, fluidity attainment and
the reader's stalls; and the saturation point and the fluid capacity.

Definitions (written into load.json):

- An SLO ``METRIC:pNN=LIMIT`` (``ttft_ms:p90=1000``) holds at a rate when at least NN% of the requests sent
  had ``METRIC <= LIMIT``. A failed request (an error, a 429) meets no SLO. A one-token answer has no TPOT and
  fails a TPOT limit unless ``one_token_passes``. Metrics are llmbench's own: ``tpot_ms`` per request,
  (last - first) / (n - 1), not ITL; ``ttft_ms`` and ``e2e_ms`` from the actual send.
- A request is *good* when it meets every SLO's limit. ``goodput_rps`` = good requests / span, where the span
  runs from the first due time to the last answer's end; ``attainment`` = good / sent.
- Each rate's *steady-state window* (:mod:`llmbench.analysis.steady`): its requests sent after the ramp-up and
  before the drain. ``steady`` holds every figure below again over the window's requests, beside the whole
  run's; the rate is judged on the window.
- Every p90 and p99 carries a one-sided 95% upper bound (``bounds_95``, :mod:`llmbench.analysis.tails`: MLPerf's
  early-stopping idea, an order statistic), null where the requests can't bound it; every share of requests an
  SLO holds (``attainment_bounds``) carries one-sided 95% Wilson bounds.
- A rate *holds* when ``attainment >= min_attainment`` (default 0.9). Its ``verdict`` asks more: ``holds`` when
  the attainment's lower bound reaches ``min_attainment``, ``fails`` when its upper bound falls short, else
  ``unproven``; ``proven_rate_rps`` is the highest rate whose verdict holds. The saturation point is the highest
  offered rate that holds: with ``auto``, found by doubling from ``auto_start`` until a rate fails (or halving
  until one holds), then ``auto_steps`` bisections (geometric midpoints) between the last rate that held and
  the first that failed.
- The shape of the wait (each request's ``fluidity``, ``reader_stalls``, ``reader_stall_ms`` at the run's reader
  pace, :mod:`llmbench.results.reader`). Etalon (Agrawal et al., arXiv 2407.07000) calls a request *fluid* when its
  fluidity index is at least ``fluidity_target`` (0.9); ``fluidity_attainment`` = fluid requests / sent. A failed
  request did not stream and is not fluid, as it meets no SLO; an answer without a token (fluidity None) is not
  fluid either. A one-token answer has a fluidity index (its one deadline, the prefill's), so
  ``one_token_passes``, which is about TPOT, does not apply. ``stall_free`` = finished requests with no wait over
  100 ms (``reader_stalls == 0``) / sent; ``reader_stall_ms`` p50/p90 over the finished requests.
- The *fluid capacity* (``fluid_capacity_rps``): Etalon's capacity under a fluidity SLO (their "fluid token
  generation rate": the most a system serves with 99% of requests at fluidity >= 0.9), among the rates run: the
  highest offered rate whose ``fluidity_attainment >= fluidity_share`` (0.99) with every lower rate run holding it
  too (the rate below the first that fails: one lucky rate above a failure is not capacity); None when the lowest
  rate fails. ``fluid_tokens_per_s``: output tokens/s at that rate. The auto search follows the SLOs, not fluidity:
  the capacity is only as sharp as the rates that search visited.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmbench.analysis import steady, tails
from llmbench.analysis.saturation import SaturationRule, SaturationWatch
from llmbench.backends.http.client import chat_url, redact
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.drivers.run import run as run_driver
from llmbench.options import EndpointOptions, OpenLoop, RunOptions
from llmbench.results.metrics import describe, mid_stream_stalls
from llmbench.results.schema import LOAD_VERSION, Run, llmbench_version, utc_now
from llmbench.results.storage import prepare_driver_dir, prepare_output, write_record
from llmbench.runner.loop import NullReporter, Reporter
from llmbench.spec import DEFAULT_DURATION_S, ArrivalsSection, RequestsSection, check_value
from llmbench.spec import default as _d
from llmbench.spec.commands import LoadPlan
from llmbench.workloads.arrivals import check_schedule
from llmbench.workloads.limits import MAX_RATE_RPS, check_planned, check_range
from llmbench.workloads.prompts import PromptSet

SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_from_schedule_ms", "e2e_from_schedule_ms")
PERCENTILE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_from_schedule_ms")  # each rate's p50/p90/p99
BOUNDED_QUANTILES = (0.9, 0.99)  # the printed high percentiles, each with its order-statistic bound
STALLED_LISTED = 20  # requests with mid-stream stalls listed per rate, the longest first
OVER_SATURATED = "over-saturation"  # the rate's stop reason (its run's interrupted_by)
UNFINISHED = "unfinished:"  # a failure the stop dropped in flight (llmbench.runner.loop)
MAX_AUTO_TRIALS = 12  # ramp + bisection, at most
MAX_AUTO_STEPS = 30  # bisections: each halves the geometric gap (30 of them: a billionth of it)
MAX_RATES = 100  # --rates: each is a run of its own
_SLO = re.compile(r"^\s*([a-z0-9_]+)\s*:\s*p(\d+(?:\.\d+)?)\s*=\s*([0-9.eE+-]+)\s*$")

DEFINITIONS = {
    "slo": "METRIC:pNN=LIMIT holds when at least NN% of the requests sent had METRIC <= LIMIT; failed requests "
    "meet no SLO; a request without TPOT (one token) fails a TPOT limit unless one_token_passes",
    "tpot_ms": "per request: (last token - first token) / (output_tokens - 1), llmbench's TPOT (not ITL)",
    "good": "a request that meets every SLO's limit",
    "goodput_rps": "good requests / (last answer's end - first due time)",
    "attainment": "good requests / requests sent",
    "saturation_rps": "the highest offered rate that holds",
    "send_lateness_ms": "actual send - scheduled send, per request (the load generator's own delay)",
    "fluidity_attainment": "requests with fluidity >= fluidity_target / requests sent (Etalon, arXiv 2407.07000); "
    "a failed request, or an answer without a token, is not fluid",
    "fluid_holds": "fluidity_attainment >= fluidity_share",
    "stall_free": "finished requests with reader_stalls == 0 (no reader wait over 100 ms) / requests sent",
    "reader_stall_ms": "p50 and p90 over the finished requests of each one's total reader wait",
    "fluid_capacity_rps": "the highest offered rate that is fluid_holds with every lower rate run fluid_holds too "
    "(Etalon's capacity: 99% of requests at fluidity >= 0.9); None when the lowest rate is not",
    "fluid_tokens_per_s": "output_tokens_per_s at fluid_capacity_rps (Etalon's fluid token generation rate, among "
    "the rates run)",
    "steady": "the same figures over the requests sent inside the rate's steady-state window (window: its sends' "
    "bounds in s on the run's clock, share of the finished requests, the cuts: arrival edges of one median life, "
    "then MSER-5 on TTFT and E2E kept at p < 0.01; llmbench.analysis.steady); a failed request is inside when it was "
    "due inside; per-second figures over the window's span of sends. Only the window when it is the whole run",
    "bounds_95": "per metric, a one-sided 95% upper bound on its p90 and p99: the order statistic X_(k), k the least "
    "rank with P(Binomial(n, q) <= k - 1) >= 0.95 (distribution-free); null when n can't bound it (p99: n < 299, "
    "p90: n < 29)",
    "attainment_bounds": "one-sided 95% Wilson bounds [lower, upper] on a share of the requests sent",
    "holds": "attainment >= min_attainment, on the steady-state window (the whole run when that is the window)",
    "verdict": "holds: the attainment's lower bound >= min_attainment; fails: its upper bound < min_attainment; "
    "unproven: neither (too few requests to tell); on the steady-state window",
    "proven_rate_rps": "the highest offered rate whose verdict is holds",
    "mid_stream_stalls": "finished requests with a gap between stamps >= 8 x the request's own median gap and >= 50 "
    "ms longer (at least 4 gaps to judge): requests (count, share of finished), stalls, the longest (ms), and the "
    "20 requests with the longest (a preemption or a swap shows so); server_preemptions: the server's own count "
    "over the rate (vllm:num_preemptions, --server-metrics), null where it reports none",
}


@dataclass(frozen=True)
class Slo:
    metric: str
    percentile: float
    limit: float

    @property
    def text(self) -> str:
        return f"{self.metric}:p{self.percentile:g}={self.limit:g}"

    @classmethod
    def parse(cls, text: str) -> Slo:
        """``ttft_ms:p90=1000`` -> Slo; UserError naming what is wrong."""
        m = _SLO.match(text)
        if not m:
            raise UserError(f"--slo '{text}': expected METRIC:pNN=LIMIT, e.g. ttft_ms:p90=1000")
        metric, pct, limit = m.group(1), float(m.group(2)), _float(m.group(3), text)
        if metric not in SLO_METRICS:
            raise UserError(f"--slo '{text}': unknown metric {metric}; expected one of {', '.join(SLO_METRICS)}")
        if not 0 < pct <= 100 or not limit > 0:
            raise UserError(f"--slo '{text}': the percentile must be in (0, 100] and the limit above 0")
        return cls(metric, pct, limit)


def _float(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"'{where}': {text} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"'{where}': {text} is not a finite number")
    return value


def parse_rates(text: str) -> list[float] | None:
    """``"0.5,1,2"`` -> [0.5, 1.0, 2.0]; ``"auto"`` -> None (search); UserError otherwise."""
    if text.strip().lower() == "auto":
        return None
    rates = [_float(t.strip(), f"--rates {text}") for t in text.split(",") if t.strip()]
    if not rates or any(r <= 0 for r in rates):
        raise UserError(f"--rates '{text}': give positive requests per second, e.g. 0.5,1,2,4, or auto")
    if len(set(rates)) != len(rates):
        raise UserError(f"--rates '{text}' lists a rate twice")
    return sorted(rates)


@dataclass
class LoadSpec:
    """What ``llmbench load`` was asked for (the CLI's options, checked)."""

    rates: list[float] | None  # None: auto
    slos: list[Slo]
    # the spec's defaults (llmbench.spec: the arrivals, the requests, llmbench.spec.commands.LoadPlan): one
    # declaration, read here
    arrival: str = _d(ArrivalsSection, "arrival")
    duration_s: float | None = DEFAULT_DURATION_S
    requests: int | None = _d(ArrivalsSection, "requests")
    seed: int = _d(RequestsSection, "seed")
    workers: int | None = _d(ArrivalsSection, "workers")  # None: auto (llmbench.options.client_processes)
    ray: str | None = _d(ArrivalsSection, "ray")
    min_attainment: float = _d(LoadPlan, "min_attainment")
    one_token_passes: bool = _d(LoadPlan, "one_token_passes")
    fluidity_target: float = _d(LoadPlan, "fluidity_target")
    fluidity_share: float = _d(LoadPlan, "fluidity_share")
    auto_start: float = _d(LoadPlan, "auto_start")
    auto_steps: int = _d(LoadPlan, "auto_steps")
    stop_saturated: bool | None = _d(LoadPlan, "stop_saturated")  # None: on for auto, off for a list
    stop_min_s: float = _d(LoadPlan, "stop_min_s")
    stop_window_s: float = _d(LoadPlan, "stop_window_s")

    @property
    def stops(self) -> bool:
        """Whether a rate past saturation ends early (:mod:`llmbench.analysis.saturation`)."""
        return self.rates is None if self.stop_saturated is None else self.stop_saturated

    def saturation_rule(self) -> SaturationRule:
        return SaturationRule(min_s=self.stop_min_s, window_s=self.stop_window_s, min_attainment=self.min_attainment)

    def validate(self) -> None:
        if not self.slos:
            raise UserError("give at least one --slo, e.g. --slo ttft_ms:p90=1000 --slo tpot_ms:p90=200")
        if not 0 < self.min_attainment <= 1:
            raise UserError(f"--min-attainment must be in (0, 1], not {self.min_attainment}")
        for name in ("fluidity_target", "fluidity_share", "stop_min_s", "stop_window_s"):  # the spec's bounds, for
            # a LoadSpec made in Python
            check_value(LoadPlan, name, getattr(self, name))
        if not self.auto_start > 0 or self.auto_steps < 0:
            raise UserError("--auto-start must be above 0 and --auto-steps 0 or more")
        check_range("--auto-start", self.auto_start, 0, MAX_RATE_RPS, unit=" requests per second", above=True)
        if self.auto_steps > MAX_AUTO_STEPS:
            raise UserError(f"--auto-steps {self.auto_steps}: expected at most {MAX_AUTO_STEPS} bisections")
        if self.rates is not None and len(self.rates) > MAX_RATES:
            raise UserError(f"--rates lists {len(self.rates)} rates: expected at most {MAX_RATES} (each is a run)")
        self.open_loop(1.0).check()
        for rate in self.rates or [self.auto_start]:  # each rate's schedule, checked now without drawing it
            check_schedule(rate, self.requests, self.duration_s)
        if self.rates is not None:  # every rate's schedule, all told (auto's rates are each bounded as they come)
            each = [self.requests or math.ceil(r * (self.duration_s or 0)) for r in self.rates]
            check_planned((f"requests over {len(self.rates)} rates", sum(each)))

    def open_loop(self, rate: float) -> OpenLoop:
        return OpenLoop(rate=rate, arrival=self.arrival, requests=self.requests, duration_s=self.duration_s,
                        workers=self.workers, ray=self.ray)  # fmt: skip


def _value(r: Any, metric: str) -> float | None:
    return getattr(r, metric, None)


def rate_figures(run: Run, spec: LoadSpec) -> dict[str, Any]:
    """One rate's row of load.json, from its run (see the module docstring for every definition): the whole
    run's figures, and the same on its steady-state window (``steady``), which judges the rate."""
    ok, failed = run.requests, run.failed_requests
    due = [d for d in [*(r.scheduled_s for r in ok), *(f.scheduled_s for f in failed)] if d is not None]
    ends = [r.scheduled_s + r.e2e_from_schedule_ms / 1000 for r in ok
            if r.scheduled_s is not None and r.e2e_from_schedule_ms is not None]  # fmt: skip
    s = run.summary
    row = {
        "offered_rate_rps": run.config.endpoint.arrival.rate_rps if run.config.endpoint and run.config.endpoint.arrival
        else None,
        "achieved_rate_rps": s.achieved_rate_rps if s else None,
        **population_figures(ok, failed, spec, (max([*ends, *due]) - min(due)) if due else 0.0),
        "send_lateness_ms": _pcts(s.send_lateness_ms if s else None, ("p50", "p99", "max")),
        "server_preemptions": _preemptions(run),
        "complete": run.complete,
    }  # fmt: skip
    steady = steady_figures(ok, failed, spec)
    judged = steady if steady and "sent" in steady else row
    row["steady"] = steady
    row["holds"] = judged["sent"] > 0 and judged["attainment"] >= spec.min_attainment
    row["verdict"] = _verdict(judged, spec.min_attainment)
    return row


def _preemptions(run: Run) -> float | None:
    """The preemptions the server counted over the rate (``--server-metrics``: vLLM's ``vllm:num_preemptions``),
    beside the stalls the client saw; None where the server reports none."""
    counters = (run.server_metrics or {}).get("counters", {})
    return (counters.get("preemptions") or {}).get("delta")


def _verdict(figures: dict[str, Any], target: float) -> str:
    """``holds`` when the attainment's lower 95% bound reaches ``target``, ``fails`` when its upper one does not,
    else ``unproven`` (too few requests to tell)."""
    b = figures.get("attainment_bounds")
    if not b:
        return "fails"
    return "holds" if b[0] >= target else "fails" if b[1] < target else "unproven"


def steady_figures(ok: list[Any], failed: list[Any], spec: LoadSpec) -> dict[str, Any] | None:
    """:func:`population_figures` over the requests sent inside the rate's steady-state window
    (:mod:`llmbench.analysis.steady`), with the window; only the window when it is the whole run (the row's own
    figures are the window's); None when the run has no send times (not an open loop). A failed request is inside
    when it was due inside; rates per second are over the window's span of sends."""
    timed = [r for r in ok if r.scheduled_s is not None and r.send_lateness_ms is not None
             and r.e2e_from_schedule_ms is not None]  # fmt: skip
    if len(timed) != len(ok) or not ok:
        return None
    send = np.array([r.scheduled_s + r.send_lateness_ms / 1000 for r in ok])
    end = np.array([r.scheduled_s + r.e2e_from_schedule_ms / 1000 for r in ok])
    window = steady.steady_window(send, end, {m: [getattr(r, m) for r in ok] for m in steady.LATENCY_SIGNALS})
    if window.whole:  # the whole run is the window: its figures are the row's own
        return {"window": window.record()}
    order = np.argsort(send, kind="stable")
    inside = [ok[i] for i in order[window.first : window.last + 1]]
    lo, hi = window.start_s, window.end_s
    out = [f for f in failed if f.scheduled_s is not None and lo <= f.scheduled_s <= hi]
    return {"window": window.record(), **population_figures(inside, out, spec, hi - lo)}


def population_figures(ok: list[Any], failed: list[Any], spec: LoadSpec, span: float) -> dict[str, Any]:
    """The figures of one set of requests of a rate (finished ``ok``, ``failed``) over ``span`` seconds: counts,
    latency percentiles with their 95% bounds, goodput and SLO attainment with Wilson bounds, fluidity and
    stalls."""
    sent = len(ok) + len(failed)
    good = [r for r in ok if all(_meets(r, s, spec.one_token_passes) for s in spec.slos)]
    slo_rows = {}
    for slo in spec.slos:
        met = sum(_meets(r, slo, spec.one_token_passes) for r in ok)
        values = [v if (v := _value(r, slo.metric)) is not None else math.inf for r in ok] + [math.inf] * len(failed)
        observed = float(np.percentile(values, slo.percentile, method="inverted_cdf")) if values else None
        slo_rows[slo.text] = {
            "attainment": round(met / sent, 4) if sent else 0.0,
            "attainment_bounds": _rounded(tails.share_bounds(met, sent)),
            "observed": observed if observed is not None and math.isfinite(observed) else None,
            "holds": sent > 0 and met / sent >= slo.percentile / 100,
        }
    tokens = sum(r.output_tokens for r in ok)
    fluid = sum(r.fluidity is not None and r.fluidity >= spec.fluidity_target for r in ok)  # failed: not fluid
    stall_free = sum(r.reader_stalls == 0 for r in ok)
    stalls = describe(r.reader_stall_ms for r in ok if r.reader_stall_ms is not None)
    latencies = {m: [v for r in ok if (v := _value(r, m)) is not None] for m in PERCENTILE_METRICS}
    return {
        "sent": sent,
        "finished": len(ok),
        "failed": len(failed),
        "unfinished": sum(f.error.startswith(UNFINISHED) for f in failed),
        "http_429": sum(f.status == 429 for f in failed),
        "output_tokens_per_s": round(tokens / span, 3) if span > 0 else None,
        **{m: _pcts(describe(v)) for m, v in latencies.items()},
        "bounds_95": {m: _bounds(v) for m, v in latencies.items()},
        "good": len(good),
        "goodput_rps": round(len(good) / span, 4) if span > 0 else 0.0,
        "attainment": round(len(good) / sent, 4) if sent else 0.0,
        "attainment_bounds": _rounded(tails.share_bounds(len(good), sent)),
        "slos": slo_rows,
        "fluid": fluid,
        "fluidity_attainment": round(fluid / sent, 4) if sent else 0.0,
        "fluid_holds": sent > 0 and fluid / sent >= spec.fluidity_share,
        "stall_free": round(stall_free / sent, 4) if sent else 0.0,
        "reader_stall_ms": _pcts(stalls, ("p50", "p90")),
        "mid_stream_stalls": _mid_stream(ok),
    }


def _mid_stream(ok: list[Any]) -> dict[str, Any]:
    """Gaps far above a request's own pace (:func:`llmbench.results.metrics.mid_stream_stalls`: a preemption or a
    swap looks so): how many requests had one, how many there were, the longest, and the requests that had them
    (the :data:`STALLED_LISTED` with the longest)."""
    stalled = []
    for r in ok:
        if gaps := mid_stream_stalls(r.token_times_ms):
            stalled.append({"prompt_index": r.prompt_index, "repeat": r.repeat, "stalls": len(gaps),
                            "longest_ms": round(max(gaps), 3), "stall_ms": round(sum(gaps), 3)})  # fmt: skip
    stalled.sort(key=lambda x: -x["longest_ms"])
    return {
        "requests": len(stalled),
        "share": round(len(stalled) / len(ok), 4) if ok else 0.0,
        "stalls": sum(x["stalls"] for x in stalled),
        "longest_ms": stalled[0]["longest_ms"] if stalled else None,
        "stalled": stalled[:STALLED_LISTED],
    }


def _bounds(values: list[float]) -> dict[str, float | None]:
    """The one-sided 95% upper bound of each printed high percentile (None: too few values to bound it)."""
    return {f"p{q * 100:g}": None if (b := tails.quantile_upper_bound(values, q)) is None else round(b, 3)
            for q in BOUNDED_QUANTILES}  # fmt: skip


def _rounded(bounds: tuple[float, float] | None) -> list[float] | None:
    return None if bounds is None else [round(bounds[0], 4), round(bounds[1], 4)]


def _pcts(stats: Any, keys: tuple[str, ...] = ("p50", "p90", "p99")) -> dict[str, float] | None:
    return None if stats is None else {k: round(getattr(stats, k), 3) for k in keys}


def fluid_capacity(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The fluid capacity of load.json's rows (see the module docstring): the highest offered rate below the lowest
    rate that is not ``fluid_holds``, its output tokens/s, and that first failing rate."""
    capacity: dict[str, Any] | None = None
    failing = None
    for row in sorted(rows, key=lambda r: r["offered_rate_rps"]):
        if not row.get("fluid_holds"):
            failing = row["offered_rate_rps"]
            break
        capacity = row
    return {
        "fluid_capacity_rps": capacity["offered_rate_rps"] if capacity else None,
        "fluid_tokens_per_s": capacity["output_tokens_per_s"] if capacity else None,
        "fluid_first_failing_rps": failing,
    }


def _meets(r: Any, slo: Slo, one_token_passes: bool) -> bool:
    v = _value(r, slo.metric)
    if v is None:
        return slo.metric == "tpot_ms" and one_token_passes and r.output_tokens < 2
    return v <= slo.limit


class _Watching:
    """The rate's reporter, also feeding its over-saturation watch; stops the rate (recording what the stop drops
    in flight) the first time the rule holds."""

    def __init__(self, inner: Reporter, watch: SaturationWatch, stop: Stop) -> None:
        self.inner, self.watch, self.stop = inner, watch, stop
        self.reason: str | None = None
        self.at_s: float | None = None

    def status(self, text: str) -> None:
        self.inner.status(text)

    def warn(self, text: str) -> None:
        self.inner.warn(text)

    def warmup(self, done: int, total: int) -> None:
        self.inner.warmup(done, total)

    def request(self, result: Any, done: int, total: int) -> None:
        self.inner.request(result, done, total)

    def outcome(self, item: Any, in_flight: int, now_s: float) -> None:
        self.inner.outcome(item, in_flight, now_s)
        if self.reason is None and (why := self.watch.add(item, in_flight, now_s)) is not None:
            self.reason, self.at_s = why, now_s
            self.stop.request(OVER_SATURATED, record_dropped=True)

    def record(self, run: Run) -> dict[str, Any]:
        """The ``stopped`` entry of the rate's row: why, when, what was cut and what the schedule had left."""
        a = run.config.endpoint.arrival if run.config.endpoint else None
        planned = a.requests if a is not None else None
        sent = len(run.requests) + len(run.failed_requests)
        schedule = (a.duration_s or (a.requests / a.rate_rps if a.requests and a.rate_rps else None)) if a else None
        return {
            "reason": self.reason,
            "at_s": round(self.at_s or 0.0, 3),
            "schedule_s": schedule,  # the arrivals' planned length: what the stop saved is schedule_s - at_s
            "unfinished": sum(f.error.startswith(UNFINISHED) for f in run.failed_requests),
            "unsent": max(planned - sent, 0) if planned is not None else None,
            "rule": self.watch.state,
        }


class LoadDriver:
    """Runs the rates (a list, or the search) and keeps load.json up to date after each."""

    def __init__(self, prompts: PromptSet, endpoint: EndpointOptions, options: RunOptions, spec: LoadSpec,
                 out_dir: Path, stop: Stop | None, reporter: Reporter | None) -> None:  # fmt: skip
        # the schedules are drawn from the requests' seed: the load's (the API's seed keyword)
        self.prompts, self.endpoint, self.options, self.spec = prompts, endpoint, options.replaced(seed=spec.seed), spec
        self.out_dir, self.stop, self.reporter = out_dir, stop, reporter or NullReporter()
        self.rows: dict[float, dict[str, Any]] = {}
        self.model: str | None = None
        self.path = prepare_output(out_dir / "load.json", overwrite=False)

    async def trial(self, rate: float) -> dict[str, Any]:
        """One open-loop run at ``rate``; its row. With :attr:`LoadSpec.stops`, a rate past saturation ends early
        (its row's ``stopped`` says why and when); a person's stop ends the whole load, keeping what finished."""
        if rate in self.rows:
            return self.rows[rate]
        out = prepare_output(self.out_dir / f"rate-{rate:g}.json", overwrite=False)
        self.reporter.status(f"offered rate {rate:g}/s ...")
        endpoint = self.endpoint.replaced(open_loop=self.spec.open_loop(rate))
        rate_stop = Stop()  # this rate's: the watch ends it alone; a person's stop reaches it and ends the load
        outer = self.stop
        remove = outer.on_request(lambda: rate_stop.request(outer.signal or "stop")) if outer else None
        watching = _Watching(self.reporter, SaturationWatch(self.spec.saturation_rule()), rate_stop)
        stopped = None
        try:
            run, _ = await run_driver(self.prompts, endpoint, self.options, output=out, stop=rate_stop,
                                      reporter=watching if self.spec.stops else self.reporter)  # fmt: skip
        except RunInterrupted as e:
            saturated = watching.reason is not None and not (self.stop and self.stop.requested)
            if e.runs and (e.runs[0].requests or e.runs[0].failed_requests):
                run = e.runs[0]
                stopped = watching.record(run) if saturated else None
                self._add(rate, run, out, stopped)
            if not saturated:
                raise
        finally:
            if remove is not None:
                remove()
        if stopped is None:
            self._add(rate, run, out)
            if self.spec.stops and run.config.endpoint and (run.config.endpoint.workers or 1) > 1:
                self.reporter.status(f"  {rate:g}/s: the over-saturation stop watches one client process; this "
                                     f"rate ran over {run.config.endpoint.workers}, unwatched")  # fmt: skip
        row = self.rows[rate]
        self.reporter.status(
            f"  {rate:g}/s: achieved {row['achieved_rate_rps']}/s, goodput {row['goodput_rps']}/s, attainment "
            f"{row['attainment']:.0%}, {row['http_429']} x 429 -> {row['verdict']}; fluid "
            f"{row['fluidity_attainment']:.0%}, stall-free {row['stall_free']:.0%}"
            + (f"; STOPPED at {stopped['at_s']:.1f} s: {stopped['reason']}" if stopped else "")
        )  # fmt: skip
        return row

    def _add(self, rate: float, run: Run, path: Path, stopped: dict[str, Any] | None = None) -> None:
        self.model = self.model or run.config.model
        self.rows[rate] = {**rate_figures(run, self.spec), "stopped": stopped, "run_file": path.name}
        self.save(complete=False)

    async def search(self) -> dict[str, Any]:
        """Double (or halve) from auto_start until the verdict changes, then bisect geometrically."""
        rate, trials = self.spec.auto_start, 0
        held = (await self.trial(rate))["holds"]
        lo, hi = (rate, None) if held else (None, rate)
        while (lo is None or hi is None) and trials < MAX_AUTO_TRIALS:
            rate = rate * 2 if held else rate / 2
            trials += 1
            if (await self.trial(rate))["holds"]:
                lo = rate if lo is None or rate > lo else lo
            else:
                hi = rate if hi is None or rate < hi else hi
        for _ in range(self.spec.auto_steps):
            if lo is None or hi is None:
                break
            mid = round(math.sqrt(lo * hi), 4)
            if (await self.trial(mid))["holds"]:
                lo = mid
            else:
                hi = mid
        return {"method": "auto", "bracket_rps": [lo, hi]}

    def record(self, complete: bool, search: dict[str, Any] | None = None) -> dict[str, Any]:
        rows = [self.rows[r] for r in sorted(self.rows)]
        holding = [r["offered_rate_rps"] for r in rows if r["holds"]]
        failing = [r["offered_rate_rps"] for r in rows if not r["holds"]]
        saturation = max(holding) if holding else None
        proven = max((r["offered_rate_rps"] for r in rows if r.get("verdict") == "holds"), default=None)
        above = min((f for f in failing if saturation is None or f > saturation), default=None)
        return {
            "load_version": LOAD_VERSION,
            "llmbench_version": llmbench_version(),
            "created_at": utc_now(),
            "complete": complete,
            "endpoint": redact(chat_url(self.endpoint.endpoint)),
            "model": self.model,
            "arrival": self.spec.arrival,
            "seed": self.spec.seed,
            "duration_s": self.spec.duration_s,
            "requests": self.spec.requests,
            "workers": self.spec.workers,
            "max_new_tokens": self.options.max_new_tokens,
            "slos": [dataclasses.asdict(s) | {"text": s.text} for s in self.spec.slos],
            "min_attainment": self.spec.min_attainment,
            "one_token_passes": self.spec.one_token_passes,
            "fluidity_target": self.spec.fluidity_target,
            "fluidity_share": self.spec.fluidity_share,
            "definitions": DEFINITIONS,
            "rates": rows,
            "saturation": {
                "rate_rps": saturation,
                "first_failing_above_rps": above,
                "proven_rate_rps": proven,
                **(search or {"method": "list"}),
            },
            **fluid_capacity(rows),
        }

    def save(self, complete: bool, search: dict[str, Any] | None = None) -> dict[str, Any]:
        record = self.record(complete, search)
        write_record(self.path, record)
        return record


async def load(
    prompts: PromptSet,
    endpoint: EndpointOptions,
    options: RunOptions,
    spec: LoadSpec,
    out_dir: str | Path,
    *,
    stop: Stop | None = None,
    reporter: Reporter | None = None,
) -> tuple[dict[str, Any], Path]:
    """Every rate of ``spec`` (or the saturation search) against ``endpoint``; load.json's record and path."""
    spec.validate()
    endpoint.check()
    options.check()
    driver = LoadDriver(prompts, endpoint, options, spec, prepare_driver_dir(out_dir, "load"), stop, reporter)
    search = None
    try:
        if spec.rates is None:
            search = await driver.search()
        else:
            for rate in spec.rates:
                await driver.trial(rate)
    except RunInterrupted as e:
        driver.save(complete=False, search=search)
        raise RunInterrupted(e.runs, driver.path, e.signal_name) from None
    return driver.save(complete=True, search=search), driver.path
