"""The prompt sets llmbench ships: ``llmbench/data/prompts/NAME.txt`` or ``NAME.jsonl`` (package data, in the
wheel), addressed by ``NAME`` (``llmbench run env_violations``) and listed by ``llmbench prompts``. A ``.jsonl`` set
may ask for tool calls or structured output, or hold agent tasks (:mod:`llmbench.workloads.tools`).

A set's description is its file's first line when that is a ``#`` comment, else :data:`DESCRIPTIONS` (a shipped
file's bytes are its identity: ``prompt_sha256`` pairs runs in compare, so a description is never written into a
file that already shipped). What a name resolves to is recorded as ``shipped:NAME`` (see :func:`label`): the same
on every machine, wherever the package is installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

FOLDER = "data/prompts"  # inside the llmbench package
SUFFIXES = (".txt", ".jsonl")
LABEL_PREFIX = "shipped:"  # config.prompt_file of a run whose PROMPTS named a shipped set

DESCRIPTIONS = {
    "env_violations": "Environmental violations, in Chinese: one short report a line",
}


def _stem(file_name: str) -> str | None:
    """A shipped file's set name (None: not a set's file)."""
    return next((file_name.removesuffix(s) for s in SUFFIXES if file_name.endswith(s)), None)


@dataclass(frozen=True)
class ShippedSet:
    """One shipped prompt set."""

    name: str
    path: Path  # the file, where the package is installed
    prompts: int  # prompts in it: lines that are neither blank nor a # comment
    description: str

    def as_dict(self) -> dict[str, str | int]:
        return {"name": self.name, "prompts": self.prompts, "description": self.description, "file": str(self.path)}


def _folder() -> Path:
    # llmbench is a regular package on disk (never imported from a zip): files() is a pathlib.Path
    return Path(str(resources.files("llmbench").joinpath(FOLDER)))


def names() -> list[str]:
    """The shipped sets' names, sorted."""
    folder = _folder()
    if not folder.is_dir():
        return []
    return sorted(name for p in folder.iterdir() if p.is_file() and (name := _stem(p.name)) is not None)


def find(text: str | Path) -> Path | None:
    """The shipped file ``text`` names (``NAME``, ``NAME.txt`` or ``NAME.jsonl``, no folder), or None."""
    name = str(text)
    if not name or "/" in name or "\\" in name or name in (".", ".."):
        return None
    stem = _stem(name)
    files = [_folder() / name] if stem is not None else [_folder() / f"{name}{s}" for s in SUFFIXES]
    if (stem or name) not in names():
        return None
    return next((p for p in files if p.is_file()), None)  # NAME.jsonl names only a .jsonl set


def label(path: Path) -> str:
    """What a run records as its prompt file for the shipped file ``path``: ``shipped:NAME``."""
    return LABEL_PREFIX + (_stem(path.name) or path.name)


def _summary(path: Path) -> tuple[int, str]:
    """(prompt count, description from a first ``#`` line or '') of a shipped file, by load_prompts' rules."""
    text = path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n").replace("\r", "\n")
    lines = [line.strip() for line in text.split("\n")]
    first = next((line for line in lines if line), "")
    description = first.lstrip("#").strip() if first.startswith("#") else ""
    return sum(1 for line in lines if line and not line.startswith("#")), description


def shipped() -> list[ShippedSet]:
    """Every shipped set, by name."""
    out = []
    for name in names():
        path = find(name)
        assert path is not None  # names() lists it
        count, own = _summary(path)
        out.append(ShippedSet(name, path, count, own or DESCRIPTIONS.get(name, "")))
    return out


def unknown_hint() -> str:
    """The end of the error for a PROMPTS that is neither a file nor a shipped name."""
    known = ", ".join(names()) or "none in this install"
    return f"nor is it a prompt set llmbench ships ({known}: see llmbench prompts)"
