"""--server-metrics: the server's Prometheus page scraped over the measured window. Ground truth from a stub whose
counters rise by known amounts per scrape (vLLM V1's names), and from llmbench serve's own /metrics against the
tokens the client itself counted, over real HTTP on loopback.

This file: the part that needs no child process and no socket (tests/unit); the rest is in
tests/integration/test_server_metrics.py."""

from __future__ import annotations

import pytest

from llmbench.backends.http import servermetrics
from llmbench.options import default_metrics_url
from tests.integration.test_server_metrics import vllm_page


def test_counters_deltas_gauges_and_the_hit_rate_from_vllm_v1_names():
    scrapes = [(0.5 * k, servermetrics.parse(vllm_page(k))) for k in range(5)]  # k = 0..4
    rec = servermetrics.summarize("http://x/metrics", scrapes, [], 0.5)
    assert rec["server"] == "vLLM" and rec["scrapes"] == 5 and rec["window_s"] == 2.0
    c, g = rec["counters"], rec["gauges"]
    assert c["prompt_tokens"]["delta"] == 400 and c["generation_tokens"]["delta"] == 160
    assert c["prefix_cache_queries_tokens"]["delta"] == 320 and c["prefix_cache_hits_tokens"]["delta"] == 240
    assert rec["prefix_cache_hit_rate"] == 0.75
    assert g["running_requests"]["mean"] == pytest.approx((0 + 1 + 2 + 0 + 1) / 5) and g["running_requests"]["max"] == 2
    assert (
        g["kv_cache_usage"]["max"] == pytest.approx(0.4)
        and g["waiting_requests"]["name"] == "vllm:num_requests_waiting"
    )
    h = rec["histograms"]["vllm:time_to_first_token_seconds"]
    assert h["count_delta"] == 4 and h["mean"] == pytest.approx(0.05)
    assert rec["raw"]["some_custom_thing"]["mean"] == 7  # unknown names kept by their raw name


def test_a_counter_that_went_down_is_not_trusted():
    pages = [vllm_page(3), vllm_page(1)]  # a restart between the scrapes
    rec = servermetrics.summarize("u", [(0.0, servermetrics.parse(pages[0])), (1.0, servermetrics.parse(pages[1]))],
                                  [], 1.0)  # fmt: skip
    assert rec["counters"]["prompt_tokens"]["delta"] is None
    assert any("went down" in n for n in rec["notes"]) and rec["prefix_cache_hit_rate"] is None


def test_the_default_metrics_url_is_the_servers_root():
    assert default_metrics_url("http://127.0.0.1:8000/v1") == "http://127.0.0.1:8000/metrics"
    assert default_metrics_url("https://h.example/api/v1/") == "https://h.example/metrics"


TWO_RANKS = """# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {run0}
vllm:num_requests_running{{model_name="m",engine="1"}} {run1}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m",engine="0"}} {kv0}
vllm:kv_cache_usage_perc{{model_name="m",engine="1"}} {kv1}
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{{tp_rank="0"}} 0.5
sglang:cache_hit_rate{{tp_rank="1"}} 0.7
# TYPE queue_depth gauge
queue_depth{{rank="0"}} 2
queue_depth{{rank="1"}} 3
"""


def test_a_usage_gauge_is_averaged_over_ranks_and_a_count_summed():
    # two data-parallel ranks at 60% KV cache were recorded and shown as "KV cache usage mean 1.2": 120% of a cache
    from types import SimpleNamespace

    from llmbench.present import terminal

    pages = [TWO_RANKS.format(run0=2, run1=3, kv0=0.6, kv1=0.6), TWO_RANKS.format(run0=4, run1=0, kv0=0.9, kv1=0.5)]
    rec = servermetrics.summarize("u", [(float(k), servermetrics.parse(p)) for k, p in enumerate(pages)], [], 1.0)
    kv, running = rec["gauges"]["kv_cache_usage"], rec["gauges"]["running_requests"]
    assert kv["mean"] == pytest.approx(0.65) and kv["max"] == pytest.approx(0.7) and kv["min"] == pytest.approx(0.6)
    assert kv["over_labels"] == "mean" and kv["label_sets"] == 2 and kv["max_label_set"] == pytest.approx(0.9)
    assert running["mean"] == pytest.approx(4.5) and running["max"] == 5 and running["over_labels"] == "sum"
    assert rec["raw"]["sglang:cache_hit_rate"]["mean"] == pytest.approx(0.6)  # a fraction, by its name
    assert rec["raw"]["queue_depth"]["mean"] == pytest.approx(5) and rec["raw"]["queue_depth"]["over_labels"] == "sum"
    (line,) = terminal.server_lines(SimpleNamespace(server_metrics=rec))
    assert "KV cache usage mean 0.65 max 0.7 (mean of 2 label sets; highest one 0.9)" in line, line
    assert "running mean 4.5 max 5," in line, line
