"""Big runs stay quick: the commands a user opens on a run of 100,000 (or 1,000,000) requests x 256 tokens.

Writes two synthetic runs (known TTFT/TPOT, 10% noise; B's TPOT 5% slower) as llmbench writes a run that
size: JSON plus its columns file (schema version 2), generated in numpy chunks straight to columns (no Python object
per token). Then times each real console command in a fresh process (best and median of --times, and its max RSS,
from the kernel's rusage of that child):

  compare A B --fail-on-regression 10      target: 1.5 s at 100,000; 20 s and 4 GB at 1,000,000
  show A                                   target: 0.5 s
  export A -o a.csv                        target: 3 s
  report A -o a.html                       target: 5 s
  history add A (into an existing history) target: 1 s
  every command: max RSS under 1 GB at 100,000

beside the floor (the bare read of the format: the columns compare needs, memory-mapped, plus the sha256 check of
both files) and, with --json-baseline, the same commands on the same runs written as one JSON file each
(``llmbench convert --one-file``: what every release before wrote), with orjson's bare parse as that format's floor.
And the writer (unless --no-writer): the run's requests saved through the run loop's writer (one JSON file up to
the line, then columns with group commits), total.

    python benchmarks/big_runs.py [--requests 100000] [--tokens 256] [--times 3] [--json-baseline]
                                  [--commands compare,show,...] [--no-writer]
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

CHUNK = 20_000  # requests a generated batch: bounded memory however large the run


TIME = "/usr/bin/time"  # GNU time: the command's own max RSS (a forked child's rusage would count this process's)


def timed(argv: list, times: int, env: dict | None = None) -> tuple[float, float, float]:
    """Best and median wall time of ``llmbench ARGV`` in a fresh process, and the largest max RSS (GB) of its
    runs (nan without GNU time); an item of ARGV (or a value of ``env``) that is a list gives the k-th run its k-th
    element."""
    out, rss = [], 0.0
    # bytecode written and reused, as an installed llmbench has it (this machine's PYTHONDONTWRITEBYTECODE would
    # recompile every module at every start)
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    wrap = [TIME, "-f", "maxrss_kb=%M"] if os.access(TIME, os.X_OK) else []
    for k in range(times):
        args = [x[k] if isinstance(x, list) else x for x in argv]
        t = time.perf_counter()
        mine = {n: v[k] if isinstance(v, list) else v for n, v in (env or {}).items()}
        r = subprocess.run([*wrap, sys.executable, "-m", "llmbench", *args], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, env={**base, **mine})  # fmt: skip
        out.append(time.perf_counter() - t)
        assert r.returncode in (0, 1), (argv, r.returncode, r.stderr[-500:])
        kb = [line.split("=", 1)[1] for line in r.stderr.splitlines() if line.startswith("maxrss_kb=")]
        rss = max(rss, int(kb[-1]) / 1e6) if kb else float("nan")
    return min(out), statistics.median(out), rss


def generate(path: Path, n: int, tokens: int, *, seed: int, ttft_ms: float = 100.0, tpot_ms: float = 20.0,
             noise: float = 0.1) -> None:  # fmt: skip
    """A complete synthetic run of ``n`` requests x ``tokens`` stamps at ``path``, its requests written straight
    to a columns file in numpy chunks, its summary computed from the columns, as llmbench writes a run this size."""
    import numpy as np
    import pyarrow as pa

    from llmbench.results import columns as col
    from llmbench.results.metrics import describe
    from llmbench.results.schema import Summary
    from llmbench.results.storage import dumped
    from tests.helpers import synthetic_run

    rng = np.random.default_rng(seed)
    shell = synthetic_run(n=1, tokens=tokens, seed=seed)
    shell.requests = []
    schema = col.arrow_schema().with_metadata({col.RUN_ID: shell.run_id.encode()})
    writer = col.ColumnWriter(path.parent / col.sidecar_name(path), shell.run_id)
    keep: dict[str, list] = {"ttft_ms": [], "tpot_ms": [], "e2e_ms": []}
    offsets_tokens = np.arange(0, (CHUNK + 1) * tokens, tokens, dtype=np.int32)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        ttft = ttft_ms * (1 + rng.uniform(-noise, noise, m))
        gaps = tpot_ms * (1 + rng.uniform(-noise, noise, (m, tokens - 1)))
        stamps = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
        e2e = stamps[:, -1]
        tpot = (e2e - ttft) / (tokens - 1)
        offsets = pa.array(offsets_tokens[: m + 1])
        ints = lambda v, m=m: pa.array(np.full(m, v, dtype=np.int64))  # noqa: E731
        floats = lambda v, m=m: pa.array(np.full(m, v, dtype=np.float64))  # noqa: E731
        chars = np.tile(np.arange(1, tokens + 1, dtype=np.int32), m)
        given = {
            "prompt_index": pa.array(np.arange(start, start + m, dtype=np.int64)), "repeat": ints(0),
            "prompt_tokens": ints(30), "output_tokens": ints(tokens), "tokenize_ms": floats(1.0),
            "ttft_ms": pa.array(ttft), "tpot_ms": pa.array(tpot), "e2e_ms": pa.array(e2e),
            "token_times_ms": pa.ListArray.from_arrays(offsets, pa.array(stamps.ravel())),
            "output_token_ids_sha256": pa.array(["0" * 64] * m, type=pa.large_string()),
            "output_text": pa.array(["x" * tokens] * m, type=pa.large_string()),
            "started_s": pa.array(np.arange(start, start + m) * 0.01), "truncated_tokens": ints(0), "session": ints(0),
            "ttft_only": pa.array(np.zeros(m, dtype=bool)),
            "text_offsets": pa.ListArray.from_arrays(offsets, pa.array(chars)),
            "first_visible_ms": pa.array(ttft), "reader_stall_ms": floats(0.0), "reader_stalls": ints(0),
            "reader_longest_stall_ms": floats(0.0), "andes_qoe": floats(1.0), "fluidity": floats(1.0),
            "decode_chars_per_s": pa.array((tokens - 1) / (e2e - ttft) * 1000), "decode_words_per_s": floats(10.0),
        }  # fmt: skip
        batch = pa.record_batch([given.get(f.name, pa.nulls(m, f.type)) for f in schema], schema=schema)
        writer._writer.write_batch(batch)
        writer.rows += m
        for k, v in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e)):
            keep[k].append(v)
    ref = writer.close()
    assert ref.rows == n and ref.sha256 == col.file_sha256(writer.path) == ref.sha256
    full = {k: np.concatenate(v) for k, v in keep.items()}
    shell.summary = Summary(
        requests=n, ttft_ms=describe(full["ttft_ms"]), tpot_ms=describe(full["tpot_ms"]),
        e2e_ms=describe(full["e2e_ms"]), output_tokens=describe(np.full(n, tokens)), tokenize_ms=describe(np.ones(n)),
    )  # type: ignore[arg-type]  # fmt: skip
    shell.config.prompt_count = n
    path.write_bytes(dumped(shell, ref))


def floor(paths: list[Path], hashed: bool) -> float:
    """The bare read of two runs' columns as compare needs them (memory-mapped, every value touched), with or
    without hashing each file first (a first read hashes it; a later read of the same unchanged file need not)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from llmbench.results import columns as col
    from llmbench.results.schema import RequestScalars, Run

    t = time.perf_counter()
    for p in paths:
        run = Run.model_validate_json(p.read_bytes())
        assert run.columns is not None
        if hashed:
            col.file_sha256(p.parent / run.columns.file)
        table, _ = col.read_table(p.parent / run.columns.file, list(RequestScalars.model_fields), run.run_id)
        for c in table.columns:  # every value touched: the pages read
            pc.min_max(c) if pa.types.is_integer(c.type) or pa.types.is_floating(c.type) else pc.count(c)
    return time.perf_counter() - t


