"""How many full pairs should a process get? The gate study's own pairs, regrouped (issue 47).

``ab`` takes a process's change as the median of its pairs and the interval over the processes (Student t, N - 1
degrees of freedom). A median resists an outlier pair only from 3 pairs on (of 2 it is their mean), and the
planner (``llmbench.drivers.ab_budget.best_design``) keeps at least ``MIN_PAIRS_PER_PROCESS`` a process. This
script asks what that floor does to the MDC the job prints, on pairs a real machine gave:

  1. ``--extract STUDY_DIR ... -o pairs.json``: from ``gate_study.py`` folders that still hold each run's
     base.json and head.json, every pair's log change in percent (TPOT and TTFT of the full pairs, TTFT of the
     TTFT-only pairs) and the costs the run's budget measured (``config.ab.budget_plan``). A slowed head's
     pairs are centred on their median, so every run counts as an A/A one.
  2. ``pairs.json --floors 2,3,4``: for each run and floor, the design the planner chooses with that run's own
     costs, then that design's MDC for TPOT and TTFT, drawn from the run's own pairs (with replacement, dealt
     round the processes as ``ab``'s plan deals them; 300 draws). The draws put no difference between
     processes (s_b = 0, as the studies measured it: a median of 0 on both CPUs), which is what makes fewer,
     longer processes look free; the planner still prices s_b with its prior.

    python benchmarks/regroup.py --extract results/gate-study-47/fresh-runner-xeon ... -o pairs.json
    python benchmarks/regroup.py benchmarks/data/gate-study-47/regroup/pairs.json --floors 2,3,4
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
from pathlib import Path
from typing import Any


def _changes(base: dict, head: dict, kind: str, metric: str) -> list[float]:
    """100 * ln(head / base) of ``metric`` for each pair of ``kind`` (requests or ttft_requests)."""
    key = lambda r: (r["process"], r["prompt_index"], r["repeat"])  # noqa: E731
    other = {key(r): r for r in head.get(kind) or []}
    out = []
    for r in sorted(base.get(kind) or [], key=key):
        h = other.get(key(r))
        if h is not None and r.get(metric) and h.get(metric):
            out.append(round(100 * math.log(h[metric] / r[metric]), 4))
    return out


def extract(folders: list[Path]) -> dict[str, Any]:
    """Every kept run's pair changes and budget costs, centred per run (see the module's text)."""
    runs = []
    for folder in folders:
        for run in sorted(folder.glob("run-*")):
            if not (run / "base.json").is_file() or not (run / "head.json").is_file():
                continue
            base, head = (json.loads((run / f"{s}.json").read_text(encoding="utf-8")) for s in ("base", "head"))
            plan = ((base.get("config") or {}).get("ab") or {}).get("budget_plan")
            tpot, ttft = _changes(base, head, "requests", "tpot_ms"), _changes(base, head, "requests", "ttft_ms")
            short = _changes(base, head, "ttft_requests", "ttft_ms")
            if not plan or len(tpot) != len(ttft) or len(tpot) < 2:  # not a budgeted run, or no pairs to deal
                continue
            mt, mf = statistics.median(tpot), statistics.median(ttft + short)
            runs.append({"run": f"{folder.name}/{run.name}", "cpu": (base.get("environment") or {}).get("cpu_model"),
                         "costs": {k: plan[k] for k in ("start_s", "pair_s", "ttft_pair_s", "spent_s")},
                         "tpot": [round(x - mt, 4) for x in tpot],
                         "ttft": [round(x - mf, 4) for x in ttft],
                         "ttft_only": [round(x - mf, 4) for x in short]})  # fmt: skip
    return {"runs": runs}


def _mdc(groups: list[list[float]]) -> float:
    from scipy import stats

    changes = [statistics.median(g) for g in groups]
    n = len(changes)
    return float(stats.t.ppf(0.975, n - 1)) * statistics.stdev(changes) / math.sqrt(n)


def regrouped(run: dict[str, Any], floor: int, rng: random.Random, draws: int = 300) -> dict[str, Any]:
    """The planner's design for ``run``'s costs with at least ``floor`` full pairs a process, under the job's
    settings (a duet, 300 s, 20 prompts, one warm-up), and its mean MDC (TPOT, TTFT) over ``draws`` draws of the
    run's own pairs."""
    import llmbench.drivers.ab_budget as budget

    c = run["costs"]
    # a later process's warm-up priced as the job prices it now: its prefill, a TTFT-only pair
    costs = budget.Costs(start_s=c["start_s"], warmup_s=c["ttft_pair_s"], pair_s=c["pair_s"],
                         ttft_pair_s=c["ttft_pair_s"])  # fmt: skip
    prior = budget.PRIORS["duet"]
    d = budget.best_design(300, c["spent_s"], costs, 20, 1, 32, prior["tpot"], prior["ttft"], min_pairs=floor)
    full = list(zip(run["tpot"], run["ttft"], strict=True))
    short = run["ttft_only"] or run["ttft"]
    tpot, ttft = [], []
    for _ in range(draws):
        gt: list[list[float]] = [[] for _ in range(d.processes)]
        gf: list[list[float]] = [[] for _ in range(d.processes)]
        for k in range(d.pairs):
            t, f = rng.choice(full)
            gt[k % d.processes].append(t)
            gf[k % d.processes].append(f)
        for k in range(d.ttft_pairs):
            gf[k % d.processes].append(rng.choice(short))
        tpot.append(_mdc(gt))
        ttft.append(_mdc(gf))
    return {"processes": d.processes, "pairs": d.pairs, "ttft_pairs": d.ttft_pairs,
            "tpot_mdc_pct": statistics.mean(tpot), "ttft_mdc_pct": statistics.mean(ttft)}  # fmt: skip


