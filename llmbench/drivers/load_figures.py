"""One rate of ``llmbench load`` in figures: what load.json's rows say, from a rate's run (its definitions are
:mod:`llmbench.drivers.load`'s docstring and :data:`DEFINITIONS`, written into every load.json). No measuring here:
the driver runs the rates, this module turns each run into its row.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from llmbench.analysis import steady, tails
from llmbench.core.errors import UserError
from llmbench.results.metrics import describe, mid_stream_stalls
from llmbench.results.schema import Run

# tool_name_ms, tool_args_ms: a tool workload's wait (an answer of calls alone has no ttft_ms: it misses a TTFT SLO)
SLO_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_from_schedule_ms", "e2e_from_schedule_ms", "tool_name_ms",
               "tool_args_ms")  # fmt: skip
PERCENTILE_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "ttft_from_schedule_ms")  # each rate's p50/p90/p99
BOUNDED_QUANTILES = (0.9, 0.99)  # the printed high percentiles, each with its order-statistic bound
STALLED_LISTED = 20  # requests with mid-stream stalls listed per rate, the longest first
UNFINISHED = "unfinished:"  # a failure the stop dropped in flight (llmbench.runner.loop)
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
    "probes": "--probe-rate: full-length streamed requests at a constant rate beside each rate's load, on the same "
    "client clock, reported apart with the same figures (what one newcomer waits for while the server is busy; "
    "their own file rate-<R>.probes.json)",
    "newcomer_capacity_rps": "the highest offered rate whose probes are fluid_holds, every lower rate's too (the fluid "
    "capacity, judged on the probes)",
    "andes_qoe": "mean, p50 and min of each finished request's Andes QoE (the reader's wait, llmbench.results.reader)",
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
        metric, pct, limit = m.group(1), float(m.group(2)), finite_number(m.group(3), text)
        if metric not in SLO_METRICS:
            raise UserError(f"--slo '{text}': unknown metric {metric}; expected one of {', '.join(SLO_METRICS)}")
        if not 0 < pct <= 100 or not limit > 0:
            raise UserError(f"--slo '{text}': the percentile must be in (0, 100] and the limit above 0")
        return cls(metric, pct, limit)


def finite_number(text: str, where: str) -> float:
    """``text`` as a finite number; UserError naming ``where`` otherwise."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"'{where}': {text} is not a number") from None
    if not math.isfinite(value):
        raise UserError(f"'{where}': {text} is not a finite number")
    return value


class FigureSettings(Protocol):
    """What the figures read of a load's settings (:class:`llmbench.drivers.load.LoadSpec` has them)."""

    slos: list[Slo]
    one_token_passes: bool
    fluidity_target: float
    fluidity_share: float
    min_attainment: float


def _value(r: Any, metric: str) -> float | None:
    return getattr(r, metric, None)


def rate_figures(run: Run, spec: FigureSettings) -> dict[str, Any]:
    """One rate's row of load.json, from its run (see the module docstring for every definition): the whole
    run's figures, and the same on its steady-state window (``steady``), which judges the rate."""
    ok, failed = run.requests, run.failed_requests
    s = run.summary
    row = {
        "offered_rate_rps": run.config.endpoint.arrival.rate_rps if run.config.endpoint and run.config.endpoint.arrival
        else None,
        "achieved_rate_rps": s.achieved_rate_rps if s else None,
        **population_figures(ok, failed, spec, span_s(ok, failed)),
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


def span_s(ok: list[Any], failed: list[Any]) -> float:
    """The seconds a rate's requests took: from the first due time to the last answer's end (0 without due times)."""
    due = [d for d in [*(r.scheduled_s for r in ok), *(f.scheduled_s for f in failed)] if d is not None]
    ends = [r.scheduled_s + r.e2e_from_schedule_ms / 1000 for r in ok
            if r.scheduled_s is not None and r.e2e_from_schedule_ms is not None]  # fmt: skip
    return (max([*ends, *due]) - min(due)) if due else 0.0


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


def steady_figures(ok: list[Any], failed: list[Any], spec: FigureSettings) -> dict[str, Any] | None:
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


def population_figures(ok: list[Any], failed: list[Any], spec: FigureSettings, span: float) -> dict[str, Any]:
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
        "andes_qoe": _pcts(describe(r.andes_qoe for r in ok if r.andes_qoe is not None), ("mean", "p50", "min")),
        "mid_stream_stalls": _mid_stream(ok),
    }


def probe_figures(run: Run, spec: FigureSettings) -> dict[str, Any]:
    """A rate's probes (``load --probe-rate``), reported apart from the load: :func:`population_figures` over them
    (TTFT, TPOT, SLO attainment, fluidity, reader stalls and QoE, mid-stream stalls: what one newcomer waits for
    while the server is busy), over the span from the first probe's due time to the last one's end."""
    ok, failed = run.requests, run.failed_requests
    return population_figures(ok, failed, spec, span_s(ok, failed))


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


def newcomer_capacity(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A newcomer's capacity: :func:`fluid_capacity` judged on each rate's probes (``--probe-rate``) instead of its
    load, the highest offered rate at which the probes stayed fluid, every lower rate too; empty without probes."""
    probed = [{**r["probes"], "offered_rate_rps": r["offered_rate_rps"]} for r in rows if r.get("probes")]
    if not probed:
        return {}
    cap = fluid_capacity(probed)
    return {"newcomer_capacity_rps": cap["fluid_capacity_rps"], "newcomer_first_failing_rps":
            cap["fluid_first_failing_rps"]}  # fmt: skip


def _meets(r: Any, slo: Slo, one_token_passes: bool) -> bool:
    v = _value(r, slo.metric)
    if v is None:
        return slo.metric == "tpot_ms" and one_token_passes and r.output_tokens < 2
    return v <= slo.limit
