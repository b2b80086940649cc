"""Does anything around the measurement cost measurable time? Three questions, each answered with paired,
interleaved rounds (A and B back to back, the order alternating) and a 95% bootstrap interval of B/A:

  progress   a rich progress bar on a terminal (rich's default: a refresh thread at 10 Hz; --as-shipped: drawn
             only when a request finishes, as `llmbench run` does) vs none (-q): TPOT of the same requests, on
             2 cores where a refresh thread competes with the model's 2 threads.
  eos        --ignore-eos as llmbench implements it (min_new_tokens: a processor masks EOS over the whole
             vocabulary each step) vs no EOS at all (eos_token_id=None): TPOT.
  threads    a sweep that switches torch's thread count between setups: the first request after a switch
             (1 -> 2 threads) vs the next request at the same count: TTFT and TPOT, with the switch made by
             torch.set_num_threads alone ("raw") and by the backend's apply_setup (as the sweep switches), in
             alternating rounds.

    python benchmarks/side_costs.py progress|eos|threads [--rounds 12] [--tokens 32]
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
from pathlib import Path

import numpy as np

import llmbench

ROOT = Path(__file__).resolve().parents[1]


def interval(ratios: list[float]) -> str:
    from scipy import stats

    a = np.asarray(ratios)
    ci = stats.bootstrap((a,), np.mean, method="percentile", rng=np.random.default_rng(0)).confidence_interval
    return f"{a.mean():.4f} [{ci.low:.4f}, {ci.high:.4f}] (median {np.median(a):.4f}, n={len(a)})"


def progress(lm, prompts, args) -> None:
    from rich.console import Console
    from rich.progress import Progress

    from llmbench.present.terminal import ProgressReporter

    def run(with_bar: bool) -> float:
        if not with_bar:
            return llmbench.measure(
                prompts, model=lm, max_new_tokens=args.tokens, ignore_eos=True, warmup=0
            ).summary.tpot_ms.mean
        console = Console(file=io.StringIO(), force_terminal=True, width=120)  # a terminal, as a user's
        with Progress(console=console, auto_refresh=not args.as_shipped) as bar:
            reporter = ProgressReporter(bar)
            return llmbench.measure(prompts, model=lm, max_new_tokens=args.tokens, ignore_eos=True, warmup=0,
                                    reporter=reporter).summary.tpot_ms.mean  # fmt: skip

    ratios = []
    for r in range(args.rounds):
        order = (False, True) if r % 2 == 0 else (True, False)
        got = {bar: run(bar) for bar in order}
        ratios.append(got[True] / got[False])
        print(f"round {r + 1}: -q {got[False]:.2f} ms, bar {got[True]:.2f} ms", file=sys.stderr)
    print(f"TPOT with the progress bar / without: {interval(ratios)}")


def eos(lm, prompts, args) -> None:
    import torch

    from llmbench.engines.hf.generation import TokenStamper

    n = args.tokens
    greedy = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    variants = {"min_new_tokens": {"min_new_tokens": n}, "eos_token_id=None": {"eos_token_id": None}}
    encoded = []
    for p in prompts:
        text = lm.tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                                add_generation_prompt=True)  # fmt: skip
        encoded.append(lm.tokenizer(text, return_tensors="pt", add_special_tokens=False))

    def tpot(kw: dict) -> float:
        values = []
        for enc in encoded:
            s = TokenStamper()
            with torch.inference_mode():
                lm.model.generate(**enc, max_new_tokens=n, streamer=s, **greedy, **kw)
            assert len(s.times_ns) == n
            values.append((s.times_ns[-1] - s.times_ns[0]) / 1e6 / (n - 1))
        return statistics.mean(values)

    ratios = []
    names = list(variants)
    for r in range(args.rounds):
        order = names if r % 2 == 0 else names[::-1]
        got = {v: lm.call(tpot, variants[v]) for v in order}
        ratios.append(got["min_new_tokens"] / got["eos_token_id=None"])
        print(f"round {r + 1}: " + ", ".join(f"{k} {v:.2f} ms" for k, v in got.items()), file=sys.stderr)
    print(f"TPOT with min_new_tokens / with eos_token_id=None: {interval(ratios)}")


def threads(lm, prompts, args) -> None:
    import torch

    from llmbench.backends import Request
    from llmbench.backends.inprocess import InProcessBackend

    backend = InProcessBackend(None, llmbench.RunOptions(max_new_tokens=args.tokens, ignore_eos=True), loaded=lm)
    stop = llmbench.Stop()

    def two_requests_after_switch(prompt: str, how: str) -> tuple:
        torch.set_num_threads(1)
        backend.measure_now(Request(prompt, 0, 0), stop)  # a block at 1 thread, as the setup before
        if how == "raw":
            torch.set_num_threads(2)
        else:
            backend.apply_setup()  # the sweep's switch
        first = backend.measure_now(Request(prompt, 0, 0), stop)
        second = backend.measure_now(Request(prompt, 0, 0), stop)
        return first, second

    ratios: dict[str, dict[str, list[float]]] = {h: {"ttft": [], "tpot": []} for h in ("raw", "apply_setup")}
    for r in range(args.rounds):
        for how in ("raw", "apply_setup") if r % 2 == 0 else ("apply_setup", "raw"):
            first, second = lm.call(two_requests_after_switch, prompts[r % len(prompts)], how)
            ratios[how]["ttft"].append(first.ttft_ms / second.ttft_ms)
            ratios[how]["tpot"].append(first.tpot_ms / second.tpot_ms)
            print(f"round {r + 1} {how}: after the switch TTFT {first.ttft_ms:.1f} / {second.ttft_ms:.1f} ms, TPOT "
                  f"{first.tpot_ms:.2f} / {second.tpot_ms:.2f} ms", file=sys.stderr)  # fmt: skip
    for how, v in ratios.items():
        print(f"{how}: first request after 1 -> 2 threads / the next one: TTFT {interval(v['ttft'])}; "
              f"TPOT {interval(v['tpot'])}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("question", choices=["progress", "eos", "threads"])
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--as-shipped", action="store_true", help="progress: no refresh thread, as llmbench's bar")
    args = ap.parse_args()
    lm = llmbench.load_model(weights="random", dtype=args.dtype, threads=2)
    prompts = list(llmbench.load_prompts(ROOT / "prompts" / "env_violations.txt").prompts[: args.prompts])
    print(f"random Qwen2.5-0.5B, {lm.dtype}, {lm.threads} threads, {len(prompts)} prompts, {args.tokens} tokens")
    with llmbench.frozen_gc():
        {"progress": progress, "eos": eos, "threads": threads}[args.question](lm, prompts, args)


if __name__ == "__main__":
    main()
