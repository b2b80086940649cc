"""Every command's synopsis, generated from its spec: the docs' usage blocks (``<!-- synopsis: CMD -->`` and the
fenced block after it) are this text, held by ``tests/unit/test_synopsis.py``; a default changed in the spec shows
in them after ``python -m llmbench.spec.synopsis`` rewrites the docs, with no other edit.

An option is shown with its default (``[--max-new-tokens 256]``), its choices, the default first
(``[--dtype auto|float32|...]``), or as a switch (``[--compile]``, ``[--ignore-eos/--stop-at-eos]``); one without
a default shows what it takes (``[--threads INT]``). Positional arguments come first, required options next, then
the rest in the spec's order.
"""

from __future__ import annotations

import re
import sys
import types
import typing
from pathlib import Path
from typing import Any

from llmbench.spec import RunSpec, Spec, option_of

WIDTH = 116  # the docs' code blocks: 120 with the fence's margin
MARKER = re.compile(r"<!-- synopsis: (\S+) -->\n```text\n.*?\n```", re.S)


def command_specs() -> dict[str, type[Spec]]:
    """Each command with a spec: its name -> its spec (run's, then the others')."""
    from llmbench.spec.commands import SPECS, ServeSpec

    return {"run": RunSpec, **SPECS, "serve": ServeSpec}


def _kind(annotation: Any) -> str:
    """What an option without a default takes: its choices, or its type's name in capitals."""
    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    inner = next(a for a in typing.get_args(annotation) if a is not type(None)) if union else annotation
    if typing.get_origin(inner) is typing.Literal:
        return "|".join(str(c) for c in typing.get_args(inner))
    if typing.get_origin(inner) is list:
        return _kind(typing.get_args(inner)[0]) + " ..."
    if typing.get_origin(inner) is typing.Annotated:  # a bounded item: its type
        return _kind(typing.get_args(inner)[0])
    name = getattr(inner, "__name__", str(inner))
    return {"str": "TEXT", "int": "INT", "float": "NUMBER", "Path": "PATH"}.get(name, name.upper())


def _shown(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return f"{value:g}"
    return str(value)


def term(name: str, fi: Any) -> str:
    """One option as the synopsis shows it (positional arguments in capitals)."""
    extra = fi.json_schema_extra or {}
    if extra.get("argument"):
        return name.upper() if fi.is_required() else f"[{name.upper()}]"
    flag = extra.get("flag") or option_of(name, fi)
    if fi.annotation is bool or (fi.annotation in (typing.Optional[bool], bool | None) and "/" in flag):
        return f"[{flag}]"
    if fi.is_required():
        return f"{flag} {_kind(fi.annotation)}"
    if extra.get("comma"):  # one option, its items comma-separated: the default's, or the item's kind
        shown = ",".join(map(str, fi.default)) if fi.default else f"{_kind(fi.annotation).removesuffix(' ...')},..."
        return f"[{flag} {shown}]"
    if fi.default is None:
        return f"[{flag} {_kind(fi.annotation)}]"
    choices = _kind(fi.annotation).split("|")
    if len(choices) > 1:  # the default first, then the other choices
        return f"[{flag} {'|'.join([_shown(fi.default), *(c for c in choices if c != _shown(fi.default))])}]"
    return f"[{flag} {_shown(fi.default)}]"


def synopsis(command: str) -> str:
    """``llmbench COMMAND ...`` with every option of its spec, wrapped to the docs' width."""
    spec = command_specs()[command]
    fields = spec.fields()
    shown = [(n, fi) for n, (_t, fi) in fields.items() if not (fi.json_schema_extra or {}).get("hidden")]

    def rank(item: tuple[str, Any]) -> int:  # arguments, then required options, then the rest (a stable sort)
        return 0 if (item[1].json_schema_extra or {}).get("argument") else 1 if item[1].is_required() else 2

    words = [term(n, fi) for n, fi in sorted(shown, key=rank)]
    head = f"llmbench {command} "
    lines, line = [], head
    own = ["[--config FILE.toml]", "[--print-config]"] if spec.config_file else []
    own += ["[--config-from RUN.json]"] if spec.config_from else []
    for word in [*words, *own]:
        if len(line) + len(word) > WIDTH and line.strip() != head.strip():
            lines.append(line.rstrip())
            line = " " * len(head)
        line += word + " "
    lines.append(line.rstrip())
    return "\n".join(lines)


def rewrite(text: str) -> str:
    """``text`` (a doc) with each marked usage block replaced by its command's synopsis."""
    return MARKER.sub(lambda m: f"<!-- synopsis: {m[1]} -->\n```text\n{synopsis(m[1])}\n```", text)


def main(docs: Path = Path("docs")) -> int:
    """Rewrite the docs' marked usage blocks in place; print the files changed."""
    for path in sorted(docs.glob("*.md")):
        old = path.read_text(encoding="utf-8")
        new = rewrite(old)
        if new != old:
            path.write_text(new, encoding="utf-8")
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
