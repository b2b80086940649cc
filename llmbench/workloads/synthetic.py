"""Prompts of exact token lengths, cut reproducibly from a text llmbench ships (``data/corpus.txt``).

Twenty hand-written prompts can't say how TTFT grows with prompt length (within one length group the seed's
TTFT still varied by 400-650 ms); prompts of controlled lengths can. A prompt of T tokens is a window of the
tokenized corpus (varied English and Chinese prose, so no kernel or cache sees one token repeated) starting at
an offset drawn from the seed, decoded to text, and resized until the run's own count of the prompt (chat
template and system prompt included, exactly as ``prompt_tokens`` is counted) is T. The prompts are a function
of (seed, T, count, tokenizer, template, corpus); ``config.synthetic`` records all but the tokenizer, which the
model names.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads.prompts import MAX_PROMPT_TOKENS, MAX_REQUESTS, PromptSet

GENERATOR_VERSION = 1
_SPEC = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


@dataclass(frozen=True)
class SyntheticSpec:
    """``--synthetic TOKENSxCOUNT``: COUNT different prompts of exactly TOKENS tokens each."""

    tokens: int
    count: int
    seed: int = 0

    @classmethod
    def parse(cls, text: str, seed: int = 0) -> SyntheticSpec:
        m = _SPEC.match(text or "")
        if not m:
            raise UserError(f"--synthetic '{text}': expected TOKENSxCOUNT, e.g. 512x20")
        spec = cls(int(m.group(1)), int(m.group(2)), seed)
        if spec.tokens < 1 or spec.count < 1:
            raise UserError(f"--synthetic '{text}': tokens and count must be at least 1")
        # a typo'd length or count would spin making prompts (or exhaust memory) before anything could refuse it
        if spec.tokens > MAX_PROMPT_TOKENS:
            raise UserError(f"--synthetic '{text}': {spec.tokens} tokens is longer than any model reads (at most "
                            f"{MAX_PROMPT_TOKENS:,})")  # fmt: skip
        if spec.count > MAX_REQUESTS:
            raise UserError(f"--synthetic '{text}': {spec.count} prompts is more than llmbench makes (at most "
                            f"{MAX_REQUESTS:,})")  # fmt: skip
        return spec

    @property
    def name(self) -> str:
        """What ``config.prompt_file`` says for these prompts."""
        return f"synthetic:{self.tokens}x{self.count}:seed{self.seed}"


def synthetic_record(spec: SyntheticSpec, **extra: Any) -> dict[str, Any]:
    """``config.synthetic``: what, with the model's tokenizer, reproduces the prompts."""
    return {"tokens": spec.tokens, "count": spec.count, "seed": spec.seed, "generator": GENERATOR_VERSION,
            "corpus_sha256": corpus_sha256(), **extra}  # fmt: skip


MAX_SHIFTS = 64  # windows tried, one token apart, before a length is declared unreachable


def corpus_text() -> str:
    return resources.files("llmbench").joinpath("data/corpus.txt").read_text(encoding="utf-8")


def corpus_sha256() -> str:
    return hashlib.sha256(corpus_text().encode("utf-8")).hexdigest()


def make(spec: SyntheticSpec, tokenizer: Any, count_tokens: Callable[[str], int]) -> PromptSet:
    """``spec.count`` prompts whose ``count_tokens`` is exactly ``spec.tokens`` each; UserError when the
    template alone is longer."""
    ids = tokenizer(corpus_text(), add_special_tokens=False)["input_ids"]
    floor = count_tokens("x")
    if spec.tokens < floor:
        raise UserError(
            f"--synthetic {spec.tokens}x{spec.count}: a prompt can't be shorter than {floor} tokens here (the chat "
            "template and system prompt with one token of text)"
        )
    prompts = []
    for k in range(spec.count):
        offset = random.Random(f"{spec.seed}:{spec.tokens}:{k}").randrange(len(ids))
        prompts.append(_exact_near(spec.tokens, ids, offset, tokenizer, count_tokens))
    return PromptSet.from_list(prompts, name=spec.name)


def _exact_near(target: int, ids: list[int], offset: int, tokenizer: Any, count_tokens: Callable[[str], int]) -> str:
    """:func:`_exact` at ``offset``, else at the next offsets: where a window's end merges tokens so that no cut
    hits the count exactly (a tokenizer and a template that strip or join whitespace), a window one token
    later does. Deterministic, so the prompts stay reproducible from the seed."""
    for shift in range(MAX_SHIFTS):
        try:
            return _exact(target, ids, (offset + shift) % len(ids), tokenizer, count_tokens)
        except UserError:
            continue
    raise UserError(f"could not make a prompt of exactly {target} tokens from the corpus near offset {offset} "
                    f"({MAX_SHIFTS} windows tried): this tokenizer and template can't reach that count")  # fmt: skip


def _window(ids: list[int], offset: int, n: int) -> list[int]:
    return [ids[(offset + i) % len(ids)] for i in range(max(n, 1))]


def _exact(target: int, ids: list[int], offset: int, tokenizer: Any, count_tokens: Callable[[str], int]) -> str:
    """A prompt of exactly ``target`` counted tokens: a window of the corpus resized by the count's error, then,
    if tokens merge across the window's end, trimmed character by character."""
    n = max(1, target - count_tokens(""))
    for _ in range(20):
        text = tokenizer.decode(_window(ids, offset, n))
        got = count_tokens(text)
        if got == target and text.strip():
            return text
        n = max(1, n + (target - got))
    # the count jumps over the target at this window's end (tokens merge): grow, then cut characters
    text = tokenizer.decode(_window(ids, offset, n + 4))
    while len(text) > 1 and count_tokens(text) > target:
        text = text[:-1]
    if count_tokens(text) == target and text.strip():
        return text
    raise UserError(f"could not make a prompt of exactly {target} tokens from the corpus at offset {offset}")
