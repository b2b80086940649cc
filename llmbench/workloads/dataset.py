"""Datasets as prompt sources: ShareGPT ``.json``, ``.jsonl``, ``.csv``, ``.parquet``, or a folder written by
``datasets``' ``save_to_disk``, with columns mapped, filtered by the run's own token count and sampled.

The two steps are apart because the second needs the run's tokenizer:

- :func:`read` (no tokenizer) reads the file into :class:`Rows`: each entry's prompt (ShareGPT: the first human
  turn), its output length where a column gives one, its reply (ShareGPT: the answer to that turn), and where it
  came from (``file:line`` or ``file:row``). A bad file, a missing column or a bad value is one UserError.
- :func:`select` keeps what the filters allow: entries are visited in file order, or, with ``num_prompts``, in
  an order drawn from ``seed`` until that many are kept (as vLLM's samplers do, so a filter doesn't shrink the
  set), counted by ``count`` exactly as the run counts ``prompt_tokens`` (chat template and system prompt
  included). An output length becomes that request's ``max_tokens`` (EOS ignored); a ShareGPT reply's length
  is its tokens as the run's tokenizer counts them without the template (vLLM's convention).

The prompt set's ``sha256`` is that of the selection (prompts and output lengths), so two runs pair in compare
exactly when they sent the same requests; ``source`` (``config.prompt_source``) records the file's own hash and
every choice. Readers (:mod:`llmbench.workloads.files`): the standard library for JSON and CSV, pyarrow for Parquet,
``datasets`` for its folders. Which counter counts is the caller's to choose (:mod:`llmbench.drivers.workload`: the
run's backend, or a command's ``--tokenizer``); this module takes the counts it is given.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError, read_user_file
from llmbench.workloads import files, formats
from llmbench.workloads.limits import MAX_PROMPT_TOKENS, MAX_REQUESTS
from llmbench.workloads.prompts import PromptSet
from llmbench.workloads.source import describe as describe  # re-exported: run, show and compare print it

FORMATS = tuple(formats.FORMATS)  # --prompt-format's names (llmbench.workloads.formats)
SOURCE_VERSION = 1


@dataclass(frozen=True)
class DatasetSpec:
    """A dataset as the run's prompts: what to read and which entries to keep."""

    path: str
    format: str | None = None  # None: from the extension (a folder: arrow)
    prompt_column: str | None = None  # None: "prompt" (ShareGPT: the first human turn)
    output_len_column: str | None = None
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    num_prompts: int | None = None
    seed: int = 0

    @property
    def needs_tokenizer(self) -> bool:
        """Whether choosing the entries needs the run's token count (the filters; ShareGPT replies' lengths use
        it where the run has one)."""
        return self.min_prompt_tokens is not None or self.max_prompt_tokens is not None

    def validate(self) -> None:
        if self.format is not None and self.format not in FORMATS:
            raise UserError(f"--prompt-format '{self.format}': expected one of {', '.join(FORMATS)}")
        for name, v in (("--min-prompt-tokens", self.min_prompt_tokens), ("--max-prompt-tokens",
                        self.max_prompt_tokens), ("--num-prompts", self.num_prompts)):  # fmt: skip
            if v is not None and v < 1:
                raise UserError(f"{name} must be at least 1, not {v}")
            most = MAX_REQUESTS if name == "--num-prompts" else MAX_PROMPT_TOKENS
            if v is not None and v > most:
                raise UserError(f"{name} {v}: expected at most {most:,}")
        lo, hi = self.min_prompt_tokens, self.max_prompt_tokens
        if lo is not None and hi is not None and lo > hi:
            raise UserError(f"--min-prompt-tokens {lo} is above --max-prompt-tokens {hi}: nothing could be kept")


