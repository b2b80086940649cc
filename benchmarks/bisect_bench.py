"""``llmbench bisect`` on this machine as a user would run it (issue 36, deliverable 6): a scratch repository of this
project with ``--commits`` commits after GOOD, one of which (``--slow-at``) makes every forward slower by a
calibrated share (benchmarks/inject's LLMBENCH_INJECT_SLOW_PCT through a root ``sitecustomize.py``: the worker
runs with the tree first on its path, so it is a real code change found only by measuring), then the bisect with
the regression job's worker and its defaults (random-weights Qwen2.5-0.5B-Instruct bf16, one thread, duet, 4-minute
looks). The slowed commit's workers log the share they really spun (``inject-*.json``), the independent check of the
planted size. ``--null`` plants nothing: the bisect must end "nothing to bisect".

    HF_HUB_OFFLINE=1 python -u benchmarks/bisect_bench.py -o results/bisect-bench [--commits 16 --slow-at 11 --pct 5]

Writes OUT/summary.json: the answer, wall time, looks and pairs per commit measured, and the injected share.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.com",
           "GIT_COMMITTER_NAME": "bench", "GIT_COMMITTER_EMAIL": "bench@example.com"}  # fmt: skip
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True, env=env).stdout


def scratch(repo: Path, commits: int, slow_at: int, pct: float, log: Path) -> list[str]:
    """GOOD (this checkout's package) and ``commits`` commits after it; commit ``slow_at`` (1-based) adds the
    slowdown, which every later commit keeps. ``pct`` 0: nothing planted. [GOOD, c1, ...] shas."""
    shutil.copytree(ROOT / "llmbench", repo / "llmbench", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "benchmarks" / "inject", repo / "benchmarks" / "inject",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "good")
    shas = [git(repo, "rev-parse", "HEAD").strip()]
    slow = (
        "import os, runpy\n"
        f'os.environ["LLMBENCH_INJECT_SLOW_PCT"] = "{pct}"\n'
        f'os.environ["LLMBENCH_INJECT_LOG"] = {str(log / "inject-{pid}.json")!r}\n'
        'runpy.run_path(os.path.join(os.path.dirname(os.path.abspath(__file__)), "benchmarks", "inject", '
        '"sitecustomize.py"))\n'
    )
    for i in range(1, commits + 1):
        (repo / "notes").mkdir(exist_ok=True)
        (repo / "notes" / f"{i}.txt").write_text(f"commit {i}\n", encoding="utf-8")
        if i == slow_at and pct:
            (repo / "sitecustomize.py").write_text(slow, encoding="utf-8")
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"{'slow' if i == slow_at and pct else 'ok'} {i}")
        shas.append(git(repo, "rev-parse", "HEAD").strip())
    return shas


def injected(log: Path) -> dict:
    logs = [json.loads(p.read_text(encoding="utf-8")) for p in sorted(log.glob("inject-*.json"))]
    fwd, spun = sum(x["forward_s"] for x in logs), sum(x["injected_s"] for x in logs)
    return {"workers": len(logs), "injected_pct": round(100 * spun / fwd, 3) if fwd else None}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-o", "--output", type=Path, required=True)
    ap.add_argument("--commits", type=int, default=16)
    ap.add_argument("--slow-at", type=int, default=11)
    ap.add_argument("--pct", type=float, default=5.0)
    ap.add_argument("--null", action="store_true", help="plant nothing")
    ap.add_argument("bisect_args", nargs="*", help="more options for llmbench bisect (after --)")
    args = ap.parse_args()
    out = args.output.resolve()
    out.mkdir(parents=True, exist_ok=False)
    log = out / "inject"
    log.mkdir()
    pct = 0.0 if args.null else args.pct
    shas = scratch(out / "repo", args.commits, args.slow_at, pct, log)
    cmd = [sys.executable, "-m", "llmbench", "bisect", shas[0], shas[-1], "--repo", str(out / "repo"),
           "-o", str(out / "bisect"), *args.bisect_args]  # fmt: skip
    print("$", " ".join(cmd), flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=out)
    wall = time.perf_counter() - t0
    if not (out / "bisect" / "bisect.json").exists():
        print(f"bisect ended (exit {proc.returncode}) before its first look was written")
        return proc.returncode or 1
    record = json.loads((out / "bisect" / "bisect.json").read_text(encoding="utf-8"))
    measured = [c for c in record["commits"] if c["looks"] or c["own"]]
    summary = {
        "exit": proc.returncode,
        "wall_min": round(wall / 60, 1),
        "planted": {"index": args.slow_at if pct else None, "sha": shas[args.slow_at] if pct else None, "pct": pct},
        "injected": injected(log),
        "answer": record["answer"],
        "found": bool(pct)
        and (record["answer"] or {}).get("kind") == "commit"
        and (record["answer"] or {}).get("first") == args.slow_at,
        "commits_measured": len(measured),
        "looks": sum(len(c["looks"]) + len(c["own"]) for c in measured),
        "per_commit": [
            {
                "index": c["index"],
                "looks": len(c["looks"]) + len(c["own"]),
                "pairs": [x.get("pairs") for x in c["looks"] + c["own"]],
                "last": c["looks"][-1] if c["looks"] else None,
            }
            for c in measured
        ],
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
    print(json.dumps(summary, indent=1))
    return proc.returncode


if __name__ == "__main__":
    raise SystemExit(main())