def json_floor(paths: list[Path]) -> float:
    """orjson's bare parse of the files (the fastest JSON parser here; pip install orjson), else the stdlib's."""
    try:
        import orjson
    except ImportError:
        import json as orjson  # type: ignore[no-redef]

    t = time.perf_counter()
    for p in paths:
        orjson.loads(p.read_bytes())
    return time.perf_counter() - t


def writer_seconds(run_path: Path, tmp: Path) -> tuple[float, int, int]:
    """Total seconds to save the run's requests through the run loop's writer, one request at a time, as the loop
    does (the requests built in memory first); and its snapshots and group commits."""
    from llmbench.results.storage import RunWriter, load_run

    run = load_run(run_path)
    shell = run.model_copy(update={"requests": [], "columns": None, "schema_version": 1})
    out = tmp / "w.json"
    t = time.perf_counter()
    w = RunWriter(out, shell)
    for r in run.requests:
        shell.requests.append(r)
        w.add(shell, r)
    w.close(shell)
    return time.perf_counter() - t, w.snapshots, w.group_commits


COMMANDS = ("compare", "show", "export", "report", "history")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--times", type=int, default=3)
    ap.add_argument("--json-baseline", action="store_true", help="Also time the same runs as one JSON file each.")
    ap.add_argument("--commands", default=",".join(COMMANDS), help=f"Which of {','.join(COMMANDS)} to time.")
    ap.add_argument("--no-writer", action="store_true", help="Skip timing the run loop's writer.")
    ap.add_argument("--dir", type=Path, default=None, help="Work here (default: a temporary folder).")
    args = ap.parse_args()
    chosen = args.commands.split(",")
    big = args.requests > 100_000

    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        tmp = Path(d)
        a, b = tmp / "a.json", tmp / "b.json"
        t = time.perf_counter()
        generate(a, args.requests, args.tokens, seed=1)
        generate(b, args.requests, args.tokens, seed=2, tpot_ms=21.0)
        sizes = sum(p.stat().st_size for p in tmp.iterdir()) / 2e6
        print(f"two runs of {args.requests:,} requests x {args.tokens} tokens, JSON plus columns: {sizes:.0f} MB "
              f"each (generated in {time.perf_counter() - t:.1f} s)\n")  # fmt: skip
        forms = [("columns", a, b)]
        if args.json_baseline:
            for src, dst in ((a, tmp / "a1.json"), (b, tmp / "b1.json")):
                best, _, rss = timed(["convert", str(src), "-o", str(dst)], 1)
                print(f"convert {src.name} --one-file: {best:.1f} s, max RSS {rss:.2f} GB, "
                      f"{dst.stat().st_size / 1e6:.0f} MB")  # fmt: skip
            forms.append(("one JSON file", tmp / "a1.json", tmp / "b1.json"))
        history = {"XDG_DATA_HOME": str(tmp / "data")}
        targets = {"compare": (20.0, 4.0) if big else (1.5, 1.0), "show": (0.5, 1.0), "export": (3.0, 1.0),
                   "report": (5.0, 1.0), "history": (1.0, 1.0)}  # fmt: skip
        rows = []
        for form, x, y in forms:
            if "history" in chosen:
                timed(["history", "add", str(y)], 1, history)  # the history exists (and holds another run)
            copies = []
            for k in range(args.times):  # history add: a new record each time (another sha256)
                c = tmp / f"{x.stem}-copy{k}.json"
                c.write_bytes(x.read_bytes()[:-1] + b" " * (k + 1) + b"}")
                copies.append(c)
            if "compare" in chosen and form == "columns":  # a file's first read hashes it: a fresh cache each time
                fresh = {"XDG_CACHE_HOME": [str(tmp / f"cache{k}") for k in range(args.times)]}
                best, median, rss = timed(["compare", str(x), str(y), "--fail-on-regression", "10"], args.times, fresh)
                target_s, target_gb = targets["compare"]
                met = "yes" if median < target_s and rss < target_gb else "NO"
                rows.append(
                    f"| {form} | `llmbench compare A B --fail-on-regression 10`, first read (both hashed) | "
                    f"{best:.2f} s | {median:.2f} s | {rss:.2f} GB | {target_s:g} s, {target_gb:g} GB | {met} |"
                )
            runs = {
                "compare": ["compare", str(x), str(y), "--fail-on-regression", "10"],
                "show": ["show", str(x)],
                "export": ["export", str(x), "-o", str(tmp / "a.csv"), "--overwrite"],
                "report": ["report", str(x), "-o", str(tmp / "a.html"), "--overwrite"],
                "history": ["history", "add", [str(c) for c in copies]],
            }
            for name in chosen:
                best, median, rss = timed(runs[name], args.times, history if name == "history" else None)
                target_s, target_gb = targets[name]
                met = "yes" if median < target_s and rss < target_gb else "NO"
                label = " ".join(str(v) if not isinstance(v, list) else "A" for v in runs[name])
                label = label.replace(str(x), "A").replace(str(y), "B").replace(str(tmp) + "/", "")
                rows.append(f"| {form} | `llmbench {label}` | {best:.2f} s | {median:.2f} s | {rss:.2f} GB | "
                            f"{target_s:g} s, {target_gb:g} GB | {met} |")  # fmt: skip
            for c in copies:
                c.unlink()
        print(f"\nfloor, columns: the columns compare reads of both runs, mapped: "
              f"{min(floor([a, b], False) for _ in range(args.times)):.3f} s; with both files hashed (a first "
              f"read): {min(floor([a, b], True) for _ in range(args.times)):.3f} s")  # fmt: skip
        if args.json_baseline:
            parse = min(json_floor([tmp / "a1.json", tmp / "b1.json"]) for _ in range(args.times))
            print(f"floor, one JSON file: the bare parse of both (orjson, if installed; else json): {parse:.3f} s")
        print("\n| form | command | best | median | max RSS | target | met |")
        print("|---|---|---|---|---|---|---|")
        print("\n".join(rows))
        if not args.no_writer:
            seconds, snapshots, commits = writer_seconds(a, tmp)
            print(f"\nwriting the {args.requests:,}-request run through the run loop's writer: {seconds:.2f} s "
                  f"({snapshots} JSON snapshots up to the line, then {commits} group commits)")  # fmt: skip


if __name__ == "__main__":
    main()
