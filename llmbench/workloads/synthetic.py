"""Prompts of exact token lengths, cut reproducibly from a text llmbench ships (``data/corpus.txt``).

Twenty hand-written prompts can't say how TTFT grows with prompt length (within one length group the seed's
TTFT still varied by 400-650 ms); prompts of controlled lengths can. A prompt of T tokens is a window of the
tokenized corpus (varied English and Chinese prose, so no kernel or cache sees one token repeated) starting at
an offset drawn from the seed, decoded to text, and resized until the run's own count of the prompt (chat
template and system prompt included, exactly as ``prompt_tokens`` is counted) is T (:mod:`llmbench.workloads.text`
cuts it). The prompts are a function of (seed, T, count, tokenizer, template, corpus); ``config.synthetic`` records
all but the tokenizer, which the model names.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads.limits import MAX_TOKENS_MADE
from llmbench.workloads.prompts import MAX_PROMPT_TOKENS, MAX_REQUESTS, PromptSet
from llmbench.workloads.text import MAX_SHIFTS, Corpus, Shape, corpus_sha256, exact
from llmbench.workloads.text import corpus_text as corpus_text  # re-exported: what the prompts are cut from

# a window of the corpus as it decodes (not stripped), resized 20 times, then cut character by character
SHAPE = Shape(tries=20, cut=4)

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
        if spec.tokens * spec.count > MAX_TOKENS_MADE:  # each prompt is text held in memory before the run
            raise UserError(f"--synthetic '{text}': {spec.tokens * spec.count:,} prompt tokens in all, more than "
                            f"llmbench makes (at most {MAX_TOKENS_MADE:,})")  # fmt: skip
        return spec

    @property
    def name(self) -> str:
        """What ``config.prompt_file`` says for these prompts."""
        return f"synthetic:{self.tokens}x{self.count}:seed{self.seed}"


def synthetic_record(spec: SyntheticSpec, **extra: Any) -> dict[str, Any]:
    """``config.synthetic``: what, with the model's tokenizer, reproduces the prompts."""
    return {"tokens": spec.tokens, "count": spec.count, "seed": spec.seed, "generator": GENERATOR_VERSION,
            "corpus_sha256": corpus_sha256(), **extra}  # fmt: skip


def make(spec: SyntheticSpec, tokenizer: Any, count_tokens: Callable[[str], int]) -> PromptSet:
    """``spec.count`` prompts whose ``count_tokens`` is exactly ``spec.tokens`` each; UserError when the
    template alone is longer."""
    corpus = Corpus.of(tokenizer)
    floor = count_tokens("x")
    if spec.tokens < floor:
        raise UserError(
            f"--synthetic {spec.tokens}x{spec.count}: a prompt can't be shorter than {floor} tokens here (the chat "
            "template and system prompt with one token of text)"
        )
    guess = max(1, spec.tokens - count_tokens(""))
    prompts = []
    for k in range(spec.count):
        offset = random.Random(f"{spec.seed}:{spec.tokens}:{k}").randrange(len(corpus.ids))
        prompt = exact(corpus, offset, spec.tokens, count_tokens, guess, SHAPE)
        if prompt is None:
            raise UserError(f"could not make a prompt of exactly {spec.tokens} tokens from the corpus near offset "
                            f"{offset} ({MAX_SHIFTS} windows tried): this tokenizer and template can't reach that "
                            "count")  # fmt: skip
        prompts.append(prompt)
    return PromptSet.from_list(prompts, name=spec.name)
