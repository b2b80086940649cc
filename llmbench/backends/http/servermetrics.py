"""The server's own metrics beside the client's: its Prometheus ``/metrics``, scraped during the measured window.

A :class:`Scraper` reads the page every ``interval`` s on a daemon thread (``httpx``; parsed by
``prometheus_client``'s text parser), from the start of the measured window to its end. :func:`summarize`
turns the scrapes into the run's ``server_metrics``:

- gauges: mean and max over the scrapes (``running_requests``, ``waiting_requests``, ``kv_cache_usage``, ...);
- counters: the delta over the window (last scrape - first; a counter that went down, a restarted server, is
  not trusted and says so), and histograms' ``_count``/``_sum`` deltas with their mean;
- the names of vLLM (V0 and V1: ``kv_cache_usage_perc`` was ``gpu_cache_usage_perc``, counters with
  ``_total``, prefix-cache hits and queries counted in tokens), SGLang, TGI, llama.cpp's server and
  ``llmbench serve`` are mapped to one vocabulary (``KNOWN``); every other metric is kept by its raw name;
- derived: the prefix-cache hit rate (Δhits / Δqueries, in tokens) where the server counts both.

A server with several models or data-parallel ranks reports a name once per label set; the record keeps one
figure a name, and how the label sets combine depends on what the figure is (``over_labels`` in each gauge's entry):

- counters and histograms are summed (tokens, requests: every rank's add up);
- gauges that count (``running_requests``, ``waiting_requests``, and an unknown gauge by default) are summed: the
  requests running on two ranks are both ranks' requests;
- gauges that are a fraction of something each label set has its own of (``kv_cache_usage``: vLLM's
  ``*_cache_usage_perc``, SGLang's ``token_usage``, llama.cpp's ``kv_cache_usage_ratio``; an unknown gauge whose
  name says usage, ``_perc``, percent, ratio, fraction, utilization or hit rate) are averaged over the label
  sets, each weighted alike (data-parallel ranks have caches of one size): two ranks at 60% are 0.6, never 1.2.
  The entry keeps ``label_sets`` and, where there were several, ``max_label_set`` (the highest one label set's
  value at any scrape: one rank full while the other idles averages to half).

Each scrape is combined first; mean, min and max are then over the scrapes.
The page is read with the URL as given (credentials and all); the record, the errors and every message carry it
through :func:`llmbench.core.redact.redact_url` only. No torch here.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from llmbench.core.redact import redact_url, scrub

# canonical name -> (kind, the names servers use for it, in the order tried). Counters without ``_total``:
# prometheus_client's parser strips it from a counter family's name.
KNOWN: dict[str, tuple[str, tuple[str, ...]]] = {
    "running_requests": ("gauge", ("vllm:num_requests_running", "sglang:num_running_reqs", "tgi_batch_current_size",
                                   "llamacpp:requests_processing", "llmbench_requests_generating")),
    "waiting_requests": ("gauge", ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "tgi_queue_size",
                                   "llamacpp:requests_deferred", "llmbench_requests_queued")),
    "kv_cache_usage": ("gauge", ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", "sglang:token_usage",
                                 "llamacpp:kv_cache_usage_ratio")),
    "prompt_tokens": ("counter", ("vllm:prompt_tokens", "sglang:prompt_tokens", "llamacpp:prompt_tokens",
                                  "llmbench_prompt_tokens", "tgi_request_input_length")),
    "generation_tokens": ("counter", ("vllm:generation_tokens", "sglang:generation_tokens",
                                      "llamacpp:tokens_predicted", "llmbench_generation_tokens",
                                      "tgi_request_generated_tokens")),
    "requests": ("counter", ("vllm:request_success", "sglang:num_requests", "tgi_request_success",
                             "llmbench_requests")),
    "prefix_cache_queries_tokens": ("counter", ("vllm:prefix_cache_queries", "vllm:gpu_prefix_cache_queries",
                                                "sglang:prompt_tokens")),
    "prefix_cache_hits_tokens": ("counter", ("vllm:prefix_cache_hits", "vllm:gpu_prefix_cache_hits",
                                             "sglang:cached_tokens")),
    "rejected_requests": ("counter", ("llmbench_requests_rejected",)),
    "preemptions": ("counter", ("vllm:num_preemptions",)),  # requests evicted and recomputed (or swapped out)
}  # fmt: skip
# how a gauge's label sets combine (module docstring): "sum" for counts, "mean" for fractions of a rank's own
GAUGE_OVER_LABELS: dict[str, str] = {"running_requests": "sum", "waiting_requests": "sum", "kv_cache_usage": "mean"}
# an unknown gauge is a fraction (averaged) when its name says so; else a count (summed)
FRACTION_NAME = re.compile(r"usage|_perc(_|$)|percent|ratio|fraction|utili[sz]ation|hit_rate")
SERVERS = {"vllm:": "vLLM", "sglang:": "SGLang", "tgi_": "TGI", "llamacpp:": "llama.cpp server",
           "llmbench_": "llmbench serve"}  # fmt: skip


def parse(text: str) -> dict[str, dict[str, float]]:
    """One scrape: {family name: {"kind": ..., "value": sum over labels, "count"/"sum" for histograms}}; a
    gauge also has ``label_sets`` (how many) and ``max`` (the highest label set's value), so :func:`summarize` can
    average it instead. Raises ValueError on a page that is not the Prometheus text format."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict[str, Any]] = {}
    for fam in text_string_to_metric_families(text):
        kind = fam.type
        entry = out.setdefault(fam.name, {"kind": kind})
        for s in fam.samples:
            if kind in ("histogram", "summary"):
                for suffix in ("_count", "_sum"):
                    if s.name == fam.name + suffix:
                        entry[suffix[1:]] = entry.get(suffix[1:], 0.0) + float(s.value)
            elif kind == "counter" and s.name.endswith("_created"):
                continue
            else:
                v = float(s.value)
                entry["value"] = entry.get("value", 0.0) + v
                if kind != "counter":
                    entry["label_sets"] = entry.get("label_sets", 0) + 1
                    entry["max"] = max(entry.get("max", v), v)
    return out


def over_labels(name: str, canonical: list[str]) -> str:
    """How gauge ``name``'s label sets combine: "sum" (a count) or "mean" (a fraction of each set's own); see the
    module docstring. ``canonical``: the names it is known by."""
    for canon in canonical:
        if canon in GAUGE_OVER_LABELS:
            return GAUGE_OVER_LABELS[canon]
    return "mean" if FRACTION_NAME.search(name.lower()) else "sum"


@dataclass
class Scraper:
    """Scrapes ``url`` every ``interval`` s between :meth:`start` and :meth:`stop` (one scrape at each end)."""

    url: str
    interval: float = 1.0
    timeout: float = 5.0
    scrapes: list[tuple[float, dict[str, dict[str, float]]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _t0: float = 0.0

    def check(self) -> None:
        """One scrape before the run, so a wrong URL stops it at once (UserError)."""
        from llmbench.core.errors import UserError

        try:
            self._scrape_once(raise_errors=True)
        except Exception as e:  # every failure: the same one line for the user
            raise UserError(f"--server-metrics: can't read {redact_url(self.url)}: {_error(e)}") from None
        self.scrapes.clear()

    def start(self) -> None:
        self._t0 = time.perf_counter()
        self._stop.clear()
        self._scrape_once()
        self._thread = threading.Thread(target=self._loop, name="llmbench-server-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self._scrape_once()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._scrape_once()

    def _scrape_once(self, raise_errors: bool = False) -> None:
        import httpx

        try:
            r = httpx.get(self.url, timeout=self.timeout)
            r.raise_for_status()
            self.scrapes.append((round(time.perf_counter() - self._t0, 3), parse(r.text)))
        except Exception as e:  # a missed scrape is recorded, the run goes on
            if raise_errors:
                raise
            self.errors.append(f"{type(e).__name__}: {_error(e)}"[:200])


def _error(e: Exception) -> str:
    """A failed scrape's message: httpx's (a status error names the URL, credentials and all) redacted."""
    return scrub(str(e)) or type(e).__name__


def summarize(url: str, scrapes: list[tuple[float, dict[str, dict[str, float]]]], errors: list[str],
              interval: float) -> dict[str, Any]:  # fmt: skip
    """The run's ``server_metrics`` record from the scrapes (see the module docstring); ``url`` is recorded
    redacted (no userinfo, no query)."""
    record: dict[str, Any] = {"url": redact_url(url), "interval_s": interval, "scrapes": len(scrapes),
                              "errors": errors[:5],
                              "window_s": round(scrapes[-1][0] - scrapes[0][0], 3) if scrapes else None,
                              "server": None, "gauges": {}, "counters": {}, "histograms": {}, "raw": {},
                              "notes": []}  # fmt: skip
    if len(scrapes) < 2:
        record["notes"].append("fewer than two scrapes: no deltas")
        if not scrapes:
            return record
    names = sorted({n for _, s in scrapes for n in s})
    record["server"] = next((v for p, v in SERVERS.items() if any(n.startswith(p) for n in names)), None)
    canonical: dict[str, list[str]] = {}
    for canon, (_kind, candidates) in KNOWN.items():
        found = next((c for c in candidates if c in names), None)
        if found is not None:
            canonical[found] = [*canonical.get(found, []), canon]
    first, last = scrapes[0][1], scrapes[-1][1]
    for name in names:
        kind = next((s[name]["kind"] for _, s in scrapes if name in s), "unknown")
        targets = canonical.get(name, [])  # empty: a name no table knows, kept raw
        if kind in ("histogram", "summary"):
            a, b = first.get(name, {}), last.get(name, {})
            dc, ds = b.get("count", 0.0) - a.get("count", 0.0), b.get("sum", 0.0) - a.get("sum", 0.0)
            entry = {"name": name, "count_delta": dc, "sum_delta": ds, "mean": ds / dc if dc > 0 else None}
            for canon in targets:
                if KNOWN[canon][0] == "counter":  # TGI's token counts are histograms
                    record["counters"][canon] = {"name": name, "delta": ds, "kind": kind}
            record["histograms"][name] = entry
            continue
        present = [s[name] for _, s in scrapes if name in s and "value" in s[name]]
        if not present:
            continue
        rule = over_labels(name, targets) if kind != "counter" else "sum"
        if rule == "mean":  # each scrape's label sets averaged first: two ranks at 0.6 are 0.6
            values = [round(x["value"] / max(1, x.get("label_sets", 1)), 6) for x in present]
        else:
            values = [x["value"] for x in present]
        if kind == "counter":
            delta = values[-1] - values[0]
            entry = {"name": name, "delta": delta if delta >= 0 else None, "first": values[0], "last": values[-1]}
            if delta < 0:
                record["notes"].append(f"{name} went down during the run (a restart?): its delta is not trusted")
            where = "counters"
        else:
            sets = max(int(x.get("label_sets", 1)) for x in present)
            entry = {"name": name, "mean": round(statistics.fmean(values), 6), "max": max(values),
                     "min": min(values), "over_labels": rule, "label_sets": sets}  # fmt: skip
            if rule == "mean" and sets > 1:
                entry["max_label_set"] = max(x.get("max", x["value"]) for x in present)
            where = "gauges"
        for canon in targets:
            record[where][canon] = entry
        if not targets:
            record["raw"][name] = {"kind": kind, **{k: v for k, v in entry.items() if k != "name"}}
    hits = record["counters"].get("prefix_cache_hits_tokens", {}).get("delta")
    queries = record["counters"].get("prefix_cache_queries_tokens", {}).get("delta")
    record["prefix_cache_hit_rate"] = round(hits / queries, 6) if hits is not None and queries else None
    return record
