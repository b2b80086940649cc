"""What llmbench's stopwatch costs and what the seed's stopwatch distorts, in one process.

Same model, same prompt, interleaved rounds (so machine drift hits every path alike) of:
  bare     model.generate() with no streamer, timed from outside, on the model's own thread:
           TTFT = time of generate(max_new_tokens=1); TPOT = (T(N) - T(1)) / (N - 1)
  llmbench the request path of llmbench's run loop: the in-process backend's measure (templating and
           tokenizing on the clock, gc between requests, the stop check in every step, TokenStamper stamps in
           put()) on the model's thread. Per-run work (the calibration probes before and after a run, the
           sampler) is outside every request and not part of it.
  seed     the seed article's TextIteratorStreamer + Thread, timed on the text chunks it yields

Each round gives a paired ratio llmbench TPOT / bare TPOT; the 95% intervals of their mean and of their
median (bootstrap over rounds) say whether the stopwatch costs anything measurable. The last line is
`llmbench/bare TPOT ratio: X.XXX` (the median of the rounds' ratios).

    python benchmarks/overhead.py [--rounds 15] [--tokens 32] [--dtype bfloat16] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from threading import Thread

import llmbench
from llmbench.backends import Request
from llmbench.backends.inprocess import InProcessBackend

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--weights", default="random")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-seed", action="store_true", help="skip the seed's path (more rounds in the same time)")
    args = ap.parse_args()

    import numpy as np
    import torch
    from scipy import stats
    from transformers import TextIteratorStreamer

    lm = llmbench.load_model(args.model, weights=args.weights, device=args.device, dtype=args.dtype,
                             threads=args.threads)  # fmt: skip
    prompt = llmbench.load_prompts(ROOT / "prompts" / "env_violations.txt").prompts[0]
    n = args.tokens
    text = lm.tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False,
                                            add_generation_prompt=True)  # fmt: skip
    enc = lm.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(lm.device)
    # the generate() arguments llmbench uses for a fixed-length greedy request (--ignore-eos: EOS stops nothing),
    # so the paths differ only in what each adds
    greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None, "eos_token_id": None}

    def sync() -> None:
        if lm.device.startswith("cuda"):
            torch.cuda.synchronize()

    def bare(max_new: int) -> float:
        sync()
        t = time.perf_counter_ns()
        with torch.inference_mode():
            lm.model.generate(**enc, max_new_tokens=max_new, **greedy)
        sync()
        return (time.perf_counter_ns() - t) / 1e6

    backend = InProcessBackend(None, llmbench.RunOptions(max_new_tokens=n, ignore_eos=True, warmup=0), loaded=lm)
    stop = llmbench.Stop()  # never raised: its check runs after every token, as in a run

    def llmbench_path() -> llmbench.RequestResult:
        result = lm.call(backend.measure_now, Request(prompt, 0, 0), stop)
        assert result is not None
        return result

    def seed_path() -> tuple[float, float, int]:
        streamer = TextIteratorStreamer(lm.tokenizer, skip_prompt=True)
        t0 = time.perf_counter_ns()
        inputs = lm.tokenizer(text, return_tensors="pt", add_special_tokens=False).to(lm.device)
        th = Thread(target=lm.model.generate, kwargs={**inputs, **greedy, "max_new_tokens": n, "streamer": streamer})
        th.start()
        stamps = [time.perf_counter_ns() for chunk in streamer if chunk]
        th.join()
        ttft = (stamps[0] - t0) / 1e6
        tpot = (stamps[-1] - stamps[0]) / 1e6 / (len(stamps) - 1) if len(stamps) > 1 else float("nan")
        return ttft, tpot, len(stamps)

    rows: dict[str, list[float]] = {
        k: [] for k in ("bare_ttft", "bare_tpot", "lb_ttft", "lb_tpot", "seed_ttft", "seed_tpot", "seed_chunks")
    }
    with llmbench.frozen_gc():  # as `llmbench run` measures
        lm.call(bare, n)  # warm every path once, unmeasured
        llmbench_path()
        if not args.no_seed:
            seed_path()
        for r in range(args.rounds):
            paths = [0, 1] if args.no_seed else [0, 1, 2]
            order = paths[r % len(paths) :] + paths[: r % len(paths)]  # rotate which path goes first
            for which in order:
                if which == 0:
                    t1, tn = lm.call(bare, 1), lm.call(bare, n)
                    rows["bare_ttft"].append(t1)
                    rows["bare_tpot"].append((tn - t1) / (n - 1))
                elif which == 1:
                    res = llmbench_path()
                    rows["lb_ttft"].append(res.ttft_ms)
                    rows["lb_tpot"].append(res.tpot_ms)
                else:
                    ttft, tpot, chunks = seed_path()
                    rows["seed_ttft"].append(ttft)
                    rows["seed_tpot"].append(tpot)
                    rows["seed_chunks"].append(chunks)
            seed = f", seed {rows['seed_tpot'][-1]:.2f} ms" if rows["seed_tpot"] else ""
            print(f"round {r + 1}/{args.rounds}: bare TPOT {rows['bare_tpot'][-1]:.2f} ms, llmbench "
                  f"{rows['lb_tpot'][-1]:.2f} ms{seed}", file=sys.stderr)  # fmt: skip

    med = {k: statistics.median(v) if v else float("nan") for k, v in rows.items()}
    ratios = np.array(rows["lb_tpot"]) / np.array(rows["bare_tpot"])
    ci, ci_med = (stats.bootstrap((ratios,), f, confidence_level=0.95, method="percentile",
                                  rng=np.random.default_rng(0)).confidence_interval
                  for f in (np.mean, np.median))  # fmt: skip
    print(
        f"model {args.model} ({args.weights} weights), {lm.device}, {lm.dtype}, {lm.threads} threads, "
        f"{enc['input_ids'].shape[-1]}-token prompt, {n} new tokens, {args.rounds} rounds (medians)"
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
    print(f"llmbench/bare TPOT, mean of {len(ratios)} paired rounds: {ratios.mean():.4f}, 95% CI "
          f"[{ci.low:.4f}, {ci.high:.4f}]")  # fmt: skip
    # the median is the last line's statistic: its interval is the one to judge it by (one disturbed round
    # moves a mean of ratios by percents, the median hardly)
    print(f"llmbench/bare TPOT, median of {len(ratios)} paired rounds: {statistics.median(ratios):.4f}, 95% CI "
          f"[{ci_med.low:.4f}, {ci_med.high:.4f}]")  # fmt: skip
    print(f"llmbench/bare TPOT ratio: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
