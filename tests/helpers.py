"""Runs built in code, with known numbers, for tests that need a run JSON but not a model."""

from __future__ import annotations

import random

from llmbench.results import SCHEMA_VERSION, Environment, Run, RunConfig
from llmbench.stats import summarize
from llmbench.timing import request_result


def synthetic_run(
    n: int = 10, ttft_ms: float = 100.0, tpot_ms: float = 20.0, tokens: int = 16, noise: float = 0.0, seed: int = 0
) -> Run:
    """A complete run whose requests have the given TTFT/TPOT (plus uniform relative noise)."""
    rng = random.Random(seed)
    ms = 1_000_000
    requests = []
    for i in range(n):
        ttft = ttft_ms * (1 + rng.uniform(-noise, noise))
        stamps = [int(ttft * ms)]
        for _ in range(tokens - 1):
            stamps.append(stamps[-1] + int(tpot_ms * (1 + rng.uniform(-noise, noise)) * ms))
        requests.append(
            request_result(
                prompt_index=i,
                repeat=0,
                start_ns=0,
                tokenized_ns=ms,
                stamps_ns=stamps,
                prompt_tokens=30,
                token_ids=list(range(tokens)),
                output_text="x" * tokens,
            )
        )
    config = RunConfig(
        model="synthetic",
        model_source="builtin",
        weights="random",
        device="cpu",
        dtype="bfloat16",
        threads=2,
        max_new_tokens=tokens,
        ignore_eos=True,
        warmup=0,
        repeats=1,
        prompt_file="p.txt",
        prompt_sha256="0" * 64,
        prompt_count=n,
    )
    env = Environment(python="3.11", platform="test", cpu_model="test cpu")
    return Run(
        schema_version=SCHEMA_VERSION,
        llmbench_version="0",
        run_id="r",
        created_at="2026-01-01T00:00:00Z",
        complete=True,
        config=config,
        environment=env,
        requests=requests,
        summary=summarize(requests),
    )
