"""--server-metrics: the server's Prometheus page scraped over the measured window. Ground truth from a stub whose
counters rise by known amounts per scrape (vLLM V1's names), and from llmbench serve's own /metrics against the
tokens the client itself counted, over real HTTP on loopback."""

from __future__ import annotations

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse
from starlette.routing import Route

from llmbench.backends.http import servermetrics
from llmbench.core.errors import UserError
from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions
from llmbench.results.storage import load_run
from llmbench.serve import create_app
from tests.servers import BackgroundServer

VLLM_PAGE = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{{model_name="m",engine="0"}} {running}
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{model_name="m",engine="0"}} {waiting}
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{{model_name="m",engine="0"}} {kv}
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{{model_name="m",engine="0"}} {prompt}
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{{model_name="m",engine="0"}} {generation}
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{{model_name="m",engine="0"}} {queries}
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{{model_name="m",engine="0"}} {hits}
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{{le="0.1",model_name="m",engine="0"}} {n}
vllm:time_to_first_token_seconds_bucket{{le="+Inf",model_name="m",engine="0"}} {n}
vllm:time_to_first_token_seconds_count{{model_name="m",engine="0"}} {n}
vllm:time_to_first_token_seconds_sum{{model_name="m",engine="0"}} {ttft_sum}
# TYPE some_custom_thing gauge
some_custom_thing 7
"""


def vllm_page(k: int) -> str:
    """The k-th scrape: 100 prompt tokens, 40 generated, 80 cache queries and 60 hits, one request per scrape."""
    return VLLM_PAGE.format(running=k % 3, waiting=2 * (k % 2), kv=0.1 * k, prompt=1000 + 100 * k,
                            generation=5000 + 40 * k, queries=300 + 80 * k, hits=10 + 60 * k, n=k,
                            ttft_sum=0.05 * k)  # fmt: skip


def rising_metrics_app() -> tuple[Starlette, list[int]]:
    """A stub whose every GET /metrics is the next vllm_page (its scrape count kept for the test)."""
    count = [0]

    async def metrics(_request: Request) -> PlainTextResponse:
        page = vllm_page(count[0])
        count[0] += 1
        return PlainTextResponse(page, media_type="text/plain; version=0.0.4")

    return Starlette(routes=[Route("/metrics", metrics)]), count


def test_a_scraper_against_a_server_whose_counters_rise():
    app, count = rising_metrics_app()
    with BackgroundServer(app) as url:
        scraper = servermetrics.Scraper(f"{url}/metrics", interval=0.05)
        scraper.check()  # one scrape (k = 0), then forgotten
        scraper.start()
        import time

        time.sleep(0.4)
        scraper.stop()
    rec = servermetrics.summarize(scraper.url, scraper.scrapes, scraper.errors, scraper.interval)
    n = len(scraper.scrapes)
    assert n >= 3 and count[0] == n + 1  # every scrape the stub answered is in the record, except the check
    # the deltas are the stub's own rises between the window's first and last scrape: k = 1 .. n
    assert rec["counters"]["prompt_tokens"]["delta"] == 100 * (n - 1)
    assert rec["counters"]["generation_tokens"]["delta"] == 40 * (n - 1)


def test_a_wrong_metrics_url_is_one_line():
    with pytest.raises(UserError, match=r"--server-metrics: can't read http://127\.0\.0\.1:9/metrics"):
        servermetrics.Scraper("http://127.0.0.1:9/metrics", timeout=2).check()


@pytest.fixture(scope="module")
def metered_server(tiny_model_dir):
    lm = load_model(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="float32", threads=1))
    with BackgroundServer(create_app(lm, max_queue=2, max_tokens=8)) as url:
        yield url


def test_serve_exposes_its_own_metrics_and_run_records_them(cli, metered_server, prompt_file, tmp_path):
    import httpx

    page = httpx.get(f"{metered_server}/metrics", timeout=10).text
    names = {f.name for f in __import__("prometheus_client.parser").parser.text_string_to_metric_families(page)}
    assert {"llmbench_requests_generating", "llmbench_requests_queued", "llmbench_prompt_tokens",
            "llmbench_generation_tokens", "llmbench_requests"} <= names  # fmt: skip
    out = tmp_path / "ep.json"
    r = cli("run", prompt_file, "--endpoint", f"{metered_server}/v1", "--max-new-tokens", "6", "--ignore-eos",
            "--repeats", "2", "--warmup", "1", "--server-metrics", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    run = load_run(out)
    sm = run.server_metrics
    assert sm["server"] == "llmbench serve" and sm["url"].endswith("/metrics") and sm["scrapes"] >= 2
    # ground truth: what the client itself measured in the window (the warm-up was before it)
    assert sm["counters"]["requests"]["delta"] == len(run.requests) == 6
    assert sm["counters"]["generation_tokens"]["delta"] == sum(q.output_tokens for q in run.requests) == 36
    assert sm["counters"]["prompt_tokens"]["delta"] == sum(q.prompt_tokens for q in run.requests)
    assert sm["gauges"]["running_requests"]["max"] <= 1
    shown = cli("show", out)
    assert shown.returncode == 0 and "server (llmbench serve)" in shown.stdout


def test_server_metrics_are_endpoint_only_and_a_bad_url_is_one_line(cli, metered_server, prompt_file, tmp_path):
    r = cli("run", prompt_file, "--server-metrics", "--weights", "random", "-o", tmp_path / "x.json")
    assert r.returncode == 2 and "options of --endpoint runs only" in r.stderr and "Traceback" not in r.stderr
    r = cli("run", prompt_file, "--endpoint", f"{metered_server}/v1", "--metrics-url", "http://127.0.0.1:9/metrics",
            "-o", tmp_path / "y.json")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "can't read" in r.stderr
    assert not (tmp_path / "y.json").exists()


def test_the_record_and_a_missed_scrape_carry_no_credentials():
    """The page is read with the URL's credentials; the record and its errors (httpx's status error names the
    whole URL) carry it redacted."""
    app, count = rising_metrics_app()

    async def flaky(_request: Request) -> PlainTextResponse:
        count[0] += 1
        return PlainTextResponse(vllm_page(count[0]), status_code=503 if count[0] == 3 else 200)

    app.add_route("/flaky", flaky)
    with BackgroundServer(app) as url:
        secret = url.replace("http://", "http://scraper:S3CRETpw@") + "/flaky?token=T0KENxyz"
        scraper = servermetrics.Scraper(secret, interval=0.05)
        scraper.check()
        scraper.start()
        import time

        time.sleep(0.3)
        scraper.stop()
    rec = servermetrics.summarize(scraper.url, scraper.scrapes, scraper.errors, scraper.interval)
    assert rec["url"] == f"{url}/flaky" and rec["errors"] and "503" in rec["errors"][0]
    assert f"'{url}/flaky'" in rec["errors"][0]  # httpx's message, its URL redacted
    assert not any(s in repr(rec) for s in ("scraper", "S3CRETpw", "T0KENxyz"))
