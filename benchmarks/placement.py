"""Does a duet pair carry its CPUs? The paired medians with and without balancing over placements (issue 47).

A duet (``ab --duet``, the regression job) runs a pair's two requests at once, base pinned to one CPU and head to
the other, swapped pair by pair. A host that slows one CPU for a while (a neighbour on its core) adds +delta to
the log change of the pairs of one placement and -delta to the other's. Within a process of 3 pairs, 2 share a
placement, so the process's median carries delta and the interval over the processes takes it for noise.
compare now takes a duet process's change (its paired medians: TPOT's gaps, TTFT's p50) as the mean of its two
placements' medians of the run's clipped log ratios (``llmbench.analysis.variance.balanced_median``) where both
runs record each request's ``pinned_cpu``.

This script puts both estimators on the same pairs, with compare's own code: each kept ``gate_study.py`` run
(base.json and head.json) compared once with its placements hidden (the plain median per process, as before) and
once with them (balanced), under the job's gate. Runs from before ``pinned_cpu`` was recorded get it from the
plan's rule (``llmbench.drivers.ab.plan``: the k-th pair of a kind, full or TTFT-only, in the plan's order,
processes in turn and each one's pairs round by round, has base on the duet's first CPU when k is even); runs
that record it are checked against that rule.

    python benchmarks/placement.py --extract STUDY_DIR ... -o benchmarks/data/gate-study-47/placement/placement.json
    python benchmarks/placement.py benchmarks/data/gate-study-47/placement/placement.json    # the tables
    python benchmarks/placement.py --coverage 2000      # the balanced interval's coverage, simulated
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from gate_study import Z, cpu_label, gate_options, rate  # noqa: E402  (the study's own gate and labels)

ESTIMATORS = ("median", "balanced")


def plan_cpus(requests: list[Any]) -> dict[tuple[int, int], int]:
    """{(prompt_index, repeat): 0 or 1}: which of the duet's CPUs base ran each pair of ``requests`` on (the full
    requests, or the TTFT-only ones: each kind alternates on its own count), by the plan's rule (see the module's
    text)."""
    keys = sorted((r.process or 0, r.repeat, r.prompt_index) for r in requests)
    return {(i, rep): k % 2 for k, (_, rep, i) in enumerate(keys)}


def placements(base: Any, head: Any) -> tuple[str, int]:
    """Give every request of both runs its CPU (0 or 1, head's the other): as recorded, or by the plan's rule for
    runs from before ``pinned_cpu``. ("recorded" or "rule", the pairs whose recorded CPU the rule got wrong)."""
    recorded = [r.pinned_cpu for run in (base, head) for r in run.requests + run.ttft_requests]
    disagree = 0
    for kind in ("requests", "ttft_requests"):
        rule = plan_cpus(getattr(base, kind))
        first = min((r.pinned_cpu for r in getattr(base, kind) if r.pinned_cpu is not None), default=None)
        for side, run in enumerate((base, head)):
            for r in getattr(run, kind):
                cpu = rule[(r.prompt_index, r.repeat)] ^ side
                if None not in recorded:
                    disagree += (r.pinned_cpu != first) != bool(cpu)
                r.pinned_cpu = cpu
    return ("rule" if None in recorded else "recorded"), disagree


def one_run(folder: Path, pct: float, args: list[str]) -> dict[str, Any] | None:
    """Both estimators' TPOT (the gate's row), TTFT and gate on one kept run; None when it is no duet with
    processes."""
    import llmbench
    from llmbench.analysis.compare import compare_runs, parse_fail_on

    base, head = (llmbench.load_run(folder / f"{s}.json") for s in ("base", "head"))
    ab = base.config.ab
    if ab is None or ab.order != "duet" or not any(r.process for r in base.requests):
        return None
    source, disagree = placements(base, head)
    cpus = {id(r): r.pinned_cpu for run in (base, head) for r in run.requests + run.ttft_requests}
    opts = gate_options(args)
    env = json.loads((folder / "base.json").read_text(encoding="utf-8")).get("environment") or {}
    out: dict[str, Any] = {"run": f"{folder.parent.name}/{folder.name}", "pct": pct, "cpus": source,
                           "rule_disagrees": disagree, "cpu": cpu_label(env)}  # fmt: skip
    for estimator in ESTIMATORS:
        for run in (base, head):
            for r in run.requests + run.ttft_requests:
                r.pinned_cpu = cpus[id(r)] if estimator == "balanced" else None
        comp = compare_runs(base, head)
        tpot, ttft = (comp.row(m, st) for m, st in (("tpot_ms", opts.gate_stat), ("ttft_ms", "p50")))
        failed = bool(comp.gate(opts.fail_on_regression, parse_fail_on(opts.fail_on), opts.gate_stat))
        out[estimator] = {"gate_failed": failed}
        for name, row in (("tpot", tpot), ("ttft", ttft)):
            out[estimator][name] = [round(x, 4) for x in (row.change_pct, row.ci_low_pct, row.ci_high_pct)]
            out[estimator][f"{name}_mdc"] = round((row.ci_high_pct - row.ci_low_pct) / 2, 4)
    return out


def extract(folders: list[Path]) -> dict[str, Any]:
    runs = []
    for folder in folders:
        log = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
        for r in log["runs"]:
            run_dir = folder / f"run-{r['index']:03d}"
            if r.get("inject", "slow_pct") != "slow_pct" or not (run_dir / "head.json").is_file():
                continue
            if (got := one_run(run_dir, r["pct"], log.get("ab_args", []))) is not None:
                runs.append(got)
                print(
                    f"{got['run']}: {got['pct']:+g}%  "
                    + "  ".join(f"{e} {got[e]['tpot'][0]:+.2f}% +- {got[e]['tpot_mdc']:.2f}" for e in ESTIMATORS),
                    file=sys.stderr,
                )
    return {"runs": runs}


def _figures(changes: list[float], mdcs: list[float], pct: float) -> str:
    """``change mean, sd | MDC mean (min..max) | sd / (MDC / 1.96) | beyond MDC`` of one case's runs (beyond: a
    change further from the truth, 0 or the case's own mean for a slowed head, than its printed MDC)."""
    finite = [m for m in mdcs if math.isfinite(m)]
    sd = statistics.stdev(changes) if len(changes) > 1 else float("nan")
    calib = sd / (statistics.fmean(finite) / Z) if finite and len(changes) > 1 else float("nan")
    truth = 0.0 if pct == 0 else statistics.fmean(changes)
    beyond = sum(abs(c - truth) > m for c, m in zip(changes, mdcs, strict=True))
    return (f"{statistics.fmean(changes):+.2f}%, sd {sd:.2f} | {statistics.fmean(finite):.2f}% "
            f"({min(finite):.2f}..{max(finite):.2f}) | {calib:.2f} | {beyond}/{len(changes)}")  # fmt: skip