def report(data: dict[str, Any], floors: list[int], seed: int = 2) -> str:
    """A markdown table: per floor, the designs chosen and the MDCs (mean, max over runs)."""
    rng = random.Random(seed)
    lines = ["| at least (full pairs a process) | runs | processes | full pairs | TPOT MDC mean (max) | "
             "TTFT MDC mean (max) |", "|---|---|---|---|---|---|"]  # fmt: skip
    for floor in floors:
        rs = [regrouped(r, floor, rng) for r in data["runs"]]
        tp, tf = [r["tpot_mdc_pct"] for r in rs], [r["ttft_mdc_pct"] for r in rs]
        procs, pairs = [r["processes"] for r in rs], [r["pairs"] for r in rs]
        lines.append(
            f"| {floor} | {len(rs)} | {min(procs)}-{max(procs)} | {min(pairs)}-{max(pairs)} | "
            f"{statistics.mean(tp):.2f}% ({max(tp):.2f}%) | {statistics.mean(tf):.2f}% ({max(tf):.2f}%) |"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="study folders (--extract) or one pairs.json")
    ap.add_argument("--extract", action="store_true", help="read the study folders, write -o")
    ap.add_argument("-o", "--output", type=Path, help="--extract: the pairs.json to write (never overwritten)")
    ap.add_argument("--floors", default="2,3,4", help="the least full pairs a process, comma-separated")
    a = ap.parse_args()
    if a.extract:
        if a.output is None or a.output.exists() or not a.output.parent.is_dir():
            sys.exit("regroup: --extract needs -o FILE, a new file in an existing folder")
        try:
            data = extract(a.paths)
        except (OSError, ValueError, KeyError, TypeError) as e:  # ValueError: a file that is not JSON
            sys.exit(f"regroup: a run's base.json or head.json can't be read: {type(e).__name__}: {e}")
        if not data["runs"]:
            sys.exit("regroup: no run folder with base.json, head.json and a budget plan")
        a.output.write_text(json.dumps(data) + "\n", encoding="utf-8")
        print(f"{len(data['runs'])} runs -> {a.output}")
        return
    try:
        floors = [int(x) for x in a.floors.split(",") if x.strip()]
        data = json.loads(a.paths[0].read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        sys.exit(f"regroup: {e}")
    if not floors or any(not 1 <= f <= 20 for f in floors) or len(a.paths) != 1:
        sys.exit("regroup: one pairs.json and --floors of 1-20")
    try:
        if not isinstance(data, dict) or not data.get("runs"):
            raise ValueError("no runs")
        print(report(data, floors))
    except (KeyError, TypeError, ValueError) as e:
        sys.exit(f"regroup: {a.paths[0]} is not what --extract writes ({type(e).__name__}: {e})")


if __name__ == "__main__":
    main()
