"""The file formats prompts are read from, one entry each: the name ``--prompt-format`` takes, the suffixes that
tell it, and its reader.

A new format is a reader (in :mod:`llmbench.workloads.files`, or a module of its own) and one :class:`Format` in
:data:`FORMATS`; :mod:`llmbench.workloads.dataset` maps its records' columns (``--prompt-column``,
``--output-len-column``) like any other table's, and a prompt file of that suffix is refused as a prompt list.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from llmbench.workloads import files


@dataclass(frozen=True)
class Format:
    """One format: ``records`` reads a table from (the file, its bytes); None: read apart (a prompt list, a JSON
    document that may be ShareGPT's, a ``save_to_disk`` folder). ``prompt_list``: without dataset options, such a
    file is a prompt list (one prompt a line, or ``{"prompt": ...}`` a line)."""

    name: str
    suffixes: tuple[str, ...]
    records: Callable[[Path, bytes], files.Records] | None = None
    prompt_list: bool = False


def _text(reader: Callable[[Path, str], files.Records]) -> Callable[[Path, bytes], files.Records]:
    return lambda p, raw: reader(p, files.utf8(p, raw, "dataset"))


# in the order --prompt-format's messages list them
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format("txt", (".txt",), prompt_list=True),
    Format("jsonl", (".jsonl", ".ndjson"), _text(files.jsonl_objects), prompt_list=True),
    Format("json", (".json",)),  # a list of objects, or ShareGPT conversations
    Format("sharegpt", ()),
    Format("csv", (".csv",), _text(files.csv_rows)),
    Format("parquet", (".parquet",), lambda p, raw: files.parquet_rows(p)),
    Format("arrow", (".arrow",)),  # a folder written by datasets' save_to_disk
)}  # fmt: skip


def by_suffix(path: str | Path) -> Format | None:
    """The format ``path``'s suffix tells, or None."""
    suffix = Path(path).suffix.lower()
    return next((f for f in FORMATS.values() if suffix in f.suffixes), None)


def dataset_suffixes() -> tuple[str, ...]:
    """The suffixes of files that are datasets, never prompt lists."""
    return tuple(s for f in FORMATS.values() if not f.prompt_list for s in f.suffixes)
