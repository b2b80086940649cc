"""Shared-prefix workloads (``--prefix-groups``): prompts that share a group's prefix, as system prompts, few-shot
examples and long documents do in production, so a server's prefix cache has something to serve.

``--prefix-groups N --prefix-tokens P --suffix-tokens S --num-prompts M [--group-dist uniform|zipf[:A]]``: each
of M prompts belongs to one of N groups, drawn from ``--seed`` (uniform, or Zipf with exponent A, default 1: a few
groups get most prompts, as popular system prompts do). A prompt is its group's prefix, a text of exactly P
tokens, then a suffix of its own, exactly S tokens, so the run's count of it (chat template and system prompt
included) is exactly the template's own tokens + P + S; the prefix ends with a newline and the suffix starts with
a non-space character, a boundary the tokenizer never merges across, so every prompt of a group starts with the
same P tokens (after the template's). Texts are cut from the corpus llmbench ships, like ``--synthetic``.

A prompt is **cold** when it is the first of its group in the order sent (its prefix is new to the server), warm
otherwise; ``prefix_reuse_expected`` = the warm prompts' P tokens over all prompt tokens, beside the server's
``cached_tokens`` (which also counts the template's shared head).
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads.limits import MAX_TOKENS_MADE
from llmbench.workloads.prompts import MAX_PROMPT_TOKENS, PromptSet, check_whole
from llmbench.workloads.text import Corpus, block, fit

GENERATOR_VERSION = 1
_DIST = re.compile(r"^(uniform|zipf)(?::([0-9]+(?:\.[0-9]*)?|\.[0-9]+))?$")


@dataclass(frozen=True)
class PrefixSpec:
    """``--prefix-groups N --prefix-tokens P --suffix-tokens S --num-prompts M [--group-dist D]``."""

    groups: int
    prefix_tokens: int
    suffix_tokens: int
    count: int
    dist: str = "uniform"
    seed: int = 0

    def validate(self) -> None:
        check_whole("--prefix-groups", self.groups)
        check_whole("--num-prompts", self.count)
        for name, v in (("--prefix-tokens", self.prefix_tokens), ("--suffix-tokens", self.suffix_tokens)):
            check_whole(name, v, high=MAX_PROMPT_TOKENS, what=" tokens")
        if self.prefix_tokens + self.suffix_tokens > MAX_PROMPT_TOKENS:
            raise UserError(f"--prefix-tokens {self.prefix_tokens} + --suffix-tokens {self.suffix_tokens}: longer "
                            f"than any model reads (at most {MAX_PROMPT_TOKENS:,} tokens)")  # fmt: skip
        if (made := self.count * (self.prefix_tokens + self.suffix_tokens)) > MAX_TOKENS_MADE:
            raise UserError(f"--num-prompts {self.count} of --prefix-tokens + --suffix-tokens: {made:,} prompt tokens "
                            f"in all, more than llmbench makes (at most {MAX_TOKENS_MADE:,})")  # fmt: skip
        m = _DIST.match(self.dist)
        if not m or (m.group(2) is not None and not 0 < float(m.group(2)) < math.inf):
            raise UserError(f"--group-dist '{self.dist}': expected uniform, zipf or zipf:A with A > 0")

    @property
    def name(self) -> str:
        """What ``config.prompt_file`` says for these prompts."""
        return (f"prefix-groups:{self.groups}x{self.prefix_tokens}+{self.suffix_tokens}x{self.count}:"
                f"{self.dist}:seed{self.seed}")  # fmt: skip

    def group_of(self) -> list[int]:
        """Each prompt's group, drawn from the seed."""
        m = _DIST.match(self.dist)
        assert m is not None
        a = float(m.group(2) or 1.0)
        # (k + 1) ** -a, not 1 / (k + 1) ** a: a large A underflows to 0 instead of overflowing
        weights = [1.0] * self.groups if m.group(1) == "uniform" else [(k + 1) ** -a for k in range(self.groups)]
        return random.Random(f"llmbench-prefix-groups:{self.seed}").choices(range(self.groups), weights, k=self.count)


def make(spec: PrefixSpec, tokenizer: Any, count: Callable[[str], int], text_count: Callable[[str], int],
         ) -> PromptSet:  # fmt: skip
    """The prompts (see the module docstring); UserError when a length can't be reached exactly."""
    spec.validate()
    corpus = Corpus.of(tokenizer, one_line=True)
    cache: dict[Any, str] = {}
    overhead = count("x") - text_count("x")  # the template's own tokens around the user's text
    groups = spec.group_of()
    prompts, seen, cold = [], set(), []
    for j, g in enumerate(groups):
        prefix = block(("prefix", spec.seed, g), cache, corpus, text_count, spec.prefix_tokens)
        target = overhead + spec.prefix_tokens + spec.suffix_tokens
        prompts.append(fit(prefix, ("suffix", spec.seed, j), spec.suffix_tokens, target, f"prompt {j + 1}", corpus,
                           count))  # fmt: skip
        cold.append(g not in seen)
        seen.add(g)
    total = len(prompts) * (overhead + spec.prefix_tokens + spec.suffix_tokens)
    reuse = sum(not c for c in cold) * spec.prefix_tokens / total
    source = {"kind": "prefix-groups", "version": GENERATOR_VERSION, "groups": spec.groups,
              "prefix_tokens": spec.prefix_tokens, "suffix_tokens": spec.suffix_tokens, "count": spec.count,
              "dist": spec.dist, "seed": spec.seed, "template_tokens": overhead, "group_of": groups,
              "groups_used": len(seen), "prefix_reuse_expected": round(reuse, 6)}  # fmt: skip
    digest = hashlib.sha256(json.dumps([prompts, source], ensure_ascii=False).encode("utf-8")).hexdigest()
    # the warm-up: the same shape under a prefix no group has
    warm = block(("prefix", spec.seed, "warm-up"), cache, corpus, text_count, spec.prefix_tokens)
    warm = fit(warm, ("suffix", spec.seed, "warm-up"), spec.suffix_tokens, target, "the warm-up", corpus, count)
    return PromptSet(spec.name, digest, tuple(prompts), tuple(range(1, len(prompts) + 1)), None, source,
                     tuple(cold), (warm,))  # fmt: skip
