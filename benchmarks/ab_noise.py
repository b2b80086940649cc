"""Can the ab gate be trusted? A/A with `llmbench ab` against A/A as two sequential runs, quiet and beside a
load that comes and goes; the smallest slowdown ab flags; what the worker's pipe costs per token.

    HF_HUB_OFFLINE=1 python benchmarks/ab_noise.py [--reps 3] [--tokens 16] [--gate 5] [-o DIR]

Every run: random-weights Qwen2.5-0.5B, bfloat16, 2 threads, the 20 shipped prompts, 1 warm-up. A "burner"
is a process spinning on one core, switched on and off every 20 s. A slowed head sleeps a fixed time after
each model forward in its worker, injected through the worker's environment (benchmarks/inject). Results go
to DIR/ab_noise.json; the table is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path

import llmbench
from llmbench.backends.inprocess import InProcessBackend
from llmbench.backends.worker import WorkerBackend
from llmbench.drivers.ab import abba
from llmbench.runner.loop import execute, new_track

ROOT = Path(__file__).resolve().parents[1]
PROMPTS = ROOT / "prompts" / "env_violations.txt"
SETUP = ["--weights", "random", "--dtype", "bfloat16", "--threads", "2"]
WORKER = f"{sys.executable} -m llmbench worker {' '.join(SETUP)}"


@contextmanager
def burner(toggle_s: float | None):
    """A CPU-spinning process switched on and off every ``toggle_s`` (None: no burner)."""
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            p = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            stop.wait(toggle_s)
            p.kill()
            p.wait()
            stop.wait(toggle_s)

    t = threading.Thread(target=loop, daemon=True)
    if toggle_s:
        t.start()
    try:
        yield
    finally:
        stop.set()
        if toggle_s:
            t.join()


def cli(*args: str) -> int:
    return subprocess.run([sys.executable, "-m", "llmbench", *args], env={**_env(), "HF_HUB_OFFLINE": "1"},
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode  # fmt: skip


def _env() -> dict:
    import os

    return dict(os.environ)


def verdict(base: Path, head: Path, gate: float, code: int) -> dict:
    comp = llmbench.compare_runs(llmbench.load_run(base), llmbench.load_run(head))
    out: dict = {"exit": code, "pairs": comp.n_pairs}
    for m in ("ttft_ms", "tpot_ms"):
        row = next(r for r in comp.rows if r.metric == m and r.stat == "mean")
        out[m] = [round(row.change_pct, 2), round(row.ci_low_pct, 2), round(row.ci_high_pct, 2)]
        out[f"{m}_detectable_pct"] = round(comp.detectable_pct(m) or float("nan"), 2)
    out["gate_failed"] = bool(comp.gate(fail_on_regression=gate))
    return out


def ab_case(folder: Path, gate: float, tokens: int, head_sleep_ms: float = 0.0, toggle_s: float | None = None) -> dict:
    head = WORKER if not head_sleep_ms else (f"env PYTHONPATH={ROOT / 'benchmarks' / 'inject'} "
                                              f"LLMBENCH_INJECT_SLEEP_MS={head_sleep_ms} {WORKER}")  # fmt: skip
    with burner(toggle_s):
        code = cli("ab", str(PROMPTS), "--base", WORKER, "--head", head, "--max-new-tokens", str(tokens), "-o",
                   str(folder), "--fail-on-regression", str(gate), "-q")  # fmt: skip
    return verdict(folder / "base.json", folder / "head.json", gate, code)


def sequential_case(folder: Path, gate: float, tokens: int, toggle_s: float | None = None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    with burner(toggle_s):
        for name in ("a", "b"):
            cli("run", str(PROMPTS), *SETUP, "--max-new-tokens", str(tokens), "-o", str(folder / f"{name}.json"), "-q")
    code = cli("compare", str(folder / "a.json"), str(folder / "b.json"), "--fail-on-regression", str(gate))
    return verdict(folder / "a.json", folder / "b.json", gate, code)


async def worker_cost(tokens: int, repeats: int) -> dict:
    """The same model in this process and in a worker, measured in ABBA pairs by the one loop: TPOT apart."""
    prompts = llmbench.load_prompts(PROMPTS)
    options = llmbench.RunOptions(max_new_tokens=tokens, ignore_eos=True, warmup=1, repeats=repeats)
    lm = llmbench.load_model(weights="random", dtype="bfloat16", threads=2)
    here, there = InProcessBackend(None, options, loaded=lm), WorkerBackend(WORKER.split(), options)
    await here.start(prompts)
    await there.start(prompts)
    try:
        a, b = new_track(here, prompts, None), new_track(there, prompts, None)
        runs = await execute([a, b], abba(a, b, prompts, repeats), prompts, warmup=1)
    finally:
        await there.close()
    comp = llmbench.compare_runs(runs[0], runs[1])
    out: dict = {"pairs": comp.n_pairs}
    for stat in ("mean", "p50"):
        row = next(r for r in comp.rows if r.metric == "tpot_ms" and r.stat == stat)
        out[f"tpot_{stat}_ms"] = [round(row.base, 3), round(row.new, 3)]
        out[f"tpot_{stat}_change"] = [round(row.change_pct, 2), round(row.ci_low_pct, 2), round(row.ci_high_pct, 2)]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=16)
    ap.add_argument("--gate", type=float, default=5.0)
    ap.add_argument("--slowdowns", default="1,2.5,5", help="ms slept per forward by the slowed heads")
    ap.add_argument("--only", default="aa,burner,slow,worker")
    ap.add_argument("--worker-repeats", type=int, default=3)
    ap.add_argument("-o", "--output", type=Path, default=Path("results/ab-noise"))
    args = ap.parse_args()
    out, results = args.output, {}
    only = set(args.only.split(","))
    for rep in range(args.reps if "aa" in only else 0):
        results[f"ab A/A quiet {rep + 1}"] = ab_case(out / f"ab-quiet-{rep}", args.gate, args.tokens)
        results[f"sequential A/A quiet {rep + 1}"] = sequential_case(out / f"seq-quiet-{rep}", args.gate, args.tokens)
    for rep in range(2 if "burner" in only else 0):
        results[f"ab A/A burner 20s {rep + 1}"] = ab_case(out / f"ab-burn-{rep}", args.gate, args.tokens, toggle_s=20)
        results[f"sequential A/A burner 20s {rep + 1}"] = sequential_case(out / f"seq-burn-{rep}", args.gate,
                                                                          args.tokens, toggle_s=20)  # fmt: skip
    for ms in [float(x) for x in args.slowdowns.split(",")] if "slow" in only else []:
        for rep in range(2):
            results[f"ab head +{ms:g} ms/forward {rep + 1}"] = ab_case(out / f"ab-slow-{ms:g}-{rep}", args.gate,
                                                                       args.tokens, head_sleep_ms=ms)  # fmt: skip
    if "worker" in only:
        results["worker vs in-process"] = asyncio.run(worker_cost(args.tokens, args.worker_repeats))
    out.mkdir(parents=True, exist_ok=True)
    (out / "ab_noise.json").write_text(json.dumps(results, indent=1, default=float), encoding="utf-8")
    print(f"{'case':<34}{'exit':>5}  {'TTFT change [95% CI]':<26}{'TPOT change [95% CI]':<26}{'TPOT MDC':>9}")
    for name, r in results.items():
        if "exit" in r:
            t, p = r["ttft_ms"], r["tpot_ms"]
            print(f"{name:<34}{r['exit']:>5}  {t[0]:+6.1f}% [{t[1]:+.1f}, {t[2]:+.1f}]{'':<7}"
                  f"{p[0]:+6.1f}% [{p[1]:+.1f}, {p[2]:+.1f}]{'':<7}{r['tpot_ms_detectable_pct']:>8.1f}%")  # fmt: skip
        else:
            print(name, r)


if __name__ == "__main__":
    main()
