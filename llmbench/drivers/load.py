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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmbench.analysis.saturation import SaturationRule, SaturationWatch
from llmbench.backends.http.client import chat_url, redact
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.drivers.load_figures import (  # noqa: F401  (the figures' names, read through this module too)
    DEFINITIONS,
    SLO_METRICS,
    UNFINISHED,
    Slo,
    finite_number,
    fluid_capacity,
    newcomer_capacity,
    population_figures,
    probe_figures,
    rate_figures,
    steady_figures,
)
from llmbench.drivers.run import ONE_CLIENT, run_beside
from llmbench.drivers.run import run as run_driver
from llmbench.options import EndpointOptions, OpenLoop, RunOptions
from llmbench.results.schema import LOAD_VERSION, Run, llmbench_version, utc_now
from llmbench.results.storage import prepare_driver_dir, prepare_output, write_record
from llmbench.runner.loop import NullReporter, Reporter
from llmbench.spec import DEFAULT_DURATION_S, ArrivalsSection, RequestsSection, check_value
from llmbench.spec import default as _d
from llmbench.spec.commands import LoadPlan
from llmbench.workloads.arrivals import check_schedule
from llmbench.workloads.limits import MAX_RATE_RPS, check_planned, check_range
from llmbench.workloads.prompts import PromptSet

OVER_SATURATED = "over-saturation"  # a rate's stop reason (its run's interrupted_by)
MAX_AUTO_TRIALS = 12  # ramp + bisection, at most
MAX_AUTO_STEPS = 30  # bisections: each halves the geometric gap (30 of them: a billionth of it)
MAX_RATES = 100  # --rates: each is a run of its own


