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
