"""Can the regression job's gate be trusted on this machine? Its exact `llmbench ab` run many times: A/A runs (how
often unchanged code fails, how far A/A changes spread, how often they exceed the printed minimum detectable
change) and heads slowed by a known share per token (how often the gate catches them), with the minutes each
run took. Extends ab_noise.py (its helpers); the job's settings come from noxfile.py.

    HF_HUB_OFFLINE=1 python benchmarks/gate_study.py [--aa 20] [--slow 3,5,10] [--per-slow 5] [-o DIR]
                     [--ab-args "--processes 4 ..."]    (extra ab options: the job's settings under study)
                     [--arm NAME:AA:PER_SLOW:AB_ARGS ...] (several settings, their runs alternating; later
                                                          options win: "--max-new-tokens 32" overrides the job's)
    python benchmarks/gate_study.py --report DIR [DIR ...]  (the table again, pooled over the folders' runs of one
                                                          setting, each run's gate re-decided from its base/head
                                                          at the job's gate now: noxfile's REGRESSION_GATE)

A slowed head sleeps a fixed time after each model forward (benchmarks/inject, through its worker's
environment): sleep = PCT% of the TPOT measured by a short calibration run first. Every run's figures go to
DIR/gate_study.json (appended as they come, so an interrupted study keeps its runs); the summary is printed as a
markdown table.
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import llmbench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from noxfile import REGRESSION_AB, REGRESSION_GATE, REGRESSION_WORKER  # noqa: E402  (the job's own settings)

WORKER = shlex.join([sys.executable, "-m", "llmbench", "worker", *REGRESSION_WORKER])
INJECT = ROOT / "benchmarks" / "inject"


def calibrate_tpot_ms(out: Path) -> float:
    """The job's TPOT on this machine now: a short run of the same setup."""
    path = out / "calibration.json"
    if not path.exists():
        subprocess.run([sys.executable, "-m", "llmbench", "run", str(ROOT / REGRESSION_AB[0]), *REGRESSION_WORKER,
                        "--max-new-tokens", "16", "--ignore-eos", "-o", str(path), "-q"], check=True,
                       cwd=ROOT)  # fmt: skip
    return float(llmbench.load_run(path).summary.tpot_ms.p50)


def one_ab(folder: Path, head_sleep_ms: float, ab_args: list[str]) -> dict:
    head = WORKER if not head_sleep_ms else (f"env PYTHONPATH={INJECT} LLMBENCH_INJECT_SLEEP_MS={head_sleep_ms:.3f} "
                                              f"{WORKER}")  # fmt: skip
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "llmbench", "ab", *REGRESSION_AB[0:1], *REGRESSION_AB[1:],
                           "--base", WORKER, "--head", head, *job_gate(ab_args), *ab_args, "-o", str(folder), "-q",
                           "--format", "json"], capture_output=True, text=True, cwd=ROOT)  # fmt: skip
    minutes = (time.perf_counter() - t) / 60
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ab failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    comp = json.loads(proc.stdout)[0]
    out = {"exit": proc.returncode, "minutes": round(minutes, 2), "pairs": comp["n_pairs"], "sleep_ms": head_sleep_ms}
    stat = gate_options(ab_args).gate_stat  # the gate's own statistic
    for row in comp["rows"]:
        want = stat if row["metric"] == "tpot_ms" else ("p50" if stat == "gaps" else stat)
        if row["stat"] == want and row["metric"] in ("ttft_ms", "tpot_ms"):
            out[row["metric"]] = [
                round(row["change_pct"], 3),
                round(row["ci_low_pct"], 3),
                round(row["ci_high_pct"], 3),
            ]
            out[f"{row['metric']}_mdc"] = round((row["ci_high_pct"] - row["ci_low_pct"]) / 2, 3)
    out["gate_failed"] = proc.returncode == 1
    out["stderr_tail"] = proc.stderr.strip().splitlines()[-3:]
    return out


def summarize(runs: list[dict], slow: list[float]) -> list[str]:
    lines = ["| case | runs | gate failed | TPOT change (the gate's statistic): mean, sd, min..max | A/A change beyond "
             "printed MDC (TTFT / TPOT) | mean MDC (TTFT / TPOT) | minutes per run |",
             "|---|---|---|---|---|---|---|"]  # fmt: skip
    for pct in [0.0, *slow]:
        rs = [r for r in runs if r["pct"] == pct]
        if not rs:
            continue
        tp = [r["tpot_ms"][0] for r in rs]
        # only an A/A knows its true change (0); a slowed head's true change is its measured mean, not the nominal
        beyond = (f"{sum(abs(r['ttft_ms'][0]) > r['ttft_ms_mdc'] for r in rs)} / "
                  f"{sum(abs(r['tpot_ms'][0]) > r['tpot_ms_mdc'] for r in rs)}") if pct == 0 else "-"  # fmt: skip
        sd = statistics.stdev(tp) if len(tp) > 1 else 0.0
        name = "A/A" if pct == 0 else f"head +{pct:g}% per token"
        lines.append(
            f"| {name} | {len(rs)} | {sum(r['gate_failed'] for r in rs)} | {statistics.mean(tp):+.2f}%, {sd:.2f}, "
            f"{min(tp):+.2f}..{max(tp):+.2f} | {beyond} | "
            f"{statistics.mean(r['ttft_ms_mdc'] for r in rs):.2f}% / "
            f"{statistics.mean(r['tpot_ms_mdc'] for r in rs):.2f}% | {statistics.mean(r['minutes'] for r in rs):.1f} |"
        )  # fmt: skip
    return lines


