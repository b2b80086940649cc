"""Can the regression job's gate be trusted on this machine? Its exact `llmbench ab` run many times: A/A runs (how
often unchanged code fails, row by row how often a change is called significant, whether the printed minimum
detectable change matches the A/A changes' spread) and heads slowed by a known share (how often the gate catches
them, and the change measured at that size), with the minutes each run took. Extends ab_noise.py; the job's
settings come from noxfile.py.

    HF_HUB_OFFLINE=1 python benchmarks/gate_study.py [--aa 20] [--slow 1,2,3,5] [--per-slow 5] [-o DIR]
                     [--drop-caches]                      (root: each run from an empty page cache, a fresh
                                                          runner's first job)
                     [--ab-args "--duet --budget 5m ..."]  (extra ab options: the settings under study; an option
                                                          the job sets is replaced, not repeated: "--processes 1")
                     [--arm NAME:AA:PER_SLOW:AB_ARGS ...] (several settings, their runs alternating)
    python benchmarks/gate_study.py --false-alarms DIR [DIR ...]  (A/A false alarms per CPU and pooled, Wilson)
    python benchmarks/gate_study.py --report DIR [DIR ...]  (the tables again, pooled over the folders' runs of
                                                          one setting, each run's gate re-decided from its
                                                          base/head at the job's gate now: its config's [gate])

A slowed head busy-waits after each model forward for PCT% of that forward's own measured time
(benchmarks/inject's LLMBENCH_INJECT_SLOW_PCT, through its worker's environment; benchmarks/inject_check.py
checks that this makes a token PCT x (forward share, ~0.99) slower), and logs what it measured and spun
(LLMBENCH_INJECT_LOG, one file per head worker in the run's folder). Studies from before it slowed heads by a
sleep of PCT% of a calibration TPOT, which measured far more than nominal: --report pools their A/A runs but
skips their slowed heads. Every run's figures, every comparison row included, go to DIR/gate_study.json
(appended as they come, so an interrupted study keeps its runs); the summary is printed as markdown tables.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

import tomllib

import llmbench

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from noxfile import REGRESSION_CONFIG, REGRESSION_WORKER  # noqa: E402  (the job's own settings)

JOB = tomllib.loads((ROOT / REGRESSION_CONFIG).read_text(encoding="utf-8"))  # the job's committed ab config

WORKER = shlex.join([sys.executable, "-m", "llmbench", "worker", *REGRESSION_WORKER])
INJECT = ROOT / "benchmarks" / "inject"
GATED = ("ttft_ms", "tpot_ms")  # the job's thresholds (E2E follows from them)
Z = 1.959964


# ------------------------------------------------------------------------------------------------- one run


def job_ab(ab_args: list[str], folder: Path) -> list[str]:
    """The job's config (``--config benchmarks/regression.toml``; the arm's flags, given after it, override it). An
    arm with thresholds of its own gets the config without its [gate] (written into ``folder``): ab would add the
    job's --fail-on thresholds to an arm's --fail-on-regression, not replace them."""
    if not own_gate(ab_args):
        return ["--config", str(ROOT / REGRESSION_CONFIG)]
    import tomli_w

    path = folder / "job-without-gate.toml"
    path.write_text(tomli_w.dumps({k: v for k, v in JOB.items() if k != "gate"}), encoding="utf-8")
    return ["--config", str(path)]


def own_gate(ab_args: list[str]) -> bool:
    return any(a in ("--fail-on-regression", "--fail-on") for a in ab_args)


def job_gate(ab_args: list[str]) -> list[str]:
    """The job's gate (the config's [gate]) as ab's options, unless the arm sets thresholds of its own."""
    if own_gate(ab_args):
        return []
    gate = JOB.get("gate", {})
    return [a for t in gate.get("fail_on", []) for a in ("--fail-on", t)] + (
        ["--gate-stat", gate["gate_stat"]] if "gate_stat" in gate else []
    )


def gate_options(ab_args: list[str]) -> argparse.Namespace:
    """The gate a run had (:func:`job_gate`, then the arm's own options, the later winning as in ab)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--fail-on-regression", type=float)
    ap.add_argument("--fail-on", action="append")
    ap.add_argument("--gate-stat", default="p50")
    return ap.parse_known_args([*job_gate(ab_args), *ab_args])[0]


def gated_stat(metric: str, gate_stat: str) -> str:
    """The row the gate reads for ``metric``: gaps is TPOT's statistic, the others are then gated on p50."""
    return gate_stat if metric == "tpot_ms" or gate_stat != "gaps" else "p50"


