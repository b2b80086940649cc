"""Does a duet pair carry its CPUs? TPOT's change with and without balancing over placements (issue 47).

A duet (``ab --duet``, the regression job) runs a pair's two requests at once, base pinned to one CPU and head to
the other, swapped pair by pair. A host that slows one CPU for a while (a neighbour on its core) adds +delta to
the log change of the pairs of one placement and -delta to the other's. Within a process of 3 pairs, 2 share a
placement, so the process's median carries delta and the interval over the processes takes it for noise.
compare now takes a duet process's TPOT change as the mean of its two placements' medians
(``llmbench.analysis.variance.balanced_median``) where the runs record each request's ``pinned_cpu``.

This script puts both estimators on the same pairs, with compare's own code: each kept ``gate_study.py`` run
(base.json and head.json) compared once with its placements hidden (the plain median per process, as before) and
once with them (balanced), under the job's gate. Runs from before ``pinned_cpu`` was recorded get it from the
plan's rule (``llmbench.drivers.ab.plan``: the k-th full pair of the plan, processes in order and each one's pairs
round by round, has base on the duet's first CPU when k is even); runs that record it are checked against that
rule. TTFT stays on the plain median (see ``balanced_median``), so only TPOT is compared.

    python benchmarks/placement.py --extract STUDY_DIR ... -o benchmarks/data/gate-study-47/placement/placement.json
    python benchmarks/placement.py benchmarks/data/gate-study-47/placement/placement.json    # the tables
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


def plan_cpus(run: Any) -> dict[tuple[int, int], int]:
    """{(prompt_index, repeat): 0 or 1} for each full pair: which of the duet's CPUs base ran on, by the plan's
    rule (see the module's text)."""
    keys = sorted((r.process or 0, r.repeat, r.prompt_index) for r in run.requests)
    return {(i, rep): k % 2 for k, (_, rep, i) in enumerate(keys)}


def _tpot(comp: Any, gate_stat: str) -> tuple[float, float, float]:
    row = comp.row("tpot_ms", gate_stat)
    return row.change_pct, row.ci_low_pct, row.ci_high_pct


def one_run(folder: Path, pct: float, args: list[str]) -> dict[str, Any] | None:
    """Both estimators' TPOT row and gate on one kept run; None when it is no duet with processes."""
    import llmbench
    from llmbench.analysis.compare import compare_runs, parse_fail_on

    base, head = (llmbench.load_run(folder / f"{s}.json") for s in ("base", "head"))
    ab = base.config.ab
    if ab is None or ab.order != "duet" or not any(r.process for r in base.requests):
        return None
    rule = plan_cpus(base)
    recorded = [r.pinned_cpu for r in base.requests]
    source, disagree = "rule", 0
    if None not in recorded:
        first = min(recorded)
        disagree = sum((r.pinned_cpu != first) != bool(rule[(r.prompt_index, r.repeat)]) for r in base.requests)
        source = "recorded"
    opts = gate_options(args)
    env = json.loads((folder / "base.json").read_text(encoding="utf-8")).get("environment") or {}
    out: dict[str, Any] = {"run": f"{folder.parent.name}/{folder.name}", "pct": pct, "cpus": source,
                           "rule_disagrees": disagree, "cpu": cpu_label(env)}  # fmt: skip
    cpus = {(r.prompt_index, r.repeat): r.pinned_cpu if source == "recorded" else rule[(r.prompt_index, r.repeat)]
            for r in base.requests}  # fmt: skip
    for estimator in ESTIMATORS:
        for side in (base, head):
            for r in side.requests:
                r.pinned_cpu = cpus[(r.prompt_index, r.repeat)] if estimator == "balanced" else None
        comp = compare_runs(base, head)
        change, low, high = _tpot(comp, opts.gate_stat)
        failed = bool(comp.gate(opts.fail_on_regression, parse_fail_on(opts.fail_on), opts.gate_stat))
        out[estimator] = {"tpot": [round(change, 4), round(low, 4), round(high, 4)],
                          "mdc": round((high - low) / 2, 4), "gate_failed": failed}  # fmt: skip
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
                    + "  ".join(f"{e} {got[e]['tpot'][0]:+.2f}% +- {got[e]['mdc']:.2f}" for e in ESTIMATORS),
                    file=sys.stderr,
                )
    return {"runs": runs}


def table(runs: list[dict[str, Any]]) -> list[str]:
    lines = ["| CPU | case | runs | estimator | gate failed | TPOT change mean, sd | printed MDC mean (min..max) | "
             "sd / (MDC / 1.96) | beyond MDC |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for cpu in sorted({str(r["cpu"]) for r in runs}):
        for pct in sorted({r["pct"] for r in runs}):
            rs = [r for r in runs if str(r["cpu"]) == cpu and r["pct"] == pct]
            for e in ESTIMATORS if rs else ():
                ch = [r[e]["tpot"][0] for r in rs]
                mdc = [r[e]["mdc"] for r in rs if math.isfinite(r[e]["mdc"])]
                sd = statistics.stdev(ch) if len(ch) > 1 else float("nan")
                calib = sd / (statistics.fmean(mdc) / Z) if mdc and len(ch) > 1 else float("nan")
                beyond = sum(abs(c - (0 if pct == 0 else statistics.fmean(ch))) > m
                             for c, m in zip(ch, [r[e]["mdc"] for r in rs], strict=True))  # fmt: skip
                lines.append(f"| {cpu} | {'A/A' if pct == 0 else f'+{pct:g}%'} | {len(rs)} | {e} | "
                             f"{rate(sum(r[e]['gate_failed'] for r in rs), len(rs))} | {statistics.fmean(ch):+.2f}%, "
                             f"sd {sd:.2f} | {statistics.fmean(mdc):.2f}% ({min(mdc):.2f}..{max(mdc):.2f}) | "
                             f"{calib:.2f} | {beyond}/{len(rs)} |")  # fmt: skip
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="+", type=Path, help="study folders (--extract) or a placement.json")
    ap.add_argument("--extract", action="store_true", help="compare each kept run both ways into -o")
    ap.add_argument("-o", "--output", type=Path, help="where --extract writes its JSON")
    a = ap.parse_args()
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
