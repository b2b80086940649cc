"""Timed trace replay: a production trace's arrival times become the open loop's schedule, and its rows become
prompts of exactly their ``input_length`` that share exactly the blocks the trace says they share.

Formats (time units differ from trace to trace; each is recorded):

- **Mooncake** JSONL: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids`` (one id a 512-token
  block, chained: an id stands for its block and every block before it, so two rows that share the first k ids
  share their first k blocks).
- **BurstGPT** CSV: ``Timestamp`` (s), ``Request tokens``, ``Response tokens``.
- **Azure LLM inference** CSV: ``TIMESTAMP`` (a date and time), ``ContextTokens``, ``GeneratedTokens``.

``--start``/``--end`` cut a window (seconds of trace time from its first row), ``--time-scale X`` multiplies
the times (0.5: twice as fast); request i is sent at ``(t_i - t_first) * X`` after the run's start.

**Exact prompts.** Each block is a text of exactly 512 tokens, cut from the corpus llmbench ships at an offset
drawn from its hash id (BurstGPT and Azure rows have no ids: each row's blocks are its own), that starts with a
non-space character and ends with a newline: a newline followed by a non-space character is always a boundary of
the tokenizer's pre-tokenization, so a block's tokens are the same whatever follows, and a prompt's tokens are
its blocks' tokens in order. The chat template's own tokens come first; the blocks fill the rest, the last one
cut short, then the whole prompt is counted again as the run counts it (template included) and the last block is
resized until the count is exactly ``input_length``. Rows sharing k leading ids then share exactly k blocks of
leading tokens, and different ids give different blocks.

**Reuse a cache could get**: a block can be served from a prefix cache when its id appeared in an earlier row;
``prefix_reuse_expected`` is those blocks' tokens over all prompt tokens (the server's own figure is in
``server_metrics``, and per request in ``cached_tokens`` where its usage says).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError, read_user_file
from llmbench.workloads import files
from llmbench.workloads.limits import MAX_REQUESTS, MAX_TOKENS_MADE
from llmbench.workloads.prompts import PromptSet
from llmbench.workloads.text import Corpus, block, fit

FORMATS = ("mooncake", "burstgpt", "azure")
BLOCK_TOKENS = 512  # Mooncake's block: one hash id
GENERATOR_VERSION = 1
UNITS = {"mooncake": "ms", "burstgpt": "s", "azure": "datetime"}
MAX_REPLAY_S = 3.2e8  # ten years: BurstGPT's whole trace is 121 days


@dataclass(frozen=True)
class TraceSpec:
    """``--trace FILE --trace-format F [--time-scale X] [--start S] [--end S]``."""

    path: str
    format: str
    time_scale: float = 1.0
    start_s: float | None = None
    end_s: float | None = None

    def validate(self) -> None:
        if self.format not in FORMATS:
            raise UserError(f"--trace-format '{self.format}': expected one of {', '.join(FORMATS)}")
        if not 0 < self.time_scale < math.inf:  # NaN fails this too
            raise UserError(f"--time-scale must be a number above 0, not {self.time_scale}")
        for name, v in (("--start", self.start_s), ("--end", self.end_s)):
            if v is not None and not 0 <= v < math.inf:
                raise UserError(f"{name} must be a second of the trace (0 or more), not {v}")
        if self.start_s is not None and self.end_s is not None and self.end_s <= self.start_s:
            raise UserError(f"--end {self.end_s} is not after --start {self.start_s}: the window is empty")


@dataclass(frozen=True)
class Row:
    t_s: float  # trace time, seconds from the trace's first row
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[Any, ...] | None
    where: str


@dataclass
class Trace:
    """A trace's rows within the window, and what the run records of it."""

    spec: TraceSpec
    sha256: str
    rows: list[Row] = field(default_factory=list)
    total_rows: int = 0

    @property
    def offsets(self) -> list[float]:
        """Each row's due time, seconds after the run's start (the first row at 0)."""
        t0 = self.rows[0].t_s
        return [round((r.t_s - t0) * self.spec.time_scale, 6) for r in self.rows]

    def record(self) -> dict[str, Any]:
        """``config.endpoint.arrival.trace``."""
        s = self.spec
        return {"path": s.path, "format": s.format, "sha256": self.sha256, "time_unit": UNITS[s.format],
                "time_scale": s.time_scale, "start_s": s.start_s, "end_s": s.end_s, "rows": len(self.rows),
                "rows_in_file": self.total_rows, "block_tokens": BLOCK_TOKENS, "generator": GENERATOR_VERSION,
                "prefix_reuse_expected": round(prefix_reuse_expected(self.rows), 6)}  # fmt: skip


