"""The last link: the first *painted* character in real headless Chromium, through a real nginx, against llmbench
serve around a model whose forward passes take known times (tests/delayed_model.py): prefill 100 ms, decode 40 ms,
24 tokens, so the server's answer takes ~1.02 s by construction.

nginx (/usr/sbin/nginx, run as this user, everything in tmp_path) proxies with its defaults, buffering on (HTTP/1.0
to the upstream, nginx's default), in two configurations that differ in one line:

- ``proxy_ignore_headers X-Accel-Buffering;``: serve's ``X-Accel-Buffering: no`` is ignored, nginx holds the answer,
  the first character is painted at the end, and the detector says buffered (on the page's reads and on llmbench's
  own client);
- without it, nginx honours the header, the first character is painted a frame or so after it is read, near TTFT,
  and the detector says streamed.

(With ``proxy_http_version 1.1`` nginx 1.22 passed each chunk on even with the header ignored: not what is tested.)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import statistics
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from llmbench.drivers.paint import paint
from llmbench.options import EndpointOptions, RunOptions
from llmbench.results.storage import read_paint
from llmbench.serve import create_app
from llmbench.workloads.prompts import PromptSet
from tests.delayed_model import delayed_loaded
from tests.servers import BackgroundServer, free_port

PREFILL_MS, DECODE_MS, TOKENS = 100.0, 40.0, 24
ANSWER_MS = PREFILL_MS + (TOKENS - 1) * DECODE_MS  # 1,020 ms: when the server has made its last token, at least
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)
PROMPTS = PromptSet.from_list(["a plant dumps water at night", "某工厂夜间偷排废水"])
OPTIONS = RunOptions(max_new_tokens=TOKENS, ignore_eos=True, warmup=1)

pytestmark = [
    pytest.mark.browser,
    pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)"),
    pytest.mark.skipif(NGINX is None, reason="Debian's nginx is not installed (.ci/run installs it)"),
]

CONF = """worker_processes 1;
master_process off;
daemon off;
pid {d}/nginx.pid;
error_log {d}/error.log info;
events {{ worker_connections 64; }}
http {{
  access_log {d}/access.log;
  client_body_temp_path {d}/client_body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      proxy_pass http://127.0.0.1:{upstream};
      proxy_buffering on;
      proxy_buffer_size 64k;
      proxy_buffers 16 64k;
      proxy_busy_buffers_size 128k;
      {ignore}
    }}
  }}
}}
"""


@contextmanager
def nginx(prefix: Path, upstream: str, *, ignore_header: bool):
    """A real nginx on 127.0.0.1 in front of ``upstream``, as this user (one process, no root, every file under
    ``prefix``); yields its URL; stopped on exit, whatever happened."""
    prefix.mkdir(parents=True)
    port = free_port()
    ignore = "proxy_ignore_headers X-Accel-Buffering;" if ignore_header else ""
    conf = prefix / "nginx.conf"
    conf.write_text(CONF.format(d=prefix, port=port, upstream=upstream.rsplit(":", 1)[1], ignore=ignore), "utf-8")
    # -e: the error log before the configuration is read (nginx >= 1.19.5), not /var/log/nginx's
    proc = subprocess.Popen([NGINX, "-c", str(conf), "-p", str(prefix), "-e", str(prefix / "error.log")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, f"nginx exited: {proc.stderr.read() if proc.stderr else ''}"
            assert time.monotonic() < deadline, "nginx did not listen within 10 s"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.02)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.fixture(scope="module")
def served(qwen_tokenizer):
    """llmbench serve's app around the delayed model, on real uvicorn; yields its URL."""
    lm = delayed_loaded(qwen_tokenizer, PREFILL_MS, DECODE_MS)
    with BackgroundServer(create_app(lm, max_queue=2)) as url:
        yield url


def _paint(url: str, out: Path) -> dict:
    return asyncio.run(paint(PROMPTS, EndpointOptions(endpoint=f"{url}/v1"), OPTIONS, chromium=CHROMIUM, output=out))


