"""What would a fork server buy the regression job? (issue 47, item 4's first lever, measured before it is built)

The job's budget (``ab --duet --budget 5m``) spends about 15 s on each worker process after the first: its start
(import torch, load the model: ~6 s from the file cache), a switch, and its warm-up pair. A fork server would load
once and fork each process from a warmed image. This probe measures, on one CPU with one thread (a duet side), in
interleaved rounds (the order alternating):

  exec   ``llmbench worker`` started as ab starts it (WorkerBackend: spawn to ready and prepared), then 3 requests
  fork   a prototype: this process loads the model as the worker does and runs one warm-up request, then forks;
         each child re-randomises what a new process would (a heap padding of random size, the weights copied to
         fresh memory) and runs the same 3 requests

and prints, per mode: the start (spawn or fork to ready), the first request, the warm requests (2nd and 3rd), and
the first request's extra time over a warm one (what a per-process warm-up pays for). Then what the job's planner
would do with those costs, priced as the study's EPYC runs were (one duet pair ~ one request here).

    HF_HUB_OFFLINE=1 python benchmarks/fork_probe.py [--rounds 6] [--tokens 32] [-o fork_probe.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CPU = 0
MODES = {"exec": "exec", "fork": "fork", "fork-shared": "fork, weights shared", "exec-overlap": "exec, next starting",
         "exec-short-warmup": "exec, 1-token warm-up"}  # fmt: skip


def setup(tokens: int) -> tuple[Any, Any, Any]:
    """(model spec, run options, prompts): the regression job's worker (random-weight Qwen2.5-0.5B-Instruct,
    bfloat16, one thread) and prompts."""
    from llmbench.options import RunOptions, model_options_of
    from llmbench.workloads.prompts import load_prompts

    spec = model_options_of({"weights": "random", "dtype": "bfloat16", "threads": 1})
    return spec, RunOptions(max_new_tokens=tokens, ignore_eos=True), load_prompts(ROOT / "prompts/env_violations.txt")


def timed_requests(measure: Any, prompts: Any) -> list[dict[str, float]]:
    """The last prompt three times (as the budget's pilot sends it): wall seconds and TPOT of each."""
    out = []
    for r in range(3):
        req = prompts.request(len(prompts.prompts) - 1, r, cpu=CPU)
        t = time.perf_counter()
        res = measure(req)
        out.append({"s": round(time.perf_counter() - t, 4), "tpot_ms": res.tpot_ms, "ttft_ms": res.ttft_ms})
    return out


async def exec_trial(
    spec: Any, options: Any, prompts: Any, overlap: bool = False, short_warmup: bool = False
) -> dict[str, Any]:  # fmt: skip
    """``llmbench worker`` started as ab starts it, then 3 requests (``overlap``: while the next worker starts on
    the same CPU, as it would in a 2-CPU duet, where every CPU measures; ``short_warmup``: after a warm-up of the
    same prompt cut to one output token, ab's TTFT-only request, the prefill alone; timed apart)."""
    import dataclasses

    from llmbench.backends import worker_main
    from llmbench.backends.worker import WorkerBackend
    from llmbench.core.process import Stop

    w = WorkerBackend(worker_main.command(spec), options)
    t = time.perf_counter()
    await w.start(prompts)
    start_s = time.perf_counter() - t
    stop, reqs, extra = Stop(), [], {}
    if short_warmup:
        warm = dataclasses.replace(prompts.request(len(prompts.prompts) - 1, -1, cpu=CPU), ttft_only=True)
        t = time.perf_counter()
        assert await w.measure(warm, stop, 0.0) is not None
        extra["warmup_s"] = round(time.perf_counter() - t, 4)
    nxt = WorkerBackend(["taskset", "-c", str(CPU), *worker_main.command(spec)], options) if overlap else None
    starting = asyncio.ensure_future(nxt.start(prompts)) if nxt is not None else None
    try:
        for r in range(3):
            req = prompts.request(len(prompts.prompts) - 1, r, cpu=CPU)
            t = time.perf_counter()
            res = await w.measure(req, stop, 0.0)
            assert res is not None
            reqs.append({"s": round(time.perf_counter() - t, 4), "tpot_ms": res.tpot_ms, "ttft_ms": res.ttft_ms})
    finally:
        await w.close()
        if starting is not None and nxt is not None:
            await starting
            await nxt.close()
    return {"start_s": round(start_s, 4), **extra, "requests": reqs}


def fork_trial(backend: Any, loaded: Any, prompts: Any, copy: bool = True) -> dict[str, Any]:
    """Fork this (loaded, warmed) process; the child re-randomises (``copy``: the weights too), measures and
    reports on a pipe."""
    read, write = os.pipe()
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:  # the child: never returns into the parent's code
        code = 1
        try:
            os.close(read)
            import torch

            from llmbench.core.process import pin_to_cpu
            from llmbench.engines.hf import generation

            generation._thread = None  # the parent's generation thread did not survive the fork
            pin_to_cpu(CPU)
            pad = bytearray(random.randrange(1, 1 << 20))  # shifts where later small allocations land
            c = time.perf_counter()
            with torch.no_grad():
                for p in loaded.model.parameters() if copy else ():  # once per Parameter: tied weights stay tied
                    p.data = p.data.clone()
            clone_s = time.perf_counter() - c
            start_s = time.perf_counter() - t
            thread = generation.generation_thread()
            reqs = timed_requests(lambda req: thread.run(backend.measure_now, req), prompts)
            msg = {"start_s": round(start_s, 4), "clone_s": round(clone_s, 4), "pad": len(pad), "requests": reqs}
            os.write(write, json.dumps(msg).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    _, status = os.waitpid(pid, 0)
    if status != 0 or not data:
        raise SystemExit(f"the forked child failed (wait status {status})")
    return json.loads(data)


def summary(trials: list[dict[str, Any]]) -> dict[str, float]:
    first = [t["requests"][0]["s"] for t in trials]
    warm = [statistics.fmean([r["s"] for r in t["requests"][1:]]) for t in trials]
    extra = [100 * (f / w - 1) for f, w in zip(first, warm, strict=True)]
    warmups = [t["warmup_s"] for t in trials if "warmup_s" in t]
    return {"start_s": statistics.median(t["start_s"] for t in trials), "first_s": statistics.median(first),
            "warmup_s": statistics.median(warmups) if warmups else None,
            "warm_s": statistics.median(warm), "first_extra_pct": statistics.median(extra),
            "first_extra_pct_min": min(extra), "first_extra_pct_max": max(extra)}  # fmt: skip


def planned(start_s: float, warmup_s: float, pair_s: float, warmup: int) -> dict[str, Any]:
    """The job's planner (llmbench.drivers.ab_budget.best_design) with these costs, priced as the study's runs
    were (33 s spent before planning: the study's pilots took 30.6-38.7 s; a TTFT-only pair 0.45 of a pair), and
    the MDC it would print if a pair's noise were the study's median (s_w 2.3%, s_b 0). The planner fills the room
    with full pairs, the last round partly (before 2026-12-05's change it bought whole rounds only: the results
    kept in benchmarks/data/gate-study-47/levers show both)."""
    from llmbench.analysis.variance import projected_mdc_pct
    from llmbench.drivers.ab_budget import PRIORS, Costs, best_design

    prior = PRIORS["duet"]
    costs = Costs(start_s=start_s, warmup_s=warmup_s, pair_s=pair_s, ttft_pair_s=0.45 * pair_s)
    c = best_design(300, 33, costs, 20, warmup, prior_tpot=prior["tpot"], prior_ttft=prior["ttft"])
    mdc = projected_mdc_pct(0.0, 0.023**2, c.processes, c.pairs / c.processes)
    return {"processes": c.processes, "pairs": c.pairs, "ttft_pairs": c.ttft_pairs, "mdc_tpot_pct": round(mdc, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=6, help="trials of each mode, interleaved")
    ap.add_argument("--tokens", type=int, default=32, help="output tokens a request (the job's 32)")
    ap.add_argument("--overlap", action="store_true", help="also: exec while the next worker starts on its CPU")
    ap.add_argument("--modes", default="exec,fork,fork-shared",
                    help=f"the modes, comma-separated, of: {', '.join(MODES)}")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, help="write every trial here as JSON")
    a = ap.parse_args()
    if not 1 <= a.rounds <= 100 or not 2 <= a.tokens <= 4096:
        sys.exit("fork_probe: --rounds 1-100 and --tokens 2-4096")
    keys = [m.strip() for m in a.modes.split(",") if m.strip()] + (["exec-overlap"] if a.overlap else [])
    if not keys or any(m not in MODES for m in keys):
        sys.exit(f"fork_probe: --modes: a comma-separated list of {', '.join(MODES)}")
    modes = tuple(MODES[m] for m in dict.fromkeys(keys))
    if a.output is not None and (a.output.exists() or not a.output.parent.is_dir()):
        sys.exit(f"fork_probe: -o {a.output}: exists already, or its folder does not (nothing is overwritten)")
    from llmbench.backends.inprocess import InProcessBackend
    from llmbench.core.process import pin_to_cpu
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    spec, options, prompts = setup(a.tokens)
    backend = loaded = None
    if any(m.startswith("fork") for m in modes):  # the fork server: loaded and warmed once, in this process
        thread = generation_thread()
        loaded = thread.run(models.load_model, spec)
        backend = InProcessBackend(spec, options, loaded=loaded)
        thread.run(backend.start_now, prompts)
        pin_to_cpu(CPU)
        thread.run(backend.measure_now, prompts.request(len(prompts.prompts) - 1, -1))
    trials: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    for k in range(a.rounds):
        for mode in modes if k % 2 == 0 else modes[::-1]:
            if mode.startswith("exec"):
                short = mode == MODES["exec-short-warmup"]
                r = asyncio.run(exec_trial(spec, options, prompts, mode == MODES["exec-overlap"], short))
            else:
                r = fork_trial(backend, loaded, prompts, copy=mode == "fork")
            trials[mode].append(r)
            print(
                f"round {k} {mode}: start {r['start_s']:.2f} s (clone {r.get('clone_s', 0):.2f} s, warm-up "
                f"{r.get('warmup_s', 0):.2f} s), requests "
                f"{', '.join(format(q['s'], '.2f') for q in r['requests'])} s",
                file=sys.stderr,
                flush=True,
            )
    out: dict[str, Any] = {"trials": trials, "summary": {m: summary(t) for m, t in trials.items()}}
    s = out["summary"]
    # a duet pair is both sides' request at once on their own CPUs: about one request's wall time
    # a warm-up costs a first request, or the short one's own time where the mode had one
    out["planned"] = {
        f"{m}, warm-up {'kept' if w else 'none'}": planned(x["start_s"], x["warmup_s"] or x["first_s"], x["warm_s"], w)
        for m, x in s.items()
        for w in (1, 0)
    }
    print("| mode | start s | first request s | warm request s | first's extra (min..max) |\n|---|---|---|---|---|")
    for m, x in s.items():
        print(
            f"| {m} | {x['start_s']:.2f} | {x['first_s']:.2f} | {x['warm_s']:.2f} | {x['first_extra_pct']:+.1f}% "
            f"({x['first_extra_pct_min']:+.1f}..{x['first_extra_pct_max']:+.1f}) |"
        )
    print("\n| costs | planner's design | MDC TPOT at s_w 2.3% |\n|---|---|---|")
    for name, p in out["planned"].items():  # "exec, warm-up kept" is the job as it runs
        print(f"| {name} | {p['processes']} processes, {p['pairs']} full pairs, {p['ttft_pairs']} TTFT pairs | "
              f"{p['mdc_tpot_pct']:.2f}% |")  # fmt: skip
    if a.output:
        a.output.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