def table(runs: list[dict[str, Any]]) -> list[str]:
    """Per CPU, case and estimator: the gate, then TPOT's and TTFT's changes, printed MDCs and calibration."""
    lines = ["| CPU | case | runs | estimator | gate failed | TPOT change mean, sd | TPOT MDC mean (min..max) | "
             "sd / (MDC / 1.96) | beyond MDC | TTFT change mean, sd | TTFT MDC mean (min..max) | sd / (MDC / 1.96) | "
             "beyond MDC |", "|---" * 13 + "|"]  # fmt: skip
    for cpu in sorted({str(r["cpu"]) for r in runs}):
        for pct in sorted({r["pct"] for r in runs}):
            rs = [r for r in runs if str(r["cpu"]) == cpu and r["pct"] == pct]
            for e in ESTIMATORS if rs else ():
                tpot = _figures([r[e]["tpot"][0] for r in rs], [r[e]["tpot_mdc"] for r in rs], pct)
                ttft = _figures([r[e]["ttft"][0] for r in rs], [r[e]["ttft_mdc"] for r in rs], pct)
                lines.append(f"| {cpu} | {'A/A' if pct == 0 else f'+{pct:g}%'} | {len(rs)} | {e} | "
                             f"{rate(sum(r[e]['gate_failed'] for r in rs), len(rs))} | {tpot} | {ttft} |")  # fmt: skip
    return lines


