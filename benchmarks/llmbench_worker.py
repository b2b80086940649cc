"""llmbench's endpoint client as a worker: the code path of `llmbench run --endpoint` (one AsyncClient kept
open, httpx-sse, ``stream_one`` + ``to_result``), one request per prompt read on stdin.

    python benchmarks/llmbench_worker.py PORT MAX_TOKENS     # stdin: one JSON string a line
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx

from llmbench.endpoint import TokenCounter, _body, stream_one, to_result
from llmbench.options import RunOptions


async def main() -> None:
    port, max_tokens = int(sys.argv[1]), int(sys.argv[2])
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    options = RunOptions(max_new_tokens=max_tokens)
    counter = TokenCounter(None)
    loop = asyncio.get_running_loop()
    async with httpx.AsyncClient(timeout=httpx.Timeout(600.0, connect=10.0)) as client:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            prompt = json.loads(line)
            cpu0 = time.process_time()
            raw = await stream_one(client, url, _body(None, prompt, options, max_tokens), {})
            r = to_result(raw, 0, 0, 0.0, counter.count(raw, prompt))
            t = r.token_times_ms  # per content event, as the minimal client counts
            tpot = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None
            out = {"ttft_ms": r.ttft_ms, "tpot_ms": tpot, "events": len(t), "cpu_s": time.process_time() - cpu0}
            print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
