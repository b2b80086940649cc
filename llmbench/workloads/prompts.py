"""Prompt files: one prompt a line (``.txt``) or ``{"prompt": ...}`` a line (``.jsonl``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from llmbench.core.errors import UserError, read_user_file
from llmbench.workloads import formats, promptsets

# re-exported: the rest of the workloads import the bounds from here
from llmbench.workloads.limits import MAX_PROMPT_TOKENS as MAX_PROMPT_TOKENS
from llmbench.workloads.limits import MAX_REQUESTS as MAX_REQUESTS

if TYPE_CHECKING:
    from llmbench.workloads.request import Request
    from llmbench.workloads.tools import Ask

# files workloads.dataset reads: load_prompts refuses them (a .json or .csv read a line a prompt is never meant)
DATASET_SUFFIXES = formats.dataset_suffixes()


def check_whole(option: str, value: int, low: int = 1, high: int = MAX_REQUESTS, what: str = "") -> int:
    """``value`` when ``low <= value <= high``; else UserError naming ``option`` (``what``: the unit, for the
    message of a value above ``high``)."""
    if value < low:
        raise UserError(f"{option} must be at least {low}, not {value}")
    if value > high:
        raise UserError(f"{option} {value}: more than llmbench can make or run (at most {high:,}{what})")
    return value


# config.prompt_file of prompts given in code (llmbench.measure(["..."])): no file holds them to measure again
IN_MEMORY = "<list>"


@dataclass(frozen=True)
class PromptSet:
    """The prompts of one file, in order, with the file's identity."""

    path: str
    sha256: str  # of the file's bytes: compare uses it to decide whether requests can be paired
    prompts: tuple[str, ...]
    line_numbers: tuple[int, ...]  # 1-based line of each prompt, for error messages
    # a dataset's own output lengths (workloads.dataset): each request asks for exactly its prompt's, EOS ignored
    output_tokens: tuple[int | None, ...] | None = None
    source: dict[str, Any] | None = None  # config.prompt_source: where a dataset's prompts came from and how
    # a workload with shared prefixes (a trace's hash ids): whether each prompt is the first to send its prefix;
    # a repeat after the first is warm whatever the prompt
    cold: tuple[bool, ...] | None = None
    # what warm-ups send instead of the list's last prompts: the workload's shape, sharing none of its prefixes
    # (a warm-up must not fill a server's prefix cache with a prompt before its time)
    warmup: tuple[str, ...] | None = None
    # --turns (workloads.sessions): each prompt's (conversation, turn); before expansion, the data's own later user
    # turns per prompt (a ShareGPT conversation's)
    turns: tuple[tuple[int, int], ...] | None = None
    followups: tuple[tuple[str, ...], ...] | None = None
    # a .jsonl line's tools, tool choice, response format and tool results (workloads.tools); None: none asks any
    asks: tuple[Ask | None, ...] | None = None

    def request(self, index: int, repeat: int, **kw: Any) -> Request:
        """The request of prompt ``index`` (with its own output length, where the data gives one)."""
        from llmbench.workloads.request import Request

        own = self.output_tokens[index] if self.output_tokens is not None else None
        cold = (self.cold[index] and repeat <= 0) if self.cold is not None else None
        conversation, turn = self.turns[index] if self.turns is not None else (None, None)
        ask = self.asks[index] if self.asks is not None else None
        if ask is not None and ask.results and turn:  # an agent task's later step: its tool result, after its latency
            result = ask.results[turn - 1]
            kw = {"tool_result": result, "think_s": result.latency_ms / 1000, **kw}
        return Request(self.prompts[index], index, repeat, max_new_tokens=own, cold=cold, conversation=conversation,
                       turn=turn, ask=ask, **kw)  # fmt: skip

    @classmethod
    def from_list(cls, prompts: Sequence[str], name: str = IN_MEMORY) -> PromptSet:
        """Prompts given in code; ``sha256`` is that of the file that would hold them one a line."""
        items = tuple(prompts)
        if not items:
            raise UserError("no prompts given")
        for i, prompt in enumerate(items, start=1):
            if not isinstance(prompt, str) or not prompt.strip():
                raise UserError(f"prompt {i} is empty or not a string")
        text = "".join(f"{x}\n" for x in items)
        return cls(name, hashlib.sha256(text.encode("utf-8")).hexdigest(), items, tuple(range(1, len(items) + 1)))

    def text_only(self, command: str) -> PromptSet:
        """This set, for ``command``, which sends prompts alone: UserError when a line asks for tools or a response
        format (only a server reads them: ``run``/``load --endpoint``), never dropped unseen."""
        if self.asks is not None:
            raise UserError(f"{command} sends prompts alone: {self.path} asks for tools or a response_format, which "
                            "a server reads (llmbench run or load --endpoint URL)")  # fmt: skip
        return self

    def where(self, index: int) -> str:
        """``file:line`` of prompt ``index``, for error messages."""
        return f"{self.path}:{self.line_numbers[index]}"