def coverage(reps: int, processes: tuple[int, ...] = (2, 3, 5, 9, 12, 20)) -> list[str]:
    """How often the balanced interval holds the true change: ``llmbench.analysis.coverage``'s model of a run
    (its noises, shifts and process offsets), 3 pairs a process as the job's plan gives them, the placements
    alternating over the plan; ``reps`` data sets a cell. The plain median's interval alongside."""
    import numpy as np

    from llmbench.analysis import coverage as cov
    from llmbench.analysis.variance import CONFIDENCE, median_change

    rng = np.random.default_rng(47)
    lines = ["| noise | change | estimator | " + " | ".join(f"{n} processes" for n in processes) + " |",
             "|---" * (3 + len(processes)) + "|"]  # fmt: skip
    for noise, shift in cov.SCENARIOS:
        truth = 100 * math.expm1(cov.SHIFTS[shift])
        cells: dict[str, list[str]] = {"median": [], "balanced": []}
        for n in processes:
            held = {"median": 0, "balanced": 0}
            clusters = np.repeat(np.arange(n), 3)
            places = np.arange(3 * n) % 2
            for _ in range(reps):
                up = (
                    cov.SHIFTS[shift]
                    + cov._noise(noise, rng, 3 * n)
                    + cov.PROCESS_SD * rng.standard_normal(n)[clusters]
                )
                logs = up - cov._noise(noise, rng, 3 * n)
                for e, where in (("median", None), ("balanced", places)):
                    _, low, high = median_change(logs, clusters, 0, CONFIDENCE, where)
                    held[e] += low <= truth <= high
            for e in cells:
                cells[e].append(f"{100 * held[e] / reps:.1f}%")
        for e, row in cells.items():
            lines.append(f"| {noise} | {shift} | {e} | " + " | ".join(row) + " |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help="study folders (--extract) or a placement.json")
    ap.add_argument("--extract", action="store_true", help="compare each kept run both ways into -o")
    ap.add_argument("-o", "--output", type=Path, help="where --extract writes its JSON")
    ap.add_argument("--coverage", type=int, metavar="REPS", help="simulate the balanced interval's coverage instead")
    a = ap.parse_args()
    if a.coverage:
        print("\n".join(coverage(a.coverage)))
        return
    if not a.paths:
        ap.error("give study folders (--extract) or a placement.json, or --coverage REPS")
    if a.extract:
        if a.output is None:
            ap.error("--extract needs -o")
        data = extract(a.paths)
        a.output.parent.mkdir(parents=True, exist_ok=True)
        a.output.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        print(f"{len(data['runs'])} runs -> {a.output}", file=sys.stderr)
        runs = data["runs"]
    else:
        try:
            runs = [r for p in a.paths for r in json.loads(p.read_text(encoding="utf-8"))["runs"]]
        except (OSError, ValueError, KeyError, TypeError) as e:
            sys.exit(f"placement.py: {e}")
    disagree = sum(r["rule_disagrees"] for r in runs if r["cpus"] == "recorded")
    recorded = sum(r["cpus"] == "recorded" for r in runs)
    print(f"{len(runs)} runs; placements recorded in {recorded} (the plan's rule disagreed on {disagree} pairs), "
          f"from the rule in {len(runs) - recorded}\n")  # fmt: skip
    print("\n".join(table(runs)))


if __name__ == "__main__":
    main()
