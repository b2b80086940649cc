"""Which columnar format holds a big run's per-token stamps (issue 61): Arrow IPC (memory-mapped; plain, LZ4 or
ZSTD buffers) against Parquet (Snappy, ZSTD), on the same synthetic stamps, each written and read back by a fresh
process's worth of work in this one (page cache warm: the file was just written, as compare reads a run).

For each format: bytes on disk, the time to write every request's stamps (batches of --batch requests, as a run
loop appends them), the time to open the file and compute what compare needs from the stamps (TTFT and mean TPOT
per request, vectorized), and the time to read one scalar column only. The stamps are one row per request with
list columns (token_times_ms: list<float64>, char_offsets: list<int32>), beside the request's scalars.

    python benchmarks/stamp_formats.py [--requests 100000] [--tokens 256] [--batch 1000]
"""

from __future__ import annotations

import argparse
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc
import pyarrow.parquet as pq


def batches(requests: int, tokens: int, batch: int, seed: int = 0):
    """Record batches of ``batch`` requests: known TTFT (100 ms) and TPOT (20 ms), 10% noise, as a run writes."""
    rng = np.random.default_rng(seed)
    for start in range(0, requests, batch):
        n = min(batch, requests - start)
        ttft = 100.0 * (1 + 0.1 * rng.random(n))
        gaps = 20.0 * (1 + 0.1 * rng.random((n, tokens - 1)))
        times = np.concatenate([ttft[:, None], ttft[:, None] + np.cumsum(gaps, axis=1)], axis=1)
        offsets = np.arange(n + 1, dtype=np.int32) * tokens
        chars = np.tile(np.arange(1, tokens + 1, dtype=np.int32) * 4, n)
        yield pa.record_batch({
            "request": pa.array(np.arange(start, start + n, dtype=np.int64)),
            "ttft_ms": pa.array(ttft),
            "output_tokens": pa.array(np.full(n, tokens, dtype=np.int32)),
            "token_times_ms": pa.ListArray.from_arrays(pa.array(offsets), pa.array(times.ravel())),
            "char_offsets": pa.ListArray.from_arrays(pa.array(offsets), pa.array(chars)),
        })  # fmt: skip


def compare_needs(table: pa.Table) -> tuple[float, float]:
    """What compare reads from the stamps: the median TTFT and the median of each request's mean TPOT."""
    times = table.column("token_times_ms").combine_chunks()
    flat = times.values.to_numpy(zero_copy_only=False)
    starts = times.offsets.to_numpy()
    first, last = flat[starts[:-1]], flat[starts[1:] - 1]
    n = np.diff(starts)
    tpot = (last - first) / np.maximum(n - 1, 1)
    return float(np.median(first)), float(np.median(tpot))


def write_ipc(path: Path, schema: pa.Schema, source, compression: str | None) -> None:
    options = ipc.IpcWriteOptions(compression=compression)
    with pa.OSFile(str(path), "wb") as sink, ipc.new_stream(sink, schema, options=options) as w:
        for b in source:
            w.write_batch(b)


def read_ipc(path: Path) -> pa.Table:
    return ipc.open_stream(pa.memory_map(str(path), "r")).read_all()


def write_parquet(path: Path, schema: pa.Schema, source, compression: str) -> None:
    with pq.ParquetWriter(str(path), schema, compression=compression) as w:
        for b in source:
            w.write_batch(b)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=100_000)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1_000)
    args = ap.parse_args()

    schema = next(batches(1, args.tokens, 1)).schema
    formats = {
        "arrow ipc": (lambda p, s: write_ipc(p, schema, s, None), read_ipc),
        "arrow ipc lz4": (lambda p, s: write_ipc(p, schema, s, "lz4"), read_ipc),
        "arrow ipc zstd": (lambda p, s: write_ipc(p, schema, s, "zstd"), read_ipc),
        "parquet snappy": (lambda p, s: write_parquet(p, schema, s, "snappy"), lambda p: pq.read_table(str(p))),
        "parquet zstd": (lambda p, s: write_parquet(p, schema, s, "zstd"), lambda p: pq.read_table(str(p))),
    }
    print(f"{args.requests:,} requests x {args.tokens} tokens, batches of {args.batch:,} requests; pyarrow "
          f"{pa.__version__}\n")  # fmt: skip
    print("| format | MB | write s (numpy batches included) | open + TTFT/TPOT medians s | one scalar column s |")
    print("|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        t = time.perf_counter()
        for _ in batches(args.requests, args.tokens, args.batch):
            pass
        making = time.perf_counter() - t
        for name, (write, read) in formats.items():
            path = Path(tmp) / name.replace(" ", "-")
            t = time.perf_counter()
            write(path, batches(args.requests, args.tokens, args.batch))
            wrote = time.perf_counter() - t
            t = time.perf_counter()
            ttft, tpot = compare_needs(read(path))
            opened = time.perf_counter() - t
            t = time.perf_counter()
            if name.startswith("parquet"):
                pc.mean(pq.read_table(str(path), columns=["ttft_ms"]).column(0))
            else:
                pc.mean(read_ipc(path).column("ttft_ms"))
            scalar = time.perf_counter() - t
            assert 100 < ttft < 111 and 20 < tpot < 22, (ttft, tpot)
            print(f"| {name} | {path.stat().st_size / 1e6:,.0f} | {wrote:.2f} | {opened:.2f} | {scalar:.3f} |")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nmaking the batches alone: {making:.2f} s; max RSS of this process {rss:,.0f} MB")


if __name__ == "__main__":
    main()
