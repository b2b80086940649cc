"""Tidy tables of a run for pandas, spreadsheets and notebooks: one row per request, or one per token.

Column names are stable (documented in README, "Exports"); times are float milliseconds, counts int64.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from llmbench.core.errors import UserError
from llmbench.present.trace import write_trace
from llmbench.results.metrics import decode_tokens_per_s, prefill_tokens_per_s
from llmbench.results.schema import Run

REQUEST_COLUMNS = [
    "run_id", "model", "device", "dtype", "prompt_index", "repeat", "session", "prompt_tokens", "output_tokens",
    "truncated_tokens", "tokenize_ms", "ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s",
    "prefill_tokens_per_s", "started_s", "output_token_ids_sha256", "output_text",
]  # fmt: skip
TOKEN_COLUMNS = ["run_id", "prompt_index", "repeat", "token_index", "time_ms", "itl_ms"]
_INTS = ("prompt_index", "repeat", "session", "output_tokens", "truncated_tokens", "token_index")
_NULLABLE_INTS = ("prompt_tokens",)  # unknown in endpoint runs without usage or --tokenizer


def requests_frame(run: Run) -> pd.DataFrame:
    """One row per measured request (warmups excluded); ``tpot_ms`` is NaN below 2 tokens."""
    c = run.config
    rows = [
        {
            "run_id": run.run_id,
            "model": c.model,
            "device": c.device,
            "dtype": c.dtype,
            "prompt_index": r.prompt_index,
            "repeat": r.repeat,
            "session": r.session,
            "prompt_tokens": r.prompt_tokens,
            "output_tokens": r.output_tokens,
            "truncated_tokens": r.truncated_tokens,
            "tokenize_ms": r.tokenize_ms,
            "ttft_ms": r.ttft_ms,
            "tpot_ms": r.tpot_ms,
            "e2e_ms": r.e2e_ms,
            "decode_tokens_per_s": decode_tokens_per_s(r),
            "prefill_tokens_per_s": prefill_tokens_per_s(r),
            "started_s": r.started_s,
            "output_token_ids_sha256": r.output_token_ids_sha256,
            "output_text": r.output_text,
        }
        for r in run.requests
    ]
    return _typed(pd.DataFrame(rows, columns=REQUEST_COLUMNS))


# The request fields (besides RequestScalars') the request table needs: a reader skips the token stamps
REQUEST_FIELDS = ("session", "truncated_tokens", "tokenize_ms", "started_s", "output_text")
TOKEN_FIELDS = ("token_times_ms",)  # the token table's: the stamps alone (a large run's as views of its file)


def tokens_frame(run: Run) -> pd.DataFrame:
    """One row per output token: its stamp (ms since request start) and the gap to the previous token (built as
    arrays: a 10,000 x 256 run is 2.56 million rows)."""
    import numpy as np

    counts = np.array([len(r.token_times_ms) for r in run.requests], dtype=np.int64)
    stamps = [np.asarray(r.token_times_ms, dtype=float) for r in run.requests]  # lists, or a large run's views
    times = np.concatenate(stamps) if stamps else np.array([], dtype=float)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if counts.size else np.array([], dtype=np.int64)
    token_index = np.arange(times.size) - np.repeat(starts, counts)
    itl = np.empty(times.size)
    itl[1:] = np.diff(times)
    itl[token_index == 0] = np.nan  # the first token of each request has no gap before it
    frame = pd.DataFrame({
        "run_id": run.run_id,
        "prompt_index": np.repeat([r.prompt_index for r in run.requests], counts),
        "repeat": np.repeat([r.repeat for r in run.requests], counts),
        "token_index": token_index, "time_ms": times, "itl_ms": itl,
    }, columns=TOKEN_COLUMNS)  # fmt: skip
    return _typed(frame)


def _typed(df: pd.DataFrame) -> pd.DataFrame:
    for col in df.columns:
        if col in _NULLABLE_INTS:
            df[col] = df[col].astype("Int64")  # pandas' nullable integer: unknown stays <NA>, not 0
        elif col in _INTS:
            df[col] = df[col].astype("int64")
        elif col.endswith(("_ms", "_per_s", "_s")):
            df[col] = df[col].astype("float64")
        else:
            df[col] = df[col].astype("string")
    return df


def export(run: Run, path: str | Path, fmt: str = "csv", tokens: bool = False) -> int:
    """Write the request (or token) table to ``path`` as csv or parquet, and return the number of rows; or, for
    ``fmt`` "trace", the run as a Chrome Trace Event Format file (:func:`llmbench.present.trace.write_trace`: a
    full run, not a scalars-only one; ``tokens`` does not apply) and return the number of events."""
    if fmt == "trace":
        return write_trace(run, path)
    if fmt not in ("csv", "parquet"):
        raise UserError(f"unknown --format '{fmt}'; expected csv, parquet or trace")
    if fmt == "parquet":
        from llmbench.core.errors import require

        require("--format parquet", "export", "pyarrow")
    df = tokens_frame(run) if tokens else requests_frame(run)
    p = Path(path)
    try:
        if fmt == "csv":
            df.to_csv(p, index=False)
        else:
            df.to_parquet(p, index=False)
    except OSError as e:
        raise UserError(f"cannot write {p}: {e.strerror or e}") from None
    return len(df)


HISTORY_COLUMNS = [
    "result_id", "kind", "created_at", "recorded_at", "commit", "branch", "dirty", "base_commit", "head_commit",
    "anchor_ref", "head_ref", "machine_id", "config_hash", "prompt_sha256", "model", "engine", "label", "path",
    "metric", "stat", "value", "ci_low", "ci_high", "n", "change_pct", "change_ci_low", "change_ci_high", "mdc_pct",
]  # fmt: skip


def export_history(h, path: str | Path, fmt: str) -> int:
    """The history as one row per (result, metric, statistic), for pandas and spreadsheets; the row count."""
    rows = []
    for r in h.list():
        full = h.get(r["id"])
        for m in full["metrics"]:
            rows.append({**{k: full.get(k) for k in HISTORY_COLUMNS if k in full},
                         "result_id": full["id"], **{k: m.get(k) for k in HISTORY_COLUMNS if k in m}})  # fmt: skip
    frame = pd.DataFrame(rows, columns=HISTORY_COLUMNS)
    if fmt == "parquet":
        frame.to_parquet(path, index=False)
    elif fmt == "csv":
        frame.to_csv(path, index=False)
    else:
        raise UserError(f"unknown export format {fmt!r}; expected csv or parquet")
    return len(frame)
