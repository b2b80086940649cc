"""The cold start per engine (issue 36, deliverable 6): what a person waits before the first answer, from a fresh
``llmbench run`` process each time, phase by phase (the run JSON's ``load``, ``load.phases``: see docs/metrics.md
"The cold start").

For each engine, ``--trials`` runs with its conversion NOT cached (a fresh ``XDG_CACHE_HOME``: the engine's
files are converted again; the random weights' own cache, ``LLMBENCH_CACHE``, is kept, so what is measured is the
engine's conversion and load, not building random weights) and ``--trials`` with it cached (the same
``XDG_CACHE_HOME`` again), in alternating order. One prompt, one warm-up, a few tokens: the requests are not
the point, the first one after loading is.

    HF_HUB_OFFLINE=1 python -u benchmarks/cold_start.py -o results/cold-start [--engines transformers,llama.cpp,...]

Writes OUT/cold_start.json (every run's figures) and prints a markdown table of medians per engine and cache state.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES = ("transformers", "llama.cpp", "openvino", "onnxruntime")
FIELDS = ("ready_s", "before_load_s", "locate_s", "config_tokenizer_s", "model_code_s", "files_s", "engine_import_s",
          "weights_s", "build_s", "load_s", "convert_s", "warmup_s", "first_ttft_ms", "ttft_p50_ms")  # fmt: skip


def one(engine: str, args: argparse.Namespace, xdg: Path, out: Path) -> dict:
    """One fresh process: ``llmbench run`` of one prompt on ``engine``; its cold start from the JSON."""
    from llmbench.results.metrics import cold_start
    from llmbench.results.storage import load_run

    prompt = out.parent / "prompt.txt"
    if not prompt.exists():
        prompt.write_text("How should an inspector document an illegal waste discharge?\n", encoding="utf-8")
    cmd = [sys.executable, "-m", "llmbench", "run", str(prompt), "-m", args.model, "--weights", args.weights,
           "--engine", engine, "--threads", str(args.threads), "--max-new-tokens", "8", "--warmup", "1",
           "--repeats", "3", "-o", str(out), "-q"]  # fmt: skip
    if engine == "transformers":
        cmd += ["--device", "cpu", "--dtype", args.dtype]
    env = {**os.environ, "XDG_CACHE_HOME": str(xdg), "LLMBENCH_CACHE": args.weights_cache, "HF_HUB_OFFLINE": "1"}
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        return {"engine": engine, "error": (proc.stderr.strip().splitlines() or ["?"])[-1], "wall_s": round(wall, 2)}
    run = load_run(out)
    c = cold_start(run) or {}
    return {"engine": engine, "wall_s": round(wall, 2), "convert_cached": c.get("convert_cached"),
            **{k: c.get(k) for k in FIELDS}}  # fmt: skip


def table(rows: list[dict]) -> str:
    """Medians per (engine, cached): the markdown the README shows."""
    head = ("| engine | conversion | runs | ready s | before load s | load s (weights / build) | convert s | "
            "warm-up s | first TTFT ms | TTFT p50 ms | process wall s |")  # fmt: skip
    lines = [head, "|---" * (head.count("|") - 1) + "|"]
    for engine in dict.fromkeys(r["engine"] for r in rows):
        for cached in (False, True):
            rs = [r for r in rows if r["engine"] == engine and r.get("cached") == cached and "error" not in r]
            if not rs:
                continue

            def med(key: str, rs: list[dict] = rs) -> str:
                vals = [r[key] for r in rs if r.get(key) is not None]
                return f"{statistics.median(vals):.2f}" if vals else "-"

            split = f"{med('load_s')} ({med('weights_s')} / {med('build_s')})"
            state = "cached" if cached else "converted"
            if engine == "transformers":  # nothing to convert: the caches are the tokenizer's and --dtype auto's
                state = "caches kept" if cached else "caches fresh"
            lines.append(f"| {engine} | {state} | {len(rs)} | {med('ready_s')} | {med('before_load_s')} | {split} | "
                         f"{med('convert_s')} | {med('warmup_s')} | {med('first_ttft_ms')} | {med('ttft_p50_ms')} | "
                         f"{med('wall_s')} |")  # fmt: skip
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--engines", default=",".join(ENGINES))
    ap.add_argument("--model", default="Qwen/Qwen2.5-0.5B-Instruct")
    ap.add_argument("--weights", default="random")
    ap.add_argument("--dtype", default="bfloat16", help="transformers' dtype")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--trials", type=int, default=2)
    ap.add_argument("--weights-cache", default=str(Path.home() / ".cache" / "llmbench"),
                    help="LLMBENCH_CACHE for the random weights (kept across runs)")  # fmt: skip
    args = ap.parse_args()
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=False)
    rows: list[dict] = []
    for engine in args.engines.split(","):
        xdg = out / f"xdg-{engine}"
        for trial in range(args.trials):
            for cached in (False, True) if trial % 2 == 0 else (True, False):
                if not cached:
                    shutil.rmtree(xdg, ignore_errors=True)
                    xdg.mkdir()
                elif not xdg.exists():  # the cached arm first: convert once, untimed
                    xdg.mkdir()
                    one(engine, args, xdg, out / f"prime-{engine}.json")
                row = {**one(engine, args, xdg, out / f"{engine}-{trial}-{'cached' if cached else 'fresh'}.json"),
                       "cached": cached, "trial": trial}  # fmt: skip
                rows.append(row)
                print(json.dumps(row), flush=True)
                (out / "cold_start.json").write_text(json.dumps({"argv": sys.argv, "runs": rows}, indent=1),
                                                     encoding="utf-8")  # fmt: skip
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
