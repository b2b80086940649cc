"""llmbench's endpoint client as a worker: the code path of `llmbench run --endpoint` (its backend: one AsyncClient
kept open, httpx-sse, stamps on arrival), one request per prompt read on stdin.

    python benchmarks/llmbench_worker.py PORT MAX_TOKENS     # stdin: one JSON string a line
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import llmbench
from llmbench.backends import Request
from llmbench.backends.endpoint import EndpointBackend


async def main() -> None:
    port, max_tokens = int(sys.argv[1]), int(sys.argv[2])
    backend = EndpointBackend(llmbench.EndpointOptions(endpoint=f"http://127.0.0.1:{port}/v1"),
                              llmbench.RunOptions(max_new_tokens=max_tokens))  # fmt: skip
    prompts = llmbench.PromptSet.from_list(["unused"])
    await backend.start(prompts)
    stop, loop, i = llmbench.Stop(), asyncio.get_running_loop(), 0
    try:
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            prompt = json.loads(line)
            cpu0 = time.process_time()
            r = await backend.measure(Request(prompt, i, 0), stop, 0.0)
            i += 1
            t = r.token_times_ms  # per content event, as the minimal client counts
            tpot = (t[-1] - t[0]) / (len(t) - 1) if len(t) > 1 else None
            out = {"ttft_ms": r.ttft_ms, "tpot_ms": tpot, "events": len(t), "cpu_s": time.process_time() - cpu0}
            print(json.dumps(out), flush=True)
    finally:
        await backend.close()


if __name__ == "__main__":
    asyncio.run(main())
