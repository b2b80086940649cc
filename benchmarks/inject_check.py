"""Is a head slowed by LLMBENCH_INJECT_SLOW_PCT=P really P% slower? An independent check, in one process.

The regression job's model is loaded as its worker loads it (noxfile's REGRESSION_WORKER: --weights random
--dtype bfloat16 --threads 2, the default model) and generates as the worker does (the job's prompts, chat
template, greedy, EOS ignored, the token stamper). benchmarks/inject's hook is attached to the model and its
percentage flipped between generations: per P, ABBA blocks (off, on, on, off) of short generations, the Ps'
blocks shuffled within each round, so the machine's drift lands on both sides. Per-token time is taken as TPOT
is, from the streamer's stamps (perf_counter, outside the hook): (last - first) / (tokens - 1).

The hook spins P% of the forward pass, and a token is a forward plus a little more (sampling, the cache, the
streamer), so the realized slowdown per token should be P x (forward share of a token's time): both printed,
with the share and the hook's own account of what it spun.

    HF_HUB_OFFLINE=1 python benchmarks/inject_check.py [--pcts 1,2,3,5] [--rounds 2] [--token-gens 2] [--tokens 32]
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import platform
import random
import shlex
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import tomllib

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from noxfile import REGRESSION_CONFIG, REGRESSION_WORKER  # noqa: E402  (the job's own settings)

INJECT = ROOT / "benchmarks" / "inject"


def load_inject():
    """benchmarks/inject/sitecustomize.py under a name of its own (a sitecustomize may already be imported)."""
    spec = importlib.util.spec_from_file_location("llmbench_inject", INJECT / "sitecustomize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def load_job_model():
    """The job's worker's model, loaded with llmbench's own loader (its options parsed from REGRESSION_WORKER)."""
    from llmbench.engines.hf.models import load_model
    from llmbench.options import ModelOptions

    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--weights", default="pretrained")
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--threads", type=int)
    ap.add_argument("-m", "--model", default=ModelOptions.model)
    opts = ap.parse_args(REGRESSION_WORKER)
    spec = ModelOptions(model=opts.model, weights=opts.weights, dtype=opts.dtype, threads=opts.threads)
    from llmbench.engines.hf.generation import generation_thread

    return generation_thread().run(load_model, spec)


def generation(lm, inject, tokens: int, pct: float, by_token: bool) -> list[tuple[float, float, float, bool]]:
    """One generation as the worker runs it, the hook at ``pct`` (``by_token``: only for the decode steps an ABBA
    pattern over the tokens picks). Per decode step: (gap s between its stamp and the one before, its forward's
    measured s, its spin s, injected or not); the prefill's (the first) forward is left out."""
    import torch

    from llmbench.engines.chat import messages_for
    from llmbench.engines.hf.generation import StopCriterion, TokenStamper, encode_messages, generate_kwargs

    job = tomllib.loads((ROOT / REGRESSION_CONFIG).read_text(encoding="utf-8"))
    prompt = Path(ROOT / job["prompts"]["prompts"]).read_text(encoding="utf-8").splitlines()[0]
    enc = encode_messages(lm.tokenizer, messages_for(prompt, None), bool(getattr(lm.tokenizer, "chat_template", None)))
    kw = generate_kwargs(tokens, ignore_eos=True)
    # per forward (0: the prefill's): injected or not
    on = [False] + [(i - 1) % 4 in (1, 2) if by_token else pct > 0 for i in range(1, tokens)]
    if by_token:
        seen = [0]

        def next_forward(_t, _value) -> None:  # a token stamped: the next forward's setting
            seen[0] += 1
            inject.set_slow_pct(pct if seen[0] < tokens and on[seen[0]] else 0)

        stamper = TokenStamper(on_token=next_forward)
    else:
        stamper = TokenStamper()
    gc.collect()
    trace: list = []
    inject.slow["trace"] = trace
    inject.set_slow_pct(0 if by_token else pct)
    gc.disable()
    try:
        with torch.inference_mode():
            lm.model.generate(**enc, streamer=stamper, stopping_criteria=[StopCriterion(lambda: False)], **kw)
    finally:
        gc.enable()
        inject.slow["trace"] = None
        inject.set_slow_pct(0)
    t = stamper.times_ns
    return [((t[i] - t[i - 1]) / 1e9, *trace[i], on[i]) for i in range(1, len(t))]


def token_pairs(steps: list) -> list[tuple]:
    """A by-token generation's ABBA pairs: (off gap, on gap, off forward, on forward, on spin)."""
    out = []
    for k in range(0, len(steps) - 3, 4):
        a, b, c, d = steps[k : k + 4]  # off, on, on, off
        assert not a[3] and b[3] and c[3] and not d[3]
        out += [(a[0], b[0], a[1], b[1], b[2]), (d[0], c[0], d[1], c[1], c[2])]
    return out