def parse_rates(text: str) -> list[float] | None:
    """``"0.5,1,2"`` -> [0.5, 1.0, 2.0]; ``"auto"`` -> None (search); UserError otherwise."""
    if text.strip().lower() == "auto":
        return None
    rates = [finite_number(t.strip(), f"--rates {text}") for t in text.split(",") if t.strip()]
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
    probe_rate: float | None = _d(LoadPlan, "probe_rate")  # None: no probes

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
        # the spec's bounds, for a LoadSpec made in Python
        for name in ("fluidity_target", "fluidity_share", "stop_min_s", "stop_window_s", "probe_rate"):
            check_value(LoadPlan, name, getattr(self, name))
        if not self.auto_start > 0 or self.auto_steps < 0:
            raise UserError("--auto-start must be above 0 and --auto-steps 0 or more")
        check_range("--auto-start", self.auto_start, 0, MAX_RATE_RPS, unit=" requests per second", above=True)
        if self.auto_steps > MAX_AUTO_STEPS:
            raise UserError(f"--auto-steps {self.auto_steps}: expected at most {MAX_AUTO_STEPS} bisections")
        if self.rates is not None and len(self.rates) > MAX_RATES:
            raise UserError(f"--rates lists {len(self.rates)} rates: expected at most {MAX_RATES} (each is a run)")
        self.open_loop(1.0).check()
        if self.probe_rate is not None and (self.ray or (self.workers or 1) > 1):
            raise UserError(ONE_CLIENT)
        if self.probe_rate is not None:  # each rate's probes: a schedule over the span its load's arrivals take
            for rate in self.rates or [self.auto_start]:
                check_schedule(self.probe_rate, None, self.requests / rate if self.requests else self.duration_s)
        for rate in self.rates or [self.auto_start]:  # each rate's schedule, checked now without drawing it
            check_schedule(rate, self.requests, self.duration_s)
        if self.rates is not None:  # every rate's schedule, all told (auto's rates are each bounded as they come)
            each = [self.requests or math.ceil(r * (self.duration_s or 0)) for r in self.rates]
            check_planned((f"requests over {len(self.rates)} rates", sum(each)))

    def open_loop(self, rate: float) -> OpenLoop:
        return OpenLoop(rate=rate, arrival=self.arrival, requests=self.requests, duration_s=self.duration_s,
                        workers=self.workers, ray=self.ray)  # fmt: skip


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
        """One open-loop run at ``rate`` (and its probes beside it, ``probe_rate``); its row. With
        :attr:`LoadSpec.stops`, a rate past saturation ends early (its row's ``stopped`` says why and when); a
        person's stop ends the whole load, keeping what finished."""
        if rate in self.rows:
            return self.rows[rate]
        out = prepare_output(self.out_dir / f"rate-{rate:g}.json", overwrite=False)
        probe_out = (prepare_output(self.out_dir / f"rate-{rate:g}.probes.json", overwrite=False)
                     if self.spec.probe_rate else None)  # fmt: skip
        self.reporter.status(f"offered rate {rate:g}/s ...")
        endpoint = self.endpoint.replaced(open_loop=self.spec.open_loop(rate))
        rate_stop = Stop()  # this rate's: the watch ends it alone; a person's stop reaches it and ends the load
        outer = self.stop
        remove = outer.on_request(lambda: rate_stop.request(outer.signal or "stop")) if outer else None
        watching = _Watching(self.reporter, SaturationWatch(self.spec.saturation_rule()), rate_stop)
        reporter = watching if self.spec.stops else self.reporter
        stopped, probes = None, None
        try:
            if probe_out is None:
                run, _ = await run_driver(self.prompts, endpoint, self.options, output=out, stop=rate_stop,
                                          reporter=reporter)  # fmt: skip
            else:
                run, probes = await run_beside(self.prompts, endpoint, self._probe_endpoint(rate), self.options,
                                               output=out, beside_output=probe_out, stop=rate_stop,
                                               reporter=reporter)  # fmt: skip
        except RunInterrupted as e:
            saturated = watching.reason is not None and not (outer and outer.requested)
            kept = e.runs[0] if e.runs and (e.runs[0].requests or e.runs[0].failed_requests) else None
            if kept is not None:
                stopped = watching.record(kept) if saturated else None
                self._add(rate, kept, out, stopped, e.runs[1] if len(e.runs) > 1 else None, probe_out)
            if not saturated or kept is None:
                raise
        finally:
            if remove is not None:
                remove()
        if stopped is None:
            self._add(rate, run, out, None, probes, probe_out)
            if self.spec.stops and run.config.endpoint and (run.config.endpoint.workers or 1) > 1:
                self.reporter.status(f"  {rate:g}/s: the over-saturation stop watches one client process; this "
                                     f"rate ran over {run.config.endpoint.workers}, unwatched")  # fmt: skip
        row = self.rows[rate]
        self.reporter.status(
            f"  {rate:g}/s: achieved {row['achieved_rate_rps']}/s, goodput {row['goodput_rps']}/s, attainment "
            f"{row['attainment']:.0%}, {row['http_429']} x 429 -> {row['verdict']}; fluid "
            f"{row['fluidity_attainment']:.0%}, stall-free {row['stall_free']:.0%}"
            + (f"; probes fluid {row['probes']['fluidity_attainment']:.0%}" if row.get("probes") else "")
            + (f"; STOPPED at {stopped['at_s']:.1f} s: {stopped['reason']}" if stopped else "")
        )  # fmt: skip
        return row

    def _probe_endpoint(self, rate: float) -> EndpointOptions:
        """The probes' side: the load's server and client settings, a constant ``probe_rate`` over the span the
        load's arrivals take at ``rate``, one client process, no second scrape of the server's metrics."""
        span = self.spec.requests / rate if self.spec.requests else (self.spec.duration_s or DEFAULT_DURATION_S)
        probes = OpenLoop(rate=self.spec.probe_rate, arrival="constant", duration_s=span)
        return self.endpoint.replaced(open_loop=probes, server_metrics=False, metrics_url=None)

    def _add(self, rate: float, run: Run, path: Path, stopped: dict[str, Any] | None = None,
             probes: Run | None = None, probe_path: Path | None = None) -> None:  # fmt: skip
        self.model = self.model or run.config.model
        probe_row = None
        if probes is not None and probe_path is not None:
            probe_row = {"probe_rate_rps": self.spec.probe_rate, **probe_figures(probes, self.spec),
                         "run_file": probe_path.name}  # fmt: skip
        self.rows[rate] = {**rate_figures(run, self.spec), "stopped": stopped, "probes": probe_row,
                           "run_file": path.name}  # fmt: skip
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
            "probe_rate_rps": self.spec.probe_rate,
            **newcomer_capacity(rows),
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
