"""What llmbench's stopwatch costs per token on each engine, and how it agrees with the engine's own timer.

Same model, same prompt ids, interleaved rounds (machine drift lands on both paths alike), in one process:
  bare     the engine's own token loop (llama.cpp Llama.generate, OpenVINO GenAI's streamer, ONNX Runtime GenAI's
           Generator), with a callback that only counts; TPOT = (arrival of the last token - first) / (N - 1),
           two clock reads per request
  llmbench the engine backend's request path: templating and tokenizing on the clock, gc paused, a stamp (clock
           read + two appends) in the engine's per-token callback, the stop check
Each round gives a paired ratio llmbench TPOT / bare TPOT: the median over rounds, with a bootstrap 95%
interval, is llmbench's per-token cost (target: within 1%). Beside it, the engine's own TPOT (llama.cpp
t_eval_ms / n_eval, OpenVINO GenAI PerfMetrics) against llmbench's, for the same requests.

    python benchmarks/engine_overhead.py --engine llama.cpp --model M.gguf [--rounds 30] [--tokens 64] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import llmbench
from llmbench.backends import Request
from llmbench.backends.engine import EngineBackend
from llmbench.engines.chat import encode_ids, messages_for
from llmbench.options import ModelOptions

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--engine", required=True)
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--weights", default="pretrained")
    ap.add_argument("--precision", default=None)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()

    import numpy as np
    from scipy import stats

    em = llmbench.load_model(args.model, weights=args.weights, engine=args.engine, precision=args.precision,
                             threads=args.threads)  # fmt: skip
    prompt = llmbench.load_prompts(ROOT / "prompts" / "env_violations.txt").prompts[0]
    ids = encode_ids(em.tokenizer, messages_for(prompt, None), True)
    n = args.tokens
    spec = ModelOptions(model=args.model, weights=args.weights, engine=args.engine, precision=args.precision)
    backend = EngineBackend(spec, llmbench.RunOptions(max_new_tokens=n, ignore_eos=True, warmup=0), loaded=em)
    stop = llmbench.Stop()  # never raised: checked after every token, as in a run

    def bare() -> tuple[float, float | None]:
        first = last = 0
        count = 0

        def on_token(token: int) -> bool:
            nonlocal first, last, count
            count += 1
            if count == 1:
                first = time.perf_counter_ns()
            elif count == n:
                last = time.perf_counter_ns()
            return True

        timers = em.runner.generate(ids, n, None, on_token)
        return (last - first) / 1e6 / (n - 1), timers.tpot_ms

    def measured() -> llmbench.RequestResult:
        r = backend.measure_now(Request(prompt, 0, 0), stop)
        assert r is not None and r.output_tokens == n
        return r

    bare_tpot: list[float] = []
    lb_tpot: list[float] = []
    engine_tpot: list[float] = []
    with llmbench.frozen_gc():
        em.call(bare)  # warm both paths, unmeasured
        em.call(measured)
        for r in range(args.rounds):
            for which in (0, 1) if r % 2 == 0 else (1, 0):  # alternate who goes first
                if which == 0:
                    tpot, _ = em.call(bare)
                    bare_tpot.append(tpot)
                else:
                    res = em.call(measured)
                    lb_tpot.append(res.tpot_ms)
                    if res.engine_tpot_ms:
                        engine_tpot.append(res.tpot_ms / res.engine_tpot_ms)
            print(f"round {r + 1}: bare {bare_tpot[-1]:.3f} ms, llmbench {lb_tpot[-1]:.3f} ms", flush=True)

    ratios = np.array(lb_tpot) / np.array(bare_tpot)
    ci = stats.bootstrap((ratios,), np.median, confidence_level=0.95, n_resamples=5000, random_state=0)
    low, high = ci.confidence_interval
    print(f"\n{args.engine} {em.dtype}, {em.threads} threads, {n} tokens, {args.rounds} rounds ({em.version})")
    print(f"bare TPOT median {statistics.median(bare_tpot):.3f} ms, llmbench {statistics.median(lb_tpot):.3f} ms")
    if engine_tpot:
        print(f"llmbench / engine's own TPOT: median {statistics.median(engine_tpot):.4f} "
              f"(min {min(engine_tpot):.4f}, max {max(engine_tpot):.4f})")  # fmt: skip
    print(f"llmbench/bare TPOT ratio: {float(np.median(ratios)):.4f} [{low:.4f}, {high:.4f}]")
    em.runner.close()


if __name__ == "__main__":
    main()