def per_token(steps: list) -> tuple[float, float, float]:
    """A generation's means per decode step: gap, forward, spin."""
    n = len(steps)
    return sum(s[0] for s in steps) / n, sum(s[1] for s in steps) / n, sum(s[2] for s in steps) / n


def measure(lm, inject, pcts: list[float], rounds: int, token_gens: int, tokens: int, seed: int) -> dict:
    """Per (level, P): [(off per-token s, on per-token s, off forward, on forward, on spin)] over its ABBA pairs:
    level "generation" (off, on, on, off generations) and "token" (off, on, on, off decode steps in one)."""
    rng, t0 = random.Random(seed), time.perf_counter()
    out: dict[tuple[str, float], list] = {(lv, p): [] for lv in ("generation", "token") for p in pcts}
    for r in range(rounds):
        order = pcts[:]
        rng.shuffle(order)
        for p in order:
            g = [per_token(lm.call(generation, lm, inject, tokens, p if on else 0, False))
                 for on in (False, True, True, False)]  # fmt: skip
            out["generation", p] += [(a[0], b[0], a[1], b[1], b[2]) for a, b in ((g[0], g[1]), (g[3], g[2]))]
            for _ in range(token_gens):
                out["token", p] += token_pairs(lm.call(generation, lm, inject, tokens, p, True))
        print(f"round {r + 1}/{rounds} done, {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return out


def median_ci(x: list[float], seed: int, n: int = 4000) -> tuple[float, float, float]:
    """The median and its 95% percentile-bootstrap interval."""
    a = np.asarray(x)
    rng = np.random.default_rng(seed)
    meds = np.median(rng.choice(a, size=(n, len(a)), replace=True), axis=1)
    return float(np.median(a)), float(np.percentile(meds, 2.5)), float(np.percentile(meds, 97.5))


def table(data: dict, seed: int) -> list[str]:
    lines = ["| interleaved by | P nominal | pairs | per-token slowdown measured: median [95% CI] | forward share of a "
             "token | expected P x share | hook spun / off token | forward itself, on vs off | off per-token ms |",
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for (level, p), rows in data.items():
        ratio = [(on / off - 1) * 100 for off, on, *_ in rows]
        med, lo, hi = median_ci(ratio, seed)
        share = statistics.median(f_off / off for off, _, f_off, _, _ in rows)
        spun = statistics.median(spin / off * 100 for off, _, _, _, spin in rows)
        fwd = statistics.median((f_on / f_off - 1) * 100 for _, _, f_off, f_on, _ in rows)
        lines.append(f"| {level} | +{p:g}% | {len(rows)} | {med:+.2f}% [{lo:+.2f}, {hi:+.2f}] | {share:.3f} | "
                     f"+{p * share:.2f}% | +{spun:.2f}% | {fwd:+.2f}% | "
                     f"{statistics.median(off for off, *_ in rows) * 1000:.1f} |")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pcts", default="1,2,3,5", help="slowdowns to check, percent, comma list")
    ap.add_argument("--rounds", type=int, default=2, help="rounds: per P an ABBA block of generations in each")
    ap.add_argument("--token-gens", type=int, default=2, help="per P and round: generations interleaved by token")
    ap.add_argument("--tokens", type=int, default=32, help="new tokens per generation")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    pcts = [float(x) for x in args.pcts.split(",") if x.strip()]
    print(f"`HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE', '')} python {shlex.join(sys.argv)}`\n")
    inject = load_inject()
    t0 = time.perf_counter()
    lm = load_job_model()
    inject.attach(lm.model)
    print(f"model {lm.name} ({lm.weights} weights, {lm.dtype}, {lm.threads} threads, {lm.device}); "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; "
          f"{args.tokens} tokens per generation, {args.rounds} rounds, {args.token_gens} by-token generations "
          "per P and round\n")  # fmt: skip
    for _ in range(2):  # warm-up
        lm.call(generation, lm, inject, args.tokens, 0, False)
    data = measure(lm, inject, pcts, args.rounds, args.token_gens, args.tokens, args.seed)
    print("\n".join(table(data, args.seed)))
    print(f"\nslowdown: on / off per-token time - 1 of each pair, the median over pairs (bootstrap 95% interval); "
          "generation pairs: whole generations off, on, on, off (a head as the job sees it); token pairs: decode "
          "steps off, on, on, off within one generation (adjacent tokens: far less drift). forward share: the "
          "forward's own time (the hook's stamps) over the off token's time; hook spun: what it busy-waited per "
          f"token over the off token's time. Load average {os.getloadavg()[0]:.1f} at the end; "
          f"{time.perf_counter() - t0:.0f} s in all")  # fmt: skip


if __name__ == "__main__":
    main()