@dataclass
class Rows:
    """A dataset's entries as read, before selection."""

    path: str
    format: str
    sha256: str  # of the file's bytes (a folder: of its data files, in order)
    prompts: list[str] = field(default_factory=list)
    output_tokens: list[int | None] = field(default_factory=list)
    replies: list[str | None] = field(default_factory=list)
    where: list[str] = field(default_factory=list)  # file:line or file:row, for messages
    followups: list[tuple[str, ...]] = field(default_factory=list)  # ShareGPT: the later human turns (--turns)
    skipped: dict[str, int] = field(default_factory=dict)  # why entries were not prompts (no human turn, ...)


def is_dataset(path: str | Path, fmt: str | None = None) -> bool:
    """Whether ``path`` is read by this module rather than as a prompt list (.txt, plain .jsonl)."""
    p = Path(path)
    if fmt is not None:
        return fmt not in ("txt",)
    return p.is_dir() or p.suffix.lower() in formats.dataset_suffixes()


def format_of(path: str | Path, fmt: str | None) -> str:
    """The format ``path`` is read as: ``fmt``, else by its extension."""
    if fmt is not None:
        return fmt
    p = Path(path)
    if p.is_dir():
        return "arrow"
    known = formats.by_suffix(p)
    if known is None:
        raise UserError(f"{p}: can't tell the format from '{p.suffix}'; give --prompt-format ({', '.join(FORMATS)})")
    return known.name


def read(spec: DatasetSpec) -> Rows:
    """The entries of ``spec.path`` (see the module docstring); UserError for anything a user must fix."""
    spec.validate()
    p = Path(spec.path)
    if not p.exists():
        raise UserError(f"dataset {p} does not exist")
    fmt = format_of(p, spec.format)
    if fmt == "txt":
        raise UserError(f"{p}: a .txt prompt list has no columns; the dataset options apply to .json, .jsonl, .csv, "
                        ".parquet and save_to_disk folders")  # fmt: skip
    if fmt == "arrow":
        sha, records = files.arrow_rows(p)
    else:
        raw = read_user_file(p, "dataset")
        sha = hashlib.sha256(raw).hexdigest()
        reader = formats.FORMATS[fmt].records
        if reader is not None:
            records = reader(p, raw)
        else:  # a JSON document: a list of objects, or ShareGPT's conversations
            data = files.json_value(p, files.utf8(p, raw, "dataset"))
            if fmt == "sharegpt" or _is_sharegpt(data):
                return _sharegpt(spec, p, sha, data)
            records = _records_of(p, data)
    return _tabular(spec, p, fmt, sha, records)