@pytest.fixture(scope="module")
def direct(served, tmp_path_factory) -> dict:
    """The same prompts painted with no proxy between: the TTFT the proxy cases are held to."""
    return _paint(served, tmp_path_factory.mktemp("direct") / "paint.json")


def _streamed(r: dict, direct_ttft: float) -> None:
    """A request that streamed to the screen: painted frame by frame, the first character near TTFT."""
    assert r["events"] >= TOKENS // 2 and r["ttft_ms"] >= PREFILL_MS
    assert r["ttft_ms"] < direct_ttft + 150  # the proxy adds little
    assert r["first_paint_ms"] - r["ttft_ms"] < 100  # a few frames
    assert r["first_paint_ms"] < 0.5 * ANSWER_MS
    assert r["render_lag_ms"]["p50"] < 50 and r["paint_gaps_ms"]["frames"] >= TOKENS // 2
    assert r["page_buffered"] is False and r["client"]["buffered"] is False and r["painted_at_once"] is False
    assert r["agree"] is True
    s = r["server"]  # the server's own stamps on the page's timeline: it made the first token before the page read it
    assert s["anchored"] == "server-clock" and -20 < s["arrived_ms"] < r["ttft_ms"]
    assert s["first_token_ms"] <= r["ttft_ms"] + 20 and s["last_token_ms"] >= 0.85 * ANSWER_MS


def test_direct_the_first_character_is_painted_a_frame_after_it_is_read(direct):
    assert direct["paint_version"] == 1 and len(direct["requests"]) == len(PROMPTS.prompts) and not direct["failed"]
    ttft = direct["summary"]["ttft_ms_p50"]
    for r in direct["requests"]:
        _streamed(r, ttft)
        assert len(r["raw"]["events"]) == r["events"] and r["raw"]["page"]["reads"]  # the raw stamps are kept
        assert -50 < r["clock_check_ms"] < 1000  # Python's clock and the page's agree


def test_nginx_honouring_x_accel_buffering_streams_to_the_screen(served, direct, tmp_path):
    with nginx(tmp_path / "nginx", served, ignore_header=False) as url:
        rec = _paint(url, tmp_path / "paint.json")
    assert len(rec["requests"]) == len(PROMPTS.prompts) and not rec["failed"]
    for r in rec["requests"]:
        _streamed(r, direct["summary"]["ttft_ms_p50"])
    assert rec["summary"]["agree"] is True and rec["summary"]["page_buffered_requests"] == 0


def test_nginx_ignoring_x_accel_buffering_paints_the_answer_at_once(cli, served, direct, tmp_path, prompt_file):
    out = tmp_path / "paint.json"
    with nginx(tmp_path / "nginx", served, ignore_header=True) as url:
        r = cli("paint", prompt_file, "--endpoint", f"{url}/v1", "--max-new-tokens", str(TOKENS), "--ignore-eos",
                "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "something between server and browser buffers it" in r.stdout and f"wrote {out}" in r.stdout
    rec = read_paint(out)
    assert rec is not None and len(rec["requests"]) == 3 and not rec["failed"]
    direct_ttft = direct["summary"]["ttft_ms_p50"]
    for q in rec["requests"]:
        # the first character is painted when the whole answer is there: near E2E, long after a direct TTFT
        assert q["first_paint_ms"] >= 0.85 * ANSWER_MS and q["first_paint_ms"] >= 0.85 * q["e2e_ms"]
        assert q["first_paint_ms"] > 4 * direct_ttft
        # ... after the server had made its last token (its own stamp, on the page's timeline)
        assert q["server"]["anchored"] == "server-clock" and q["server"]["last_token_ms"] <= q["first_paint_ms"] + 20
        assert q["paint_gaps_ms"]["frames"] <= 3 and q["painted_at_once"] is True
        assert q["page_buffered"] is True and q["client"]["buffered"] is True and q["agree"] is True
        assert q["client"]["ttft_ms"] >= 0.85 * ANSWER_MS  # llmbench's own client waited as long
    assert statistics.median(q["ttft_ms"] for q in rec["requests"]) > 4 * direct_ttft
    shown = cli("show", out)
    assert shown.returncode == 0 and "at once" in shown.stdout and "buffered" in shown.stdout
