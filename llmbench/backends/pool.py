"""One side of ``ab`` spread over N worker processes, used in turn (``ab --processes N``).

Two identical processes can differ by several percent for the life of the process (memory layout, hash seeds,
where the allocator put the weights): with one process per side, that difference is a constant offset inside
every pair, and a paired interval calls it real. With N processes per side, pair k is measured by process
k mod N on both sides; each result records its ``process``, and compare's interval is taken over the
processes' own changes (Student t, N - 1 degrees of freedom), so a difference that only one process shows stays
noise. All processes start (load, warm up) before the first timed request; a warm-up warms every process.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import Any

from llmbench.backends import Request
from llmbench.backends.worker import WorkerBackend
from llmbench.core.errors import UserError
from llmbench.core.process import Stop
from llmbench.options import RunOptions
from llmbench.results.schema import Probe, RequestResult, Run
from llmbench.workloads.prompts import PromptSet


class PoolBackend:
    """N :class:`WorkerBackend` of the same command; request (prompt i, repeat r) goes to process
    (r * prompts + i) mod N, the same rule on both sides of an ab pair."""

    cancel_on_stop = False

    def __init__(self, command: list[str], options: RunOptions, processes: int, *, label: str = "") -> None:
        if processes < 1:
            raise UserError(f"--processes must be at least 1, not {processes}")
        self.workers = [WorkerBackend(command, options, label=label) for _ in range(processes)]
        self.label = label
        self.n_prompts = 1

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        return self.workers[0].early_config(prompts)

    async def start(self, prompts: PromptSet) -> None:
        """Start every process (their loads overlap; nothing is timed yet); if one fails, close them all."""
        self.n_prompts = len(prompts.prompts)
        results = await asyncio.gather(*(w.start(prompts) for w in self.workers), return_exceptions=True)
        errors = [r for r in results if isinstance(r, BaseException)]
        if errors:
            await self.close()
            raise errors[0]

    def new_run(self, prompts: PromptSet) -> Run:
        run = self.workers[0].new_run(prompts)
        pids = [w.pid for w in self.workers]
        run.config.engine_settings = {**(run.config.engine_settings or {}), "worker_pids": pids}
        return run

    async def activate(self) -> None:
        pass

    def process_of(self, request: Request) -> int:
        return (request.repeat * self.n_prompts + request.prompt_index) % len(self.workers)

    async def measure(self, request: Request, stop: Stop, started_s: float) -> RequestResult | None:
        if request.repeat < 0:  # a warm-up warms every process
            result = None
            for w in self.workers:
                result = await w.measure(request, stop, started_s)
                if result is None:
                    return None
            return result
        k = self.process_of(request)
        result = await self.workers[k].measure(request, stop, started_s)
        if result is not None:
            result.process = k
        return result

    def probe_key(self) -> Hashable:
        return ("pool", id(self))

    async def probe(self) -> Probe | None:
        return await self.workers[0].probe()

    def finish(self, run: Run) -> list[str]:
        seen: list[str] = []
        for w in self.workers:
            seen += [x for x in w.finish(run) if x not in seen]
        return seen

    async def close(self) -> None:
        await asyncio.gather(*(w.close() for w in self.workers), return_exceptions=True)