def as_prompt_set(prompts: PromptSet | str | Path | Sequence[str]) -> PromptSet:
    """A prompt file's path, a list of prompts, or a PromptSet -> a PromptSet."""
    if isinstance(prompts, PromptSet):
        return prompts
    if isinstance(prompts, (str, Path)):
        return load_prompts(prompts)
    return PromptSet.from_list(prompts)


def load_prompts(path: str | Path, *, as_lines: bool = False) -> PromptSet:
    """Read a prompt file.

    Accepts UTF-8 with or without BOM and LF or CRLF line ends. Blank lines and lines whose first
    non-blank character is ``#`` are skipped. A ``.jsonl`` file holds one JSON object a line with a
    string field ``prompt``. Raises :class:`UserError` naming the file (and line) for anything else, and for
    a dataset (``.json``, ``.csv``, ``.parquet``, ``.arrow``: its lines are not prompts) unless ``as_lines``
    (``--prompt-format txt``: the user said so).

    A ``path`` that does not exist and names no folder may name a prompt set llmbench ships (``env_violations``
    or ``env_violations.txt``: :mod:`llmbench.workloads.promptsets`); a file that exists always wins. The set's
    ``path`` is then ``shipped:NAME``.
    """
    p = Path(path)
    shipped = None if p.exists() else promptsets.find(path)
    if shipped is not None:
        p = shipped
    if not as_lines and p.suffix.lower() in DATASET_SUFFIXES:
        raise UserError(f"{p} is a dataset ({p.suffix}), not a prompt list: this command reads one prompt a line "
                        '(.txt) or {"prompt": ...} a line (.jsonl); llmbench run reads datasets')  # fmt: skip
    if shipped is None and len(p.parts) == 1 and not p.exists():  # a bare name: a typo'd file, or set
        raise UserError(f"prompt file not found: {p}, {promptsets.unknown_hint()}")
    raw = read_user_file(p, "prompt file")
    if b"\x00" in raw:
        raise UserError(f"prompt file {p} looks binary (it contains NUL bytes); expected UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        bad = raw[: e.start].count(b"\n") + 1
        raise UserError(f"prompt file {p} is not UTF-8 (bad byte at line {bad}); save it as UTF-8") from None

    is_jsonl = p.suffix.lower() in (".jsonl", ".ndjson")
    prompts: list[str] = []
    lines: list[int] = []
    asks: list[Ask | None] = []
    # splitlines() would also split on \x0b, \x1c, \u2028...: inside a prompt those are text, not line ends.
    for number, line in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        prompt, ask = _parse_jsonl_line(p, number, stripped) if is_jsonl else (stripped, None)
        if not prompt.strip():
            raise UserError(f"{p}:{number}: empty prompt")
        prompts.append(prompt)
        lines.append(number)
        asks.append(ask)
    if not prompts:
        raise UserError(f"prompt file {p} has no prompts (only blank lines or # comments)")
    name = promptsets.label(p) if shipped is not None else str(p)
    return PromptSet(name, hashlib.sha256(raw).hexdigest(), tuple(prompts), tuple(lines),
                     asks=tuple(asks) if any(a is not None for a in asks) else None)  # fmt: skip


def _parse_jsonl_line(path: Path, number: int, line: str) -> tuple[str, Ask | None]:
    try:
        obj = json.loads(line)
    except ValueError as e:  # JSONDecodeError, or a number past Python's 4,300-digit limit
        raise UserError(f"{path}:{number}: not valid JSON ({getattr(e, 'msg', e)})") from None
    if not isinstance(obj, dict) or "prompt" not in obj:
        raise UserError(f'{path}:{number}: expected an object with a "prompt" field')
    prompt = obj["prompt"]
    if not isinstance(prompt, str):
        raise UserError(f'{path}:{number}: "prompt" must be a string, not {type(prompt).__name__}')
    from llmbench.workloads.tools import read_ask

    return prompt, read_ask(f"{path}:{number}", obj)
