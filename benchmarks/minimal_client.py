"""The reference client: as little as can stream an OpenAI-compatible endpoint and stamp it.

One process, standard library only, one connection per request, a clock read per read() that brought a
line with content. Reads one prompt a line (JSON string) on stdin and answers each with one JSON line:
{"ttft_ms", "tpot_ms", "events", "cpu_s"}; TPOT is per content event, (last - first) / (events - 1). Used by
endpoint_client.py as the yardstick for llmbench's client.

    python benchmarks/minimal_client.py PORT MAX_TOKENS
"""

from __future__ import annotations

import http.client
import json
import sys
import time


def stream(port: int, prompt: str, max_tokens: int) -> dict:
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "stream": True, "max_tokens": max_tokens,
                       "temperature": 0.0})  # fmt: skip
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
    t0 = time.perf_counter()
    conn.request("POST", "/v1/chat/completions", body, {"Content-Type": "application/json"})
    resp = conn.getresponse()
    stamps, buf = [], b""
    while data := resp.read1(65536):
        t = time.perf_counter()
        *lines, buf = (buf + data).split(b"\n")
        for line in lines:
            if line.startswith(b"data: {"):
                choices = json.loads(line[6:]).get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    stamps.append(t)
    conn.close()
    n = len(stamps)
    return {"ttft_ms": (stamps[0] - t0) * 1000, "tpot_ms": (stamps[-1] - stamps[0]) / (n - 1) * 1000 if n > 1 else None,
            "events": n}  # fmt: skip


def main() -> None:
    port, max_tokens = int(sys.argv[1]), int(sys.argv[2])
    for line in sys.stdin:
        cpu0 = time.process_time()
        result = stream(port, json.loads(line), max_tokens)
        print(json.dumps({**result, "cpu_s": time.process_time() - cpu0}), flush=True)


if __name__ == "__main__":
    main()
