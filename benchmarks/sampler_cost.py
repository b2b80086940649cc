"""What the machine sampler costs the tokens it watches: TPOT with the sampler and without it, interleaved.

The sampler (llmbench.machine.probe.Sampler) wakes every 0.5 s on a daemon thread and reads the machine (psutil; on a
CUDA run also the card through NVML). It competes with generation for the GIL and a core, so its cost shows in
TPOT if anywhere. Arms, in one process on one loaded model, alternating ABBA round by round so drift lands on
both alike:
  off      the run loop with a sampler that never samples (the only change; patched here, for this comparison)
  on       the run loop as shipped (0.5 s interval)
  on-10x   a 0.05 s interval: ten times the sampling, to show the cost where the default's is below the noise
The rounds' requests, paired by (prompt, round), are compared as ``ab --gate-stat gaps`` compares: TPOT from
per-token gaps paired by position (robust to a burst on this shared machine), and the median TPOT beside it;
the change is the sampler's cost (target: within 1%). Beside it, what the sampler's thread itself used: its CPU time
(``machine.summary.sampler_cpu_ms``, recorded in every run) as a share of the run's wall time, a bound on what
it can take from the tokens. On a noisy machine the TPOT interval of the default arm is wider than 1%: the
on-10x arm then bounds it (ten times the sampling; its cost divided by ten is the default's).

    HF_HUB_OFFLINE=1 python benchmarks/sampler_cost.py [--rounds 12] [--prompts 4] [--tokens 32] [--threads 2]
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import llmbench
from llmbench.analysis.compare import compare_runs
from llmbench.machine import probe as machine

ROOT = Path(__file__).resolve().parents[1]
Shipped = machine.Sampler


class Never(Shipped):
    """A sampler that starts and stops but never samples (no thread)."""

    def start(self) -> None:
        self._span = []

    def stop(self) -> None:
        pass


def every(interval: float) -> type:
    class Sampler(Shipped):
        def __init__(self, gpu: object = None) -> None:
            super().__init__(interval, gpu)

    return Sampler


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=12)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    lm = llmbench.load_model(weights="random", device="cpu", dtype=a.dtype, threads=a.threads)
    prompts = llmbench.load_prompts(ROOT / "prompts" / "env_violations.txt").prompts[: a.prompts]
    arms = {"off": Never, "on": Shipped, "on-10x": every(0.05)}
    tpot: dict[str, list[float]] = {k: [] for k in arms}
    share: dict[str, list[float]] = {k: [] for k in arms}
    samples: dict[str, list[int]] = {k: [] for k in arms}
    requests: dict[str, list] = {k: [] for k in arms}  # every round's requests, repeat = the round
    runs = {}
    for r in range(a.rounds):
        order = list(arms) if r % 2 == 0 else list(reversed(arms))  # ABBA
        for arm in order:
            machine.Sampler = arms[arm]  # the loop builds machine.Sampler(gpu=...) per run
            run = llmbench.measure(prompts, model=lm, max_new_tokens=a.tokens, ignore_eos=True, warmup=1)
            runs[arm] = run
            requests[arm] += [x.model_copy(update={"repeat": r}) for x in run.requests]
            tpot[arm].append(statistics.fmean(x.tpot_ms for x in run.requests if x.tpot_ms is not None))
            samples[arm].append(len(run.machine.samples) if run.machine else 0)
            summary = run.machine.summary if run.machine else None
            if summary is not None and summary.sampler_cpu_pct_of_wall is not None:
                share[arm].append(summary.sampler_cpu_pct_of_wall)
        print(f"round {r + 1}/{a.rounds}: " + ", ".join(f"{k} {v[-1]:.3f} ms" for k, v in tpot.items()), flush=True)
    machine.Sampler = Shipped
    # all rounds as one run per arm (pairs: prompt x round), compared as `ab --gate-stat gaps` compares: the
    # per-token gaps paired by position, so a burst that hits a few tokens of a run moves nothing
    pooled = {k: runs[k].model_copy(update={"requests": v}) for k, v in requests.items()}
    print(f"\nrandom Qwen2.5-0.5B, {a.dtype}, {a.threads} threads, {a.prompts} prompts x {a.tokens} tokens, "
          f"{a.rounds} rounds (ABBA); TPOT mean, off: {statistics.fmean(tpot['off']):.3f} ms")  # fmt: skip
    print("| arm | samples per run | sampler CPU, % of wall | TPOT vs off: gaps paired by position [95% CI] | "
          "TPOT vs off: p50 [95% CI] |")  # fmt: skip
    print("|---|---|---|---|---|")
    for arm in ("on", "on-10x"):
        comp = compare_runs(pooled["off"], pooled[arm])
        gaps, p50 = comp.row("tpot_ms", "gaps"), comp.row("tpot_ms", "p50")
        cpu = f"{statistics.fmean(share[arm]):.3f}" if share[arm] else "-"
        print(f"| {arm} | {statistics.fmean(samples[arm]):.1f} | {cpu} | {gaps.change_pct:+.2f}% "
              f"[{gaps.ci_low_pct:+.2f}, {gaps.ci_high_pct:+.2f}] | {p50.change_pct:+.2f}% [{p50.ci_low_pct:+.2f}, "
              f"{p50.ci_high_pct:+.2f}] |")  # fmt: skip


if __name__ == "__main__":
    main()
