"""Texts of exact token lengths, cut reproducibly from the corpus llmbench ships (``data/corpus.txt``): written once,
for ``--synthetic`` (:mod:`llmbench.workloads.synthetic`), ``--prefix-groups`` (:mod:`llmbench.workloads.prefixes`)
and trace replay (:mod:`llmbench.workloads.trace`).

A text of T tokens is a window of the tokenized corpus, starting at an offset (drawn from a seed or a key),
decoded and resized by the count's error until the caller's own count of it is T; where tokens merge across the
window's end so that no window hits T, a longer window is cut character by character, and where even that fails,
the window one token later is tried (:data:`MAX_SHIFTS` of them). Each caller's :class:`Shape` says how a window
becomes its text (stripped or not, a fixed prefix before it, a newline after it); the shapes are those the
prompts were first made with, so the texts (and the prompt sets' hashes, which compare pairs runs by) stay the same.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

from llmbench.core.errors import UserError

MAX_SHIFTS = 64  # windows tried, one token apart, before a length is declared unreachable


def corpus_text() -> str:
    return resources.files("llmbench").joinpath("data/corpus.txt").read_text(encoding="utf-8")


def corpus_sha256() -> str:
    return hashlib.sha256(corpus_text().encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Corpus:
    """The shipped corpus as one tokenizer's ids, and windows of it as text."""

    ids: list[int]
    tokenizer: Any

    @classmethod
    def of(cls, tokenizer: Any, *, one_line: bool = False) -> Corpus:
        """The corpus's ids; ``one_line``: its newlines (and runs of spaces) made single spaces, so that a text
        cut from it has no newline of its own (a block's only newline is the one that ends it)."""
        text = corpus_text()
        text = " ".join(text.split()) if one_line else text
        return cls(tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer)

    def offset(self, key: Any) -> int:
        """Where the text of ``key`` starts: drawn from the key, the same on every machine."""
        return random.Random(f"llmbench-trace-block:{key!r}").randrange(len(self.ids))

    def window(self, offset: int, n: int) -> str:
        """The decoded text of ``n`` tokens (at least 1) from ``offset``, wrapping round the corpus's end."""
        return self.tokenizer.decode([self.ids[(offset + k) % len(self.ids)] for k in range(max(n, 1))])


@dataclass(frozen=True)
class Shape:
    """How a window of the corpus becomes a candidate text: ``prefix + window + suffix``."""

    prefix: str = ""  # before the window (a group's shared prefix)
    suffix: str = ""  # after it (a block's newline)
    strip: bool = False  # the window's text stripped at both ends (and again after each character cut)
    blank: str | None = None  # while resizing, a window that strips to nothing becomes this text
    tries: int = 12  # resizes of one window by the count's error
    cut: int | None = None  # then a window this many tokens longer, cut character by character (None: no cut)


def exact(corpus: Corpus, offset: int, target: int, count: Callable[[str], int], guess: int, shape: Shape = Shape(),
          shifts: int = MAX_SHIFTS) -> str | None:  # fmt: skip
    """A text of ``shape`` whose ``count`` is exactly ``target``, its window's text not blank, from the window at
    ``offset`` (``guess`` tokens long to begin with), else from the next ``shifts - 1`` offsets; None when no
    window reaches the count. Deterministic: the same arguments make the same text."""
    for shift in range(shifts):
        at = (offset + shift) % len(corpus.ids)
        n = guess
        for _ in range(shape.tries):
            piece = _piece(corpus, at, n, shape) or (shape.blank or "")
            text = shape.prefix + piece + shape.suffix
            got = count(text)
            if got == target and piece.strip():
                return text
            n = max(1, n + (target - got))
        if shape.cut is None:
            continue
        # the count jumps over the target at this window's end (tokens merge): grow, then cut characters
        piece = _piece(corpus, at, n + shape.cut, shape)
        while len(piece) > 1 and count(shape.prefix + piece + shape.suffix) > target:
            piece = piece[:-1].rstrip() if shape.strip else piece[:-1]
        if piece.strip() and count(shape.prefix + piece + shape.suffix) == target:
            return shape.prefix + piece + shape.suffix
    return None


def _piece(corpus: Corpus, at: int, n: int, shape: Shape) -> str:
    text = corpus.window(at, n)
    return text.strip() if shape.strip else text


# the keyed texts of shared-prefix workloads (a trace's blocks, a prefix group's prefix, a prompt's own tail)
BLOCK = Shape(suffix="\n", strip=True)


def block(key: Any, cache: dict[Any, str], corpus: Corpus, text_count: Callable[[str], int], tokens: int) -> str:
    """The text of block ``key``: exactly ``tokens`` tokens as ``text_count`` says, a non-space first character,
    a newline last (so what follows can't merge with it); made once per (key, tokens) in ``cache``."""
    if (key, tokens) not in cache:
        text = exact(corpus, corpus.offset(key), tokens, text_count, tokens - 1, BLOCK)
        if text is None:
            raise UserError(f"could not make a block of exactly {tokens} tokens for {key!r}")
        cache[(key, tokens)] = text
    return cache[(key, tokens)]


def fit(prefix: str, key: Any, guess: int, target: int, where: str, corpus: Corpus, count: Callable[[str], int]) -> str:
    """``prefix`` + the start of block ``key`` (about ``guess`` tokens), resized until ``count`` of the whole is
    ``target``."""
    text = exact(corpus, corpus.offset(key), target, count, guess, Shape(prefix=prefix, strip=True, blank="x", cut=2))
    if text is None:
        raise UserError(f"{where}: could not make a prompt of exactly {target} tokens")
    return text