def worker(ab_args: list[str]) -> str:
    """The job's worker; a duet's runs one thread (each side is pinned to one CPU)."""
    if "--duet" not in ab_args:
        return WORKER
    args = list(REGRESSION_WORKER)
    args[args.index("--threads") + 1] = "1"
    return shlex.join([sys.executable, "-m", "llmbench", "worker", *args])


INJECT_KIND = "spin"  # --inject-kind: how the study's slowed heads spend their extra time (spin or memory)


def head_command(folder: Path, pct: float, ab_args: list[str]) -> str:
    if not pct:
        return worker(ab_args)
    log = folder / "inject-head-{pid}.json"  # one a head worker (--processes N starts N)
    env = shlex.join([f"PYTHONPATH={INJECT}", f"LLMBENCH_INJECT_SLOW_PCT={pct:g}", f"LLMBENCH_INJECT_LOG={log}",
                      f"LLMBENCH_INJECT_SLOW_KIND={INJECT_KIND}"])  # fmt: skip
    return f"env {env} {worker(ab_args)}"


def injected(folder: Path) -> dict:
    """The head workers' logs summed: forwards, their measured time and the time spun (share in percent)."""
    logs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("inject-head-*.json"))]
    fwd, spun = sum(x["forward_s"] for x in logs), sum(x["injected_s"] for x in logs)
    return {"workers": len(logs), "forwards": sum(x["forwards"] for x in logs), "forward_s": round(fwd, 3),
            "injected_s": round(spun, 3), "injected_pct": round(100 * spun / fwd, 3) if fwd else None}  # fmt: skip


def compact_rows(rows: list[dict]) -> list[dict]:
    keep = ("metric", "stat", "base", "new", "change_pct", "ci_low_pct", "ci_high_pct", "significant", "verdict",
            "speaks")  # fmt: skip
    return [{k: row[k] for k in keep if k in row} for row in rows]


def gated_figures(rows: list[dict], gate_stat: str) -> dict:
    """{metric: [change, low, high], metric_mdc: half the interval's width} of the rows the gate reads."""
    out: dict = {}
    for row in rows:
        if row["metric"] in GATED and row["stat"] == gated_stat(row["metric"], gate_stat):
            out[row["metric"]] = [round(row[k], 3) for k in ("change_pct", "ci_low_pct", "ci_high_pct")]
            out[f"{row['metric']}_mdc"] = round((row["ci_high_pct"] - row["ci_low_pct"]) / 2, 3)
    return out


def cpu_label(environment: dict) -> str | None:
    """The CPU a run measured on, as the tables group it: its model and the widest bfloat16 path it has (the
    job's dtype: emulated on AVX2, native with AVX512-BF16), from the run JSON's ``environment``."""
    model, flags = environment.get("cpu_model"), set(environment.get("cpu_flags") or ())
    if not model:
        return None
    isa = "AVX512-BF16" if "avx512_bf16" in flags else "AVX2" if "avx2" in flags else "no AVX2"
    return f"{model}, {isa}"


DROP_CACHES = False  # --drop-caches: each run starts from an empty page cache, as a fresh runner's job does


def drop_caches() -> None:
    """Empty the page cache (written pages first), so the run's workers read Python, torch and the weights from
    storage, as on a freshly booted runner; root only."""
    subprocess.run(["sync"], check=True)
    try:
        Path("/proc/sys/vm/drop_caches").write_text("3\n", encoding="ascii")
    except OSError as e:
        raise SystemExit(f"--drop-caches: cannot write /proc/sys/vm/drop_caches ({e.strerror}): run as root") from e