def _is_sharegpt(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and isinstance(data[0], dict) and "conversations" in data[0]


def _records_of(p: Path, data: Any) -> Iterator[tuple[str, dict]]:
    if not isinstance(data, list):
        raise UserError(f"{p}: expected a JSON list of objects (or ShareGPT conversations), not {type(data).__name__}")
    for i, obj in enumerate(data):
        if not isinstance(obj, dict):
            raise UserError(f"{p}: entry {i}: expected an object, not {type(obj).__name__}")
        yield f"{p}: entry {i}", obj


def _tabular(spec: DatasetSpec, p: Path, fmt: str, sha: str, records: Iterator[tuple[str, dict]]) -> Rows:
    rows = Rows(str(p), fmt, sha)
    column = spec.prompt_column or "prompt"
    for where, rec in records:
        if column not in rec:
            hint = "" if spec.prompt_column else ": give --prompt-column"
            raise UserError(f"{where}: no column '{column}' (columns: {', '.join(map(str, rec)) or 'none'}){hint}")
        prompt = rec[column]
        if not isinstance(prompt, str):
            raise UserError(f"{where}: '{column}' must be text, not {type(prompt).__name__}")
        if not prompt.strip():
            rows.skipped["empty prompt"] = rows.skipped.get("empty prompt", 0) + 1
            continue
        out = None
        if spec.output_len_column is not None:
            if spec.output_len_column not in rec:
                raise UserError(f"{where}: no column '{spec.output_len_column}' (columns: {', '.join(map(str, rec))})")
            out = files.whole(rec[spec.output_len_column], where, spec.output_len_column)
        rows.prompts.append(prompt)
        rows.output_tokens.append(out)
        rows.replies.append(None)
        rows.where.append(where)
    if not rows.prompts:
        raise UserError(f"dataset {p} has no prompts")
    return rows


def _sharegpt(spec: DatasetSpec, p: Path, sha: str, data: Any) -> Rows:
    """ShareGPT: ``[{"conversations": [{"from": "human"|"gpt"|"system", "value": ...}, ...]}, ...]``; the prompt
    is the first human turn, the reply the turn that answers it."""
    if spec.prompt_column is not None or spec.output_len_column is not None:
        raise UserError(f"{p}: ShareGPT has no columns to map; drop --prompt-column/--output-len-column")
    if not isinstance(data, list):
        raise UserError(f"{p}: expected a JSON list of ShareGPT entries, not {type(data).__name__}")
    rows = Rows(str(p), "sharegpt", sha)
    for i, entry in enumerate(data):
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise UserError(f'{p}: entry {i}: expected {{"conversations": [{{"from": ..., "value": ...}}, ...]}}')
        human = next((k for k, t in enumerate(turns) if t.get("from") in ("human", "user")), None)
        if human is None or not isinstance(turns[human].get("value"), str) or not turns[human]["value"].strip():
            rows.skipped["no human turn"] = rows.skipped.get("no human turn", 0) + 1
            continue
        after = turns[human + 1] if human + 1 < len(turns) else None
        reply = after.get("value") if after and after.get("from") in ("gpt", "assistant", "chatgpt") else None
        rows.prompts.append(turns[human]["value"])
        later = [t.get("value") for t in turns[human + 1 :] if t.get("from") in ("human", "user")]
        rows.followups.append(tuple(v for v in later if isinstance(v, str) and v.strip()))
        rows.output_tokens.append(None)
        rows.replies.append(reply if isinstance(reply, str) and reply.strip() else None)
        rows.where.append(f"{p}: entry {i}")
    if not rows.prompts:
        raise UserError(f"dataset {p} has no entry with a human turn")
    return rows


def select(spec: DatasetSpec, rows: Rows, count: Callable[[str], int] | None = None,
           count_reply: Callable[[str], int] | None = None) -> PromptSet:  # fmt: skip
    """The prompt set the filters allow (see the module docstring). ``count``: the run's ``prompt_tokens`` of a
    prompt; ``count_reply``: a reply's tokens (ShareGPT's output lengths; None: the run's --max-new-tokens)."""
    if spec.needs_tokenizer and count is None:
        raise UserError("--min-prompt-tokens/--max-prompt-tokens count with the run's tokenizer: run a model here, "
                        "or give --endpoint a --tokenizer")  # fmt: skip
    order = list(range(len(rows.prompts)))
    if spec.num_prompts is not None:
        random.Random(f"llmbench-dataset:{spec.seed}").shuffle(order)
    kept: list[int] = []
    lengths: list[int | None] = []
    dropped = {"shorter": 0, "longer": 0}
    for i in order:
        if spec.num_prompts is not None and len(kept) == spec.num_prompts:
            break
        if spec.needs_tokenizer:
            assert count is not None
            n = count(rows.prompts[i])
            if spec.min_prompt_tokens is not None and n < spec.min_prompt_tokens:
                dropped["shorter"] += 1
                continue
            if spec.max_prompt_tokens is not None and n > spec.max_prompt_tokens:
                dropped["longer"] += 1
                continue
        out = rows.output_tokens[i]
        reply = rows.replies[i]
        if out is None and reply is not None and count_reply is not None:
            out = max(1, count_reply(reply))
        kept.append(i)
        lengths.append(out)
    if not kept:
        bounds = f"{spec.min_prompt_tokens or 1}..{spec.max_prompt_tokens or 'any'} tokens"
        raise UserError(f"no prompt of {rows.path} is within {bounds} ({dropped['shorter']} shorter, "
                        f"{dropped['longer']} longer)")  # fmt: skip
    if spec.num_prompts is not None and len(kept) < spec.num_prompts:
        raise UserError(f"--num-prompts {spec.num_prompts}: only {len(kept)} entries of {rows.path} pass the filters")
    prompts = tuple(rows.prompts[i] for i in kept)
    output_tokens = tuple(lengths) if any(x is not None for x in lengths) else None  # None: the run's own
    source = {
        "version": SOURCE_VERSION,
        "path": rows.path,
        "format": rows.format,
        "file_sha256": rows.sha256,
        "prompt_column": None if rows.format == "sharegpt" else (spec.prompt_column or "prompt"),
        "output_len_column": spec.output_len_column,
        "output_tokens_from": ("column" if spec.output_len_column else "reply") if output_tokens else None,
        "output_tokens": None,  # set by with_lengths, once the run's max_new_tokens fills the gaps
        "min_prompt_tokens": spec.min_prompt_tokens,
        "max_prompt_tokens": spec.max_prompt_tokens,
        "num_prompts": spec.num_prompts,
        "seed": spec.seed if spec.num_prompts is not None else None,
        "entries": len(rows.prompts) + sum(rows.skipped.values()),
        "kept": len(kept),
        "dropped_shorter": dropped["shorter"],
        "dropped_longer": dropped["longer"],
        "skipped": dict(rows.skipped),
        "rows": [rows.where[i] for i in kept],
    }
    where = {i: rows.where[k] for i, k in enumerate(kept)}
    line_numbers = tuple(_line(where[i], i) for i in range(len(kept)))
    followups = tuple(rows.followups[i] for i in kept) if rows.followups else None
    return PromptSet(rows.path, _digest(prompts, output_tokens), prompts, line_numbers, output_tokens, source,
                     followups=followups)  # fmt: skip


def _digest(prompts: tuple[str, ...], output_tokens: tuple[int | None, ...] | None) -> str:
    return hashlib.sha256(json.dumps([prompts, output_tokens], ensure_ascii=False).encode("utf-8")).hexdigest()


def with_lengths(prompts: PromptSet, default: int) -> PromptSet:
    """Every request's own output length: an entry the data gave none (a ShareGPT turn without a reply) asks for
    ``default`` (the run's --max-new-tokens). The hash covers the lengths, so runs pair only when they match."""
    if prompts.output_tokens is None:
        return prompts
    lengths = tuple(default if x is None else x for x in prompts.output_tokens)
    source = {**(prompts.source or {}), "output_tokens": list(lengths), "default_output_tokens": default}
    return dataclasses.replace(prompts, sha256=_digest(prompts.prompts, lengths), output_tokens=lengths,
                               source=source)  # fmt: skip


def _line(where: str, i: int) -> int:
    """A number for ``PromptSet.where``: the file's line where there is one, else the entry's place + 1."""
    tail = where.rsplit(":", 1)[-1].strip()
    return int(tail) if tail.isdigit() else i + 1


def load(spec: DatasetSpec) -> PromptSet:
    """Read and select without a tokenizer (no token filters asked for; ShareGPT replies then give no lengths)."""
    return select(spec, read(spec))


def counts(spec: DatasetSpec, rows: Rows) -> bool:
    """Whether choosing the entries needs the run's tokenizer: token filters, or ShareGPT replies to measure."""
    return spec.needs_tokenizer or any(r is not None for r in rows.replies)


def apply_lengths(prompts: PromptSet, options: Any) -> PromptSet:
    """A dataset with output lengths: each request asks for its own (an entry without one: ``options``'
    max_new_tokens), EOS ignored; ``options.max_new_tokens`` (the context check's and the static cache's bound,
    and the record's) becomes the largest. ``options``: the run's :class:`RunOptions`, changed in place."""
    prompts = with_lengths(prompts, options.max_new_tokens)
    if prompts.output_tokens:
        options.max_new_tokens = max(x for x in prompts.output_tokens if x is not None)
        options.ignore_eos = True
    return prompts
