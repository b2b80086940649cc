"""Big runs stay instant: the commands a user opens interactively, on runs of 10,000 requests x 256 tokens.

Writes two synthetic runs (known TTFT/TPOT, 10% noise), then times each real console command in a fresh
process (best and median of --times), beside the time the fastest JSON parser here (orjson) takes merely to
parse the same file(s), as a ratio:

  compare A B --fail-on-regression 10      target < 1 s
  show A / export A -o a.csv               target < 1 s each
  report A -o a.html                       target < 3 s
  history add A (into an existing history) target < 1 s
  --help, compare --help                   target < 0.25 s (benchmarks/startup.py: interleaved with older code)

and the writer: a 10,000-request run saved through the run loop's writer (journal + geometric snapshots), total.

    python benchmarks/big_runs.py [--requests 10000] [--tokens 256] [--times 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(argv: list, times: int, env: dict | None = None) -> tuple[float, float]:
    """Best and median wall time of ``llmbench ARGV`` in a fresh process; an item of ARGV that is a list gives
    the k-th run its k-th element."""
    out = []
    for k in range(times):
        t = time.perf_counter()
        args = [x[k] if isinstance(x, list) else x for x in argv]
        r = subprocess.run([sys.executable, "-m", "llmbench", *args], capture_output=True, text=True,
                           env={**os.environ, **(env or {})})  # fmt: skip
        out.append(time.perf_counter() - t)
        assert r.returncode in (0, 1), (argv, r.stderr)
    return min(out), statistics.median(out)


def parse_time(paths: list[Path], times: int) -> float:
    import orjson

    best = float("inf")
    for _ in range(times):
        t = time.perf_counter()
        for p in paths:
            orjson.loads(p.read_bytes())
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--times", type=int, default=5)
    args = ap.parse_args()

    from llmbench import save_run
    from llmbench.results.storage import RunWriter
    from tests.helpers import synthetic_run

    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        a, b = tmp / "a.json", tmp / "b.json"
        run_a = synthetic_run(n=args.requests, tokens=args.tokens, noise=0.1, seed=1)
        save_run(run_a, a)
        save_run(synthetic_run(n=args.requests, tokens=args.tokens, noise=0.1, seed=2, tpot_ms=21.0), b)
        print(f"two runs of {args.requests} requests x {args.tokens} tokens, {a.stat().st_size / 1e6:.1f} MB each\n")
        history = {"XDG_DATA_HOME": str(tmp / "data")}
        timed(["history", "add", str(b)], 1, history)  # the history exists (and holds another run)

        copies = []
        for k in range(args.times):  # a new file each time (one more trailing newline: another sha256): a new record
            c = tmp / f"a{k}.json"
            c.write_bytes(a.read_bytes() + b"\n" * (k + 1))
            copies.append(c)

        rows = []
        parse_one, parse_two = parse_time([a], args.times), parse_time([a, b], args.times)
        for name, argv, target, parse, env in (
            ("compare A B --fail-on-regression 10", ["compare", str(a), str(b), "--fail-on-regression", "10"], 1.0,
             parse_two, None),
            ("show A", ["show", str(a)], 1.0, parse_one, None),
            ("export A -o a.csv --overwrite", ["export", str(a), "-o", str(tmp / "a.csv"), "--overwrite"], 1.0,
             parse_one, None),
            ("report A -o a.html --overwrite", ["report", str(a), "-o", str(tmp / "a.html"), "--overwrite"], 3.0,
             parse_one, None),
            ("history add A (existing history)", ["history", "add", [str(c) for c in copies]], 1.0, parse_one,
             history),
            ("--help", ["--help"], 0.25, None, None),
            ("compare --help", ["compare", "--help"], 0.25, None, None),
        ):  # fmt: skip
            best, median = timed(argv, args.times, env)
            ratio = f"{median / parse:.1f}x" if parse else "-"
            ok = "yes" if median < target else "NO"
            rows.append(f"| `llmbench {name}` | {best:.2f} s | {median:.2f} s | {target:g} s | {ok} | {ratio} |")
        writer_s = []
        for _ in range(3):
            out = tmp / "w.json"
            out.unlink(missing_ok=True)
            shell = run_a.model_copy(update={"requests": []})
            t = time.perf_counter()
            w = RunWriter(out, shell)
            for r in run_a.requests:
                shell.requests.append(r)
                w.add(shell, r)
            w.close(shell)
            writer_s.append(time.perf_counter() - t)
        print(f"orjson parse alone: {parse_one:.3f} s (one file), {parse_two:.3f} s (two)\n")
        print("| command | best | median | target | met | median / orjson parse |")
        print("|---|---|---|---|---|---|")
        print("\n".join(rows))
        print(f"\nwriting a {args.requests}-request run through RunWriter (journal + snapshots): best "
              f"{min(writer_s):.2f} s, median {statistics.median(writer_s):.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