def one_ab(folder: Path, pct: float, ab_args: list[str]) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    if DROP_CACHES:
        drop_caches()
    t = time.perf_counter()
    cmd = [sys.executable, "-m", "llmbench", "ab", *job_ab(ab_args, folder), "--base", worker(ab_args), "--head",
           head_command(folder, pct, ab_args), *ab_args, "-o", str(folder), "-q", "--format", "json"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    minutes = (time.perf_counter() - t) / 60
    if proc.returncode not in (0, 1):
        raise SystemExit(f"ab failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    comp = json.loads(proc.stdout)[0]
    rows = compact_rows(comp["rows"])
    out = {"exit": proc.returncode, "minutes": round(minutes, 2), "pairs": comp["n_pairs"], "inject": "slow_pct",
           "inject_kind": INJECT_KIND, "rows": rows,
           **gated_figures(rows, gate_options(ab_args).gate_stat)}  # fmt: skip
    out["gate_failed"] = proc.returncode == 1
    base = json.loads((folder / "base.json").read_text(encoding="utf-8"))
    out["cpu"] = cpu_label(base.get("environment") or {})
    design = base["config"]
    out["design"] = {k: design["ab"].get(k) for k in ("order", "processes", "ttft_pairs", "budget_s", "full_pairs")}
    out["design"]["rounds"] = design.get("repeats")
    out["cold_cache"] = DROP_CACHES
    out["budget_plan"] = design["ab"].get("budget_plan")
    out["variance"] = comp.get("variance")
    out["gate"] = [c for c in comp.get("gate", []) if c.get("regression")]
    if pct:
        out["injected"] = injected(folder)
    out["stderr_tail"] = proc.stderr.strip().splitlines()[-3:]
    return out


# ------------------------------------------------------------------------------------------------- the tables


def wilson(k: int, n: int) -> tuple[float, float]:
    """The Wilson 95% interval of a rate of k in n, in percent (0 of 20: 0 to 16%)."""
    if not n:
        return math.nan, math.nan
    p, z2 = k / n, Z * Z
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), Z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return 100 * max(0.0, centre - half), 100 * min(1.0, centre + half)


def rate(k: int, n: int) -> str:
    lo, hi = wilson(k, n)
    return f"{k}/{n} = {100 * k / n:.0f}% [{lo:.0f}, {hi:.0f}]" if n else "-"


def mean_sd(xs: list[float]) -> str:
    if not xs:
        return "-"
    sd = f", sd {statistics.stdev(xs):.2f}" if len(xs) > 1 else ""
    return f"{statistics.fmean(xs):+.2f}%{sd}"


def gate_table(runs: list[dict]) -> list[str]:
    """Per case: the gate's verdicts (false alarms for A/A, detection for a slowed head) with a 95% interval, the
    change measured (a slowed head's true size, as the job sees it), the injected share, MDC and minutes."""
    lines = ["| case | runs | gate failed: rate [Wilson 95%] | TPOT change (gate's stat): mean, sd | TTFT change: "
             "mean, sd | injected / forward time | printed MDC TTFT / TPOT (mean) | minutes per run |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for pct, kind in sorted({(r["pct"], r.get("inject_kind", "spin") if r["pct"] else "") for r in runs}):
        rs = [r for r in runs if r["pct"] == pct and (not pct or r.get("inject_kind", "spin") == kind)]
        how = "" if kind == "spin" else f", {kind}"
        name = "A/A (false alarms)" if pct == 0 else f"head +{pct:g}% of each forward{how} (detection)"
        shares = [r["injected"]["injected_pct"] for r in rs if (r.get("injected") or {}).get("injected_pct")]
        share = f"{statistics.fmean(shares):.2f}%" if shares else "-"
        mdc = " / ".join(f"{statistics.fmean(v):.2f}%" if (v := [r[f'{m}_mdc'] for r in rs if f'{m}_mdc' in r])
                         else "-" for m in GATED)  # fmt: skip
        lines.append(f"| {name} | {len(rs)} | {rate(sum(r['gate_failed'] for r in rs), len(rs))} | "
                     f"{mean_sd([r['tpot_ms'][0] for r in rs if 'tpot_ms' in r])} | "
                     f"{mean_sd([r['ttft_ms'][0] for r in rs if 'ttft_ms' in r])} | {share} | {mdc} | "
                     f"{statistics.fmean(r['minutes'] for r in rs):.1f} |")  # fmt: skip
    return lines


def honesty_table(aa: list[dict]) -> list[str]:
    """Is the printed interval honest? Over A/A runs (true change 0): the sd of the gated changes against the sd
    the printed MDC implies (MDC / 1.96), and how often a change lies beyond its MDC (about 5% if honest)."""
    lines = ["| metric (gated row) | A/A runs | sd of A/A changes | mean printed MDC | MDC / 1.96 | sd / (MDC / 1.96) "
             "| beyond printed MDC [Wilson 95%] | MDC min..max |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m in GATED:
        rs = [r for r in aa if m in r and math.isfinite(r[f"{m}_mdc"])]
        if len(rs) < 2:
            continue
        sd, mdc = statistics.stdev(r[m][0] for r in rs), statistics.fmean(r[f"{m}_mdc"] for r in rs)
        beyond = sum(abs(r[m][0]) > r[f"{m}_mdc"] for r in rs)
        lines.append(f"| {m} | {len(rs)} | {sd:.2f}% | {mdc:.2f}% | {mdc / Z:.2f}% | {sd / (mdc / Z):.2f} | "
                     f"{rate(beyond, len(rs))} | {min(r[f'{m}_mdc'] for r in rs):.2f}.."
                     f"{max(r[f'{m}_mdc'] for r in rs):.2f}% |")  # fmt: skip
    return lines


def row_table(aa: list[dict]) -> list[str]:
    """Every row of the comparison over the A/A runs: how often it was called significant (each one a false
    verdict: nothing changed). ``speaks``: rows compare prints as information only, with no verdict."""
    with_rows = [r for r in aa if r.get("rows")]
    counts: dict[tuple[str, str], list] = {}
    has_speaks = any("speaks" in row for r in with_rows for row in r["rows"])
    for r in with_rows:
        for row in r["rows"]:
            c = counts.setdefault((row["metric"], row["stat"]), [0, 0, 0])
            c[0] += 1
            c[1] += bool(row["significant"])
            c[2] += bool(row.get("speaks", True))
    head = "| metric | stat | " + ("speaks | " if has_speaks else "") + "A/A runs | significant | rate [Wilson 95%] |"
    rule = "|---|---|" + "---|" * (4 if has_speaks else 3)
    lines = [f"A/A runs with rows: {len(with_rows)} of {len(aa)}\n", head, rule]
    for (metric, stat), (n, sig, speaks) in counts.items():
        sp = ("yes" if speaks == n else "no" if not speaks else f"{speaks} of {n}") if has_speaks else None
        lines.append(f"| {metric} | {stat} | " + (f"{sp} | " if sp else "") + f"{n} | {sig} | {rate(sig, n)} |")
    return lines


def case_name(pct: float) -> str:
    return "A/A" if pct == 0 else f"+{pct:g}%"


def design_table(runs: list[dict]) -> list[str]:
    """What --budget chose and where the noise was (compare's variance components), run by run."""
    lines = ["| run | case | order | processes | full pairs | TTFT-only pairs | pairs a process (least) | first start "
             "(MB from storage) -> start priced | minutes | TPOT s_b / s_w per pair | TTFT s_b / s_w per pair |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in runs:
        d, v, plan = r.get("design") or {}, r.get("variance") or {}, r.get("budget_plan") or {}
        start = "-"
        if plan:
            read = plan.get("first_start_read_mb")
            start = (f"{plan['first_start_s']:.1f} s ({'?' if read is None else f'{read:.0f}'} MB) -> "
                     f"{plan['start_s']:.1f} s")  # fmt: skip

        def comp(m: str, v: dict = v) -> str:
            x = v.get(m)
            return f"{x['sd_between_processes_pct']:.1f}% / {x['sd_within_process_pct']:.1f}%" if x else "-"

        cells = [r.get("index", "-"), case_name(r["pct"]), d.get("order", "-"), d.get("processes", "-"),
                 r.get("pairs", "-"), d.get("ttft_pairs", "-"), plan.get("pairs_per_process", "-"), start,
                 r["minutes"], comp("tpot_ms"), comp("ttft_ms")]  # fmt: skip
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    return lines


PROJECTION_BAND = 0.25  # issue 62: a run's printed MDC within +-25% of the projection ab printed before measuring


def projection_table(runs: list[dict]) -> list[str]:
    """Did the projection come true? Per gated metric, over the runs whose plan printed one: the printed MDC over
    the projected (median, range), how many fell within +-25%, the targets the plan aimed at and how many runs
    printed an MDC within them, and what the calibration chose (issue 62)."""
    planned = [r for r in runs if (r.get("budget_plan") or {}).get("projected_mdc_tpot_pct")]
    if not planned:
        return ["no run printed a projection"]
    lines = ["| metric (gated row) | runs | printed / projected: median (min..max) | within +-25% [Wilson 95%] | "
             "projected (mean) | printed (mean) | target | printed within target [Wilson 95%] |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for m, key in (("tpot_ms", "tpot"), ("ttft_ms", "ttft")):
        rs = [r for r in planned if math.isfinite(r.get(f"{m}_mdc", math.nan))]
        if not rs:
            continue
        proj = [r["budget_plan"][f"projected_mdc_{key}_pct"] for r in rs]
        printed = [r[f"{m}_mdc"] for r in rs]
        ratio = [a / b for a, b in zip(printed, proj, strict=True)]
        within = sum(abs(x - 1) <= PROJECTION_BAND for x in ratio)
        targets = [(r["budget_plan"].get("targets_pct") or {}).get(key) for r in rs]
        hit = sum(t is not None and p <= t for p, t in zip(printed, targets, strict=True))
        target = ", ".join(f"{t:g}%" for t in sorted({t for t in targets if t is not None})) or "-"
        lines.append(f"| {m} | {len(rs)} | {statistics.median(ratio):.2f} ({min(ratio):.2f}..{max(ratio):.2f}) | "
                     f"{rate(within, len(rs))} | {statistics.fmean(proj):.2f}% | {statistics.fmean(printed):.2f}% | "
                     f"{target} | {rate(hit, len(rs))} |")  # fmt: skip
    chosen: dict[str, int] = {}
    for r in planned:
        cal = r["budget_plan"].get("calibration")
        if cal:
            s = cal["setup"]
            q = "" if s["quantize"] == "none" else "+" + s["quantize"]
            label = f"{s['dtype']}{q}, {s['threads']} thread(s), {cal['max_new_tokens']} tokens"
            chosen[label] = chosen.get(label, 0) + 1
    if chosen:
        spent = [r["budget_plan"]["calibration"]["spent_s"] for r in planned if r["budget_plan"].get("calibration")]
        lines += ["", "calibration chose: " + "; ".join(f"{k} ({v} runs)" for k, v in chosen.items()) +
                  f"; it took {statistics.fmean(spent):.0f} s a run ({min(spent):.0f}..{max(spent):.0f})"]  # fmt: skip
    return lines


def summarize(runs: list[dict]) -> list[str]:
    aa = [r for r in runs if r["pct"] == 0]
    return ["### The gate", "", *gate_table(runs), "", "### The printed MDC against the A/A spread", "",
            *honesty_table(aa), "", "### The MDC projected before measuring against the MDC printed", "",
            *projection_table(runs), "",
            "### Every comparison row over the A/A runs (significant = a false verdict)", "",
            *row_table(aa), "", "### The design each run chose, and where its noise was", "",
            *design_table(runs)]  # fmt: skip


# ------------------------------------------------------------------------------------------------- --report


def regated(folder: Path, ab_args: list[str]) -> tuple[bool, list[dict]] | None:
    """Would the job's gate now (or the arm's own, see :func:`job_gate`) fail this kept run, and its rows as
    compare computes them now? Re-decided from its base.json/head.json with compare's own code, so runs made
    under an older threshold (or before rows were kept) pool; None when the run's files are gone."""
    from llmbench.analysis.compare import compare_runs, parse_fail_on

    if not (folder / "head.json").exists():
        return None
    opts = gate_options(ab_args)
    comp = compare_runs(llmbench.load_run(folder / "base.json"), llmbench.load_run(folder / "head.json"))
    rows = compact_rows([dataclasses.asdict(row) for row in comp.rows])
    return bool(comp.gate(opts.fail_on_regression, parse_fail_on(opts.fail_on), opts.gate_stat)), rows


def read_folder(folder: Path) -> tuple[list[str], list[dict], list[str]]:
    """A study folder's ab args, its comparable runs (gates re-decided) and what was skipped, said in words."""
    log = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
    args = log.get("ab_args", [])  # the arm's own gate options win over the job's, as they did in its runs
    kept, sleep, gone, rebuilt = [], [], 0, 0
    for r in log["runs"]:
        if r["pct"] and r.get("inject") != "slow_pct":  # a sleep-based head: its size was not its nominal
            sleep.append(r)
            continue
        run_dir = folder / f"run-{r['index']:03d}"
        if not r.get("cpu") and (run_dir / "base.json").exists():
            r = {**r, "cpu": cpu_label(json.loads((run_dir / "base.json").read_text(encoding="utf-8"))
                                       .get("environment") or {})}  # fmt: skip
        again = regated(run_dir, args)
        if again is None:
            gone += 1
        else:
            rebuilt += not r.get("rows")
            r = {**r, "gate_failed": again[0], "rows": r.get("rows") or again[1]}
        kept.append({**r, **gated_figures(r["rows"], gate_options(args).gate_stat)} if r.get("rows") else r)
    notes = []
    if sleep:
        sizes = sorted({r["pct"] for r in sleep})
        notes.append(f"skipped {len(sleep)} sleep-based slowed heads (nominal " +
                     ", ".join(f"+{p:g}%: measured {mean_sd([r['tpot_ms'][0] for r in sleep if r['pct'] == p])}"
                               for p in sizes) + ")")  # fmt: skip
    if rebuilt:
        notes.append(f"{rebuilt} runs kept no rows: their rows computed again from base/head by compare now")
    if gone:
        notes.append(f"{gone} runs' base/head gone: their gate as recorded then, their rows only if kept")
    return args, kept, notes


UNRECORDED_CPU = "not recorded (runs kept before 2026-12-02 13:00: the README names the CPU of those days)"


def report(folders: list[Path]) -> None:
    """The tables over several study folders' runs, pooled by setting (the same ab args), each run's gate
    re-decided: the job's gate now (the config's [gate]), overridden by the arm's own gate options where it had them."""
    # pooled by setting and by CPU: the same job on another CPU is another study (a machine of this kind was an
    # AVX2-only AMD EPYC one day and an AVX512-BF16 Xeon another)
    settings: dict[tuple[tuple[str, ...], str], list[dict]] = {}
    for folder in folders:
        args, runs, notes = read_folder(folder)
        log = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
        calib = f", calibration TPOT {log['tpot_ms_calibration']:.2f} ms" if "tpot_ms_calibration" in log else ""
        print(f"{folder}: {len(log['runs'])} runs{calib}, machine {log.get('machine', '(not recorded)')}, ab args "
              f"{' '.join(args) or '(the job as it is)'}" + "".join(f"\n  - {n}" for n in notes))  # fmt: skip
        for r in runs:
            settings.setdefault((tuple(args), r.get("cpu") or UNRECORDED_CPU), []).append(r)
    print(f"\njob's gate now: {' '.join(job_gate([]))} (an arm with thresholds of its own keeps its own gate)")
    for (arm, cpu), runs in settings.items():
        print(f"\n## ab args {' '.join(arm) or '(the job as it is)'}, CPU {cpu}: {len(runs)} runs\n")
        print("\n".join(summarize(runs)))


def false_alarms(folders: list[Path]) -> None:
    """The A/A runs of every folder, the gate as each run recorded it (the job's gate of its day): false alarms per
    CPU and pooled, with Wilson 95% intervals, apart for runs that were a fresh runner's first (an emptied page
    cache) and for forked processes (another design). No base/head is read: folders whose files are gone count."""
    groups: dict[tuple[str, str], list[bool]] = {}
    for folder in folders:
        log = json.loads((folder / "gate_study.json").read_text(encoding="utf-8"))
        forked = "--spawn" in log.get("ab_args", []) and "fork" in log.get("ab_args", [])
        for r in log["runs"]:
            if r["pct"]:
                continue
            cold = "fresh runner (page cache emptied)" if r.get("cold_cache") else "warm page cache"
            kind = f"{cold}{', forked processes' if forked else ''}"
            groups.setdefault((r.get("cpu") or UNRECORDED_CPU, kind), []).append(bool(r["gate_failed"]))
    print("| CPU | which runs | A/A runs | gate failed: rate [Wilson 95%] |\n|---|---|---|---|")
    for (cpu, kind), failed in sorted(groups.items()):
        print(f"| {cpu} | {kind} | {len(failed)} | {rate(sum(failed), len(failed))} |")
    exec_runs = [f for (_, kind), fs in groups.items() if "forked" not in kind for f in fs]
    print(f"| every CPU | every exec'd run | {len(exec_runs)} | {rate(sum(exec_runs), len(exec_runs))} |")


# ------------------------------------------------------------------------------------------------- a study


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


def open_arm(folder: Path, ab_args: list[str]) -> tuple[Path, dict]:
    """The arm's log and what it already kept (an interrupted study goes on: its runs, an older study's
    calibration); refuses a folder of other settings."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / "gate_study.json"
    old = json.loads(log.read_text(encoding="utf-8")) if log.exists() else {"ab_args": ab_args, "runs": []}
    if old.get("ab_args", []) != ab_args:
        raise SystemExit(f"{folder} holds runs of other ab args ({' '.join(old['ab_args'])}): choose another -o")
    return log, old


def progress(name: str, i: int, total: int, pct: float, r: dict) -> str:
    tp, tt = r.get("tpot_ms", [math.nan] * 3), r.get("ttft_ms", [math.nan])
    share = f", injected {r['injected']['injected_pct']}% of forward time" if r.get("injected") else ""
    return (f"{name or 'study'} {i + 1}/{total} +{pct:g}%: TPOT {tp[0]:+.2f}% [{tp[1]:+.2f}, {tp[2]:+.2f}], "
            f"TTFT {tt[0]:+.2f}%, exit {r['exit']}{share}, {r['minutes']} min")  # fmt: skip


def run_study(arms: list[list[str]], slow: list[float], out: Path) -> None:
    machine = {"node": platform.node(), "cpus": os.cpu_count()}
    state = []
    for name, aa, per_slow, extra in arms:
        folder = out / name if name else out
        ab_args = shlex.split(extra)
        log, kept = open_arm(folder, ab_args)
        kept.update(ab_args=ab_args, machine=machine)
        state.append((name, folder, log, kept, ab_args, study_order(int(aa), slow, int(per_slow))))
    # the arms alternate run by run (the order flipped each round), so they share the machine's day
    k = 0
    while any(len(kept["runs"]) < len(order) for _, _, _, kept, _, order in state):
        turn = state if k % 2 == 0 else state[::-1]
        k += 1
        for name, folder, log, kept, ab_args, order in turn:
            runs = kept["runs"]
            if len(runs) >= len(order):
                continue
            i, pct = len(runs), order[len(runs)]
            r = one_ab(folder / f"run-{i:03d}", pct, ab_args)
            r.update(pct=pct, index=i)
            runs.append(r)
            log.write_text(json.dumps(kept, indent=1), encoding="utf-8")
            print(progress(name, i, len(order), pct, r), flush=True)
    for name, _, _, kept, ab_args, _ in state:
        runs = [r for r in kept["runs"] if not r["pct"] or r.get("inject") == "slow_pct"]
        skipped = f" ({len(kept['runs']) - len(runs)} sleep-based slowed heads of an older study skipped)"
        print(f"\n## {name or 'study'}: ab args {' '.join(ab_args) or '(the job as it is)'}"
              f"{skipped if len(runs) < len(kept['runs']) else ''}\n")  # fmt: skip
        print("\n".join(summarize(runs)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--aa", type=int, default=20)
    ap.add_argument("--slow", default="1,2,3,5", help="percent of each forward a slowed head spins, comma list")
    ap.add_argument("--per-slow", type=int, default=5)
    ap.add_argument(
        "--inject-kind",
        choices=["spin", "memory"],
        default="spin",
        help="how a slowed head spends its extra time: spinning, or reading memory (one kind a folder)",
    )
    ap.add_argument("--ab-args", default="", help="extra `llmbench ab` options (the settings under study)")
    ap.add_argument("--arm", action="append", default=[], metavar="NAME:AA:PER_SLOW:AB_ARGS",
                    help="several settings studied side by side, their runs alternating (repeatable); "
                         "replaces --aa/--per-slow/--ab-args")  # fmt: skip
    ap.add_argument("-o", "--output", type=Path, default=Path("results/gate-study"))
    ap.add_argument("--drop-caches", action="store_true",
                    help="empty the page cache before each run (root): each run is a fresh runner's first")  # fmt: skip
    ap.add_argument("--report", type=Path, nargs="+", metavar="DIR", help="print the pooled tables of kept studies")
    ap.add_argument("--false-alarms", type=Path, nargs="+", metavar="DIR",
                    help="the A/A false alarms of kept studies, per CPU and pooled")  # fmt: skip
    args = ap.parse_args()
    if args.report:
        report(args.report)
        return
    if args.false_alarms:
        false_alarms(args.false_alarms)
        return
    global INJECT_KIND, DROP_CACHES
    INJECT_KIND, DROP_CACHES = args.inject_kind, args.drop_caches
    slow = [float(x) for x in args.slow.split(",") if x.strip()]
    arms = [a.split(":", 3) for a in args.arm] or [["", str(args.aa), str(args.per_slow), args.ab_args]]
    run_study(arms, slow, args.output.resolve())


if __name__ == "__main__":
    main()