def read(spec: TraceSpec) -> Trace:
    """The rows of ``spec.path`` within the window; one UserError naming the row for anything malformed."""
    spec.validate()
    p = Path(spec.path)
    raw = read_user_file(p, "trace")
    text = files.utf8(p, raw, "trace")
    rows = {"mooncake": _mooncake, "burstgpt": _burstgpt, "azure": _azure}[spec.format](p, text)
    if not rows:
        raise UserError(f"trace {p} has no rows")
    t0 = min(r.t_s for r in rows)
    rows = sorted((Row(r.t_s - t0, r.input_tokens, r.output_tokens, r.hash_ids, r.where) for r in rows),
                  key=lambda r: r.t_s)  # fmt: skip
    kept = [r for r in rows if (spec.start_s is None or r.t_s >= spec.start_s)
            and (spec.end_s is None or r.t_s < spec.end_s)]  # fmt: skip
    if not kept:
        raise UserError(f"trace {p}: no row within --start {spec.start_s} and --end {spec.end_s} "
                        f"(its rows span 0-{rows[-1].t_s:g} s)")  # fmt: skip
    span = (kept[-1].t_s - kept[0].t_s) * spec.time_scale
    if not span <= MAX_REPLAY_S:  # each time is finite, but no one waits for the last row (inf: nor counts to it)
        raise UserError(f"trace {p}: its {kept[-1].t_s - kept[0].t_s:g} s times --time-scale {spec.time_scale:g} "
                        f"is no schedule a replay can keep (at most {MAX_REPLAY_S:g} s, ten years)")  # fmt: skip
    # every kept row becomes a prompt of its own length, made before the replay starts
    if len(kept) > MAX_REQUESTS:
        raise UserError(f"trace {p}: {len(kept):,} rows to replay, more than a run plans (at most "
                        f"{MAX_REQUESTS:,}); give --start/--end")  # fmt: skip
    if (made := sum(r.input_tokens for r in kept)) > MAX_TOKENS_MADE:
        raise UserError(f"trace {p}: its rows ask for {made:,} prompt tokens, more than llmbench makes (at most "
                        f"{MAX_TOKENS_MADE:,}); give --start/--end")  # fmt: skip
    return Trace(spec, hashlib.sha256(raw).hexdigest(), kept, len(rows))


def _int(v: Any, where: str, name: str, low: int = 1) -> int:
    """A row's token count (``40``, ``"40"``, ``40.0``); UserError naming the row for anything else, NaN,
    infinity and counts no model reads included."""
    return files.whole(v, where, name, low)


def _float(v: Any, where: str, name: str) -> float:
    try:
        f = float(str(v).strip())
    except ValueError:
        raise UserError(f"{where}: '{name}' must be a number, not {v!r}") from None
    if not 0 <= f < math.inf:  # NaN fails this too; an infinite time would never come
        raise UserError(f"{where}: '{name}' must be a time of 0 or more, not {v!r}")
    return f


