"""What llmbench's stopwatch costs and what the seed's stopwatch distorts, in one process.

Same model, same prompt, interleaved rounds (so machine drift hits every path alike) of:
  bare     model.generate() with no streamer, timed from outside:
           TTFT = time of generate(max_new_tokens=1); TPOT = (T(N) - T(1)) / (N - 1)
  llmbench llmbench's timing path (runner.Benchmark.measure: TokenStamper stamps in put())
  seed     the seed article's TextIteratorStreamer + Thread, timed on the text chunks it yields

Prints the median of each over the rounds, and as its last line `llmbench/bare TPOT ratio: X.XXX`.

    python benchmarks/overhead.py [--rounds 7] [--tokens 32] [--dtype bfloat16] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from threading import Thread

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--weights", default="random")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()

    import torch
    from transformers import TextIteratorStreamer

    from llmbench.models import ModelSpec, load_model
    from llmbench.prompts import load_prompts
    from llmbench.runner import Benchmark, RunOptions, _StopFlag

    lm = load_model(
        ModelSpec(model=args.model, weights=args.weights, device=args.device, dtype=args.dtype, threads=args.threads)
    )
    prompt = load_prompts(ROOT / "prompts" / "env_violations.txt").prompts[0]
    n = args.tokens
    bench = Benchmark(lm, RunOptions(max_new_tokens=n, ignore_eos=True, warmup=0))
    enc = bench._encode(prompt)
    ids, mask = enc["input_ids"].to(lm.device), enc["attention_mask"].to(lm.device)
    gen = bench._generate_kwargs()

    def sync() -> None:
        if lm.device.startswith("cuda"):
            torch.cuda.synchronize()

    def bare(max_new: int) -> float:
        kw = {**gen, "max_new_tokens": max_new, "min_new_tokens": max_new}
        sync()
        t = time.perf_counter_ns()
        lm.model.generate(input_ids=ids, attention_mask=mask, **kw)
        sync()
        return (time.perf_counter_ns() - t) / 1e6

    def seed_path() -> tuple[float, float, int]:
        streamer = TextIteratorStreamer(lm.tokenizer, skip_prompt=True)
        t0 = time.perf_counter_ns()
        text = lm.tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
        )
        inputs = lm.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(lm.device)
        th = Thread(target=lm.model.generate, kwargs={**inputs, **gen, "streamer": streamer})
        th.start()
        stamps = [time.perf_counter_ns() for chunk in streamer if chunk]
        th.join()
        ttft = (stamps[0] - t0) / 1e6
        tpot = (stamps[-1] - stamps[0]) / 1e6 / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
        return ttft, tpot, len(stamps)

    rows: dict[str, list[float]] = {
        k: [] for k in ("bare_ttft", "bare_tpot", "lb_ttft", "lb_tpot", "seed_ttft", "seed_tpot", "seed_chunks")
    }
    bare(n)  # warm every path once, unmeasured
    stop = _StopFlag()  # the interrupt check `llmbench run` adds to every step: part of the timed path
    bench.measure(prompt, 0, 0, stop=stop)
    seed_path()
    for r in range(args.rounds):
        order = [0, 1, 2][r % 3 :] + [0, 1, 2][: r % 3]  # rotate which path goes first
        for which in order:
            if which == 0:
                t1, tn = bare(1), bare(n)
                rows["bare_ttft"].append(t1)
                rows["bare_tpot"].append((tn - t1) / (n - 1))
            elif which == 1:
                res = bench.measure(prompt, 0, 0, stop=stop)
                rows["lb_ttft"].append(res.ttft_ms)
                rows["lb_tpot"].append(res.tpot_ms)
            else:
                ttft, tpot, chunks = seed_path()
                rows["seed_ttft"].append(ttft)
                rows["seed_tpot"].append(tpot)
                rows["seed_chunks"].append(chunks)
        print(
            f"round {r + 1}/{args.rounds}: bare TPOT {rows['bare_tpot'][-1]:.2f} ms, llmbench "
            f"{rows['lb_tpot'][-1]:.2f} ms, seed {rows['seed_tpot'][-1]:.2f} ms",
            file=sys.stderr,
        )

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(
        f"model {args.model} ({args.weights} weights), {lm.device}, {lm.dtype}, {lm.threads} threads, "
        f"{ids.shape[-1]}-token prompt, {n} new tokens, {args.rounds} rounds (medians)"
    )
    print(f"{'path':<10}{'TTFT ms':>10}{'TPOT ms':>10}")
    print(f"{'bare':<10}{med['bare_ttft']:>10.2f}{med['bare_tpot']:>10.2f}")
    print(f"{'llmbench':<10}{med['lb_ttft']:>10.2f}{med['lb_tpot']:>10.2f}")
    print(
        f"{'seed':<10}{med['seed_ttft']:>10.2f}{med['seed_tpot']:>10.2f}   "
        f"({med['seed_chunks']:.0f} text chunks for {n} tokens)"
    )
    print(
        f"seed vs llmbench: TTFT {med['seed_ttft'] - med['lb_ttft']:+.1f} ms, "
        f"TPOT {100 * (med['seed_tpot'] / med['lb_tpot'] - 1):+.1f}%"
    )
    print(f"llmbench/bare TPOT ratio: {med['lb_tpot'] / med['bare_tpot']:.3f}")


if __name__ == "__main__":
    main()