def job_gate(ab_args: list[str]) -> list[str]:
    """The job's gate options (REGRESSION_GATE), unless the arm sets thresholds of its own: then the arm's gate
    alone (ab would add the job's --fail-on thresholds to an arm's --fail-on-regression, not replace them)."""
    own = any(a in ("--fail-on-regression", "--fail-on") for a in ab_args)
    return [] if own else REGRESSION_GATE


def gate_options(ab_args: list[str]) -> argparse.Namespace:
    """The gate a run had (:func:`job_gate`, then the arm's own options, the later winning as in ab)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--fail-on-regression", type=float)
    ap.add_argument("--fail-on", action="append")
    ap.add_argument("--gate-stat", default="p50")
    return ap.parse_known_args([*job_gate(ab_args), *ab_args])[0]


def regate(folder: Path, ab_args: list[str]) -> bool:
    """Would the job's gate now (or the arm's own, see :func:`job_gate`) fail this kept run?
    Re-decided from its base.json/head.json with compare's own code, so runs made under an older threshold pool."""
    from llmbench.analysis.compare import compare_runs, parse_fail_on

    opts = gate_options(ab_args)
    comp = compare_runs(llmbench.load_run(folder / "base.json"), llmbench.load_run(folder / "head.json"))
    return bool(comp.gate(opts.fail_on_regression, parse_fail_on(opts.fail_on), opts.gate_stat))


def report(folders: list[Path], slow: list[float]) -> None:
    """The summary table over several study folders' runs (one setting), each run's gate re-decided: the job's
    gate now (REGRESSION_GATE), overridden by the arm's own gate options where it had them."""
    runs: list[dict] = []
    for folder in folders:
        log = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
        args = log.get("ab_args", [])  # the arm's own gate options win over the job's, as they did in its runs
        runs += [{**r, "gate_failed": regate(folder / f"run-{r['index']:03d}", args)} for r in log["runs"]]
        print(f"{folder}: {len(log['runs'])} runs, calibration TPOT {log['tpot_ms_calibration']:.2f} ms, "
              f"ab args {' '.join(args) or '(the job as it is)'}")  # fmt: skip
    pcts = sorted({r["pct"] for r in runs} - {0.0})
    print(f"\njob's gate now: {' '.join(REGRESSION_GATE)} (an arm with thresholds of its own keeps its own gate)\n")
    print("\n".join(summarize(runs, pcts or slow)))


def study_order(aa: int, slow: list[float], per_slow: int) -> list[float]:
    """The cases interleaved (an A/A, a slowed head, ...), so the machine's drift over hours lands on all."""
    order: list[float] = []
    aas = [0.0] * aa
    sl = [p for _ in range(per_slow) for p in slow]
    while aas or sl:
        if aas:
            order.append(aas.pop())
        if sl:
            order.append(sl.pop(0))
    return order


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa", type=int, default=20)
    ap.add_argument("--slow", default="3,5,10", help="percent slower per token, comma list")
    ap.add_argument("--per-slow", type=int, default=5)
    ap.add_argument("--ab-args", default="", help="extra `llmbench ab` options (the settings under study)")
    ap.add_argument("--arm", action="append", default=[], metavar="NAME:AA:PER_SLOW:AB_ARGS",
                    help="several settings studied side by side, their runs alternating (repeatable); "
                         "replaces --aa/--per-slow/--ab-args")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, default=Path("results/gate-study"))
    ap.add_argument("--report", type=Path, nargs="+", metavar="DIR", help="print the pooled table of kept studies")
    args = ap.parse_args()
    slow = [float(x) for x in args.slow.split(",") if x.strip()]
    if args.report:
        report(args.report, slow)
        return
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=True)
    arms = [a.split(":", 3) for a in args.arm] or [["", str(args.aa), str(args.per_slow), args.ab_args]]
    tpot = calibrate_tpot_ms(out)
    state = []
    for name, aa, per_slow, extra in arms:
        folder = out / name if name else out
        folder.mkdir(parents=True, exist_ok=True)
        log = folder / "gate_study.json"
        runs: list[dict] = json.loads(log.read_text(encoding="utf-8"))["runs"] if log.exists() else []
        state.append((name, folder, log, runs, shlex.split(extra), study_order(int(aa), slow, int(per_slow))))
    # the arms alternate run by run (the order flipped each round), so they share the machine's day
    k = 0
    while any(len(runs) < len(order) for _, _, _, runs, _, order in state):
        turn = state if k % 2 == 0 else state[::-1]
        k += 1
        for name, folder, log, runs, ab_args, order in turn:
            if len(runs) >= len(order):
                continue
            i, pct = len(runs), order[len(runs)]
            r = one_ab(folder / f"run-{i:03d}", pct / 100 * tpot, ab_args)
            r.update(pct=pct, index=i)
            runs.append(r)
            log.write_text(json.dumps({"tpot_ms_calibration": tpot, "ab_args": ab_args, "runs": runs}, indent=1),
                           encoding="utf-8")  # fmt: skip
            print(f"{name or 'study'} {i + 1}/{len(order)} +{pct:g}%: TPOT p50 {r['tpot_ms'][0]:+.2f}% "
                  f"[{r['tpot_ms'][1]:+.2f}, {r['tpot_ms'][2]:+.2f}], TTFT {r['ttft_ms'][0]:+.2f}%, exit {r['exit']}, "
                  f"{r['minutes']} min", flush=True)  # fmt: skip
    print(f"\ncalibration TPOT {tpot:.2f} ms")
    for name, _, _, runs, ab_args, _ in state:
        print(f"\n{name or 'study'}: ab args {' '.join(ab_args) or '(the job as it is)'}\n")
        print("\n".join(summarize(runs, slow)))


if __name__ == "__main__":
    main()