def _mooncake(p: Path, text: str) -> list[Row]:
    rows = []
    for where, obj in files.jsonl_objects(p, text):
        missing = [k for k in ("timestamp", "input_length", "output_length") if k not in obj]
        if missing:
            raise UserError(f"{where}: no {', '.join(repr(k) for k in missing)} (Mooncake rows have timestamp, "
                            "input_length, output_length, hash_ids)")  # fmt: skip
        ids = obj.get("hash_ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(h, (int, str)) for h in ids)):
            raise UserError(f"{where}: 'hash_ids' must be a list of ids, not {ids!r}"[:300])
        rows.append(Row(_float(obj["timestamp"], where, "timestamp") / 1000.0,
                        _int(obj["input_length"], where, "input_length"),
                        _int(obj["output_length"], where, "output_length"),
                        tuple(ids) if ids else None, where))  # fmt: skip
    return rows


def _burstgpt(p: Path, text: str) -> list[Row]:
    rows = []  # the whole file read first: a broken CSV is refused before any row's value
    for where, row in list(files.csv_rows(p, text, ("Timestamp", "Request tokens", "Response tokens"), "BurstGPT")):
        # a failed request is logged with 0 response tokens: it still arrived, so it is sent, for one token
        out = _int(row["Response tokens"], where, "Response tokens", low=0)
        rows.append(Row(_float(row["Timestamp"], where, "Timestamp"), _int(row["Request tokens"], where,
                        "Request tokens"), max(out, 1), None, where))  # fmt: skip
    return rows


def _azure(p: Path, text: str) -> list[Row]:
    rows = []  # the whole file read first, as above
    for where, row in list(files.csv_rows(p, text, ("TIMESTAMP", "ContextTokens", "GeneratedTokens"), "Azure")):
        stamp = str(row["TIMESTAMP"]).strip()
        try:
            # the published traces carry 7 digits of fractions (100 ns): datetime takes 6
            head, _, frac = stamp.partition(".")
            t = datetime.fromisoformat(f"{head}.{frac[:6]}" if frac else head).timestamp()
        except ValueError:
            raise UserError(f"{where}: 'TIMESTAMP' must be a date and time, not {stamp!r}") from None
        rows.append(Row(t, _int(row["ContextTokens"], where, "ContextTokens"),
                        _int(row["GeneratedTokens"], where, "GeneratedTokens"), None, where))  # fmt: skip
    return rows


def prefix_reuse_expected(rows: list[Row]) -> float:
    """The share of prompt tokens a prefix cache could serve: per row, its leading blocks whose ids appeared in
    earlier rows (the chain: after the first new id, nothing further is cached), full blocks only."""
    seen: set[Any] = set()
    total = reusable = 0
    for r in rows:
        total += r.input_tokens
        if not r.hash_ids:
            continue
        full = r.input_tokens // BLOCK_TOKENS
        for j, h in enumerate(r.hash_ids[:full]):
            if h not in seen:
                break
            reusable += BLOCK_TOKENS if j < full else 0
        seen.update(r.hash_ids)
    return reusable / total if total else 0.0


# ------------------------------------------------------------------------------------------------ the prompts


def synthesize(trace: Trace, tokenizer: Any, count: Callable[[str], int], text_count: Callable[[str], int],
               ) -> PromptSet:  # fmt: skip
    """Row i's prompt, of exactly its ``input_length`` as ``count`` (the run's own, template included) says;
    ``text_count``: a text's tokens alone (a block's). Output lengths: the rows' own."""
    corpus = Corpus.of(tokenizer, one_line=True)
    blocks: dict[Any, str] = {}
    overhead = count("x") - text_count("x")  # the template's tokens around the user's text
    prompts = []
    lengthened: list[str] = []  # rows shorter than the template alone: sent at template + 1 token
    for i, row in enumerate(trace.rows):
        body = row.input_tokens - overhead
        if body < 1:
            lengthened.append(row.where)
            body = 1
        n_blocks = -(-body // BLOCK_TOKENS)
        keys = list(row.hash_ids or [])[:n_blocks]
        keys += [("row", i, j) for j in range(len(keys), n_blocks)]  # no id: a block of this row's own
        full = [block(k, blocks, corpus, text_count, BLOCK_TOKENS) for k in keys[:-1]]
        last = body - BLOCK_TOKENS * (n_blocks - 1)
        target = overhead + body
        prompts.append(fit("".join(full), keys[-1], last, target, row.where, corpus, count))
    own = tuple(r.output_tokens for r in trace.rows)
    digest = hashlib.sha256(json.dumps([prompts, own], ensure_ascii=False).encode("utf-8")).hexdigest()
    source = {"version": 1, "path": trace.spec.path, "format": f"trace:{trace.spec.format}",
              "file_sha256": trace.sha256, "prompt_column": None, "output_len_column": None,
              "output_tokens_from": "trace", "output_tokens": list(own), "entries": trace.total_rows,
              "kept": len(prompts), "rows": [r.where for r in trace.rows], "template_tokens": overhead,
              "lengthened_rows": lengthened}  # fmt: skip
    # the warm-up: as long as the shortest row, in blocks of its own (no row's prefix)
    shortest = max(min(r.input_tokens for r in trace.rows), overhead + 1)
    warm = fit("", ("warm-up",), shortest - overhead, shortest, "the warm-up", corpus, count)
    return PromptSet(f"trace:{trace.spec.path}", digest, tuple(prompts), tuple(range(1, len(prompts) + 1)), own,
                     source, cold_rows(trace.rows), (warm,))  # fmt: skip


def cold_rows(rows: list[Row]) -> tuple[bool, ...] | None:
    """Per row: True when no earlier row had its first block (it sends its prefix first); None when the trace
    has no hash ids (no structure to say)."""
    if not any(r.hash_ids for r in rows):
        return None
    seen: set[Any] = set()
    out = []
    for r in rows:
        first = r.hash_ids[0] if r.hash_ids and r.input_tokens >= BLOCK_TOKENS else None
        out.append(first is None or first not in seen)
        seen.update(r.hash_ids or ())
    return tuple(out)
