"""``--speculative``: how a run drafts tokens for the target model to verify, as the user spells it (no torch).

- ``none``: plain decoding, one token per forward pass of the target (the default).
- ``prompt-lookup[:N[:MAX_NGRAM]]``: prompt lookup (n-gram) decoding. The last ``MAX_NGRAM`` tokens (down to
  one) are looked up in the prompt and the text so far, and up to ``N`` tokens that followed them there are
  proposed; the target checks them all in one forward pass and keeps the longest prefix it agrees with, plus
  its own next token. Defaults 10 and 2 (transformers' and llama-cpp-python's own).
- ``draft:MODEL[:K]``: a smaller draft model (hub id, folder or .gguf, with the target's vocabulary)
  proposes ``K`` tokens a step (default 5), loaded and checked like the target.

With greedy decoding both are lossless: the target keeps only tokens it would have written itself, so the
output must equal the plain run's; llmbench checks that (``lossless``) rather than trusting it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from llmbench.core.errors import UserError

METHODS = ("prompt-lookup", "draft")
DEFAULT_LOOKUP_TOKENS = 10
DEFAULT_MAX_NGRAM = 2
DEFAULT_DRAFT_TOKENS = 5
MAX_DRAFT_TOKENS = 128  # a typo beyond this (a context's worth of guesses per step helps nothing)
MAX_NGRAM = 32
SPELLING = "none, prompt-lookup[:N[:MAX_NGRAM]] or draft:MODEL[:K]"


@dataclass(frozen=True)
class Speculative:
    """One speculative decoding setup: ``method`` and how many tokens a step drafts."""

    method: Literal["prompt-lookup", "draft"]
    draft_tokens: int
    max_ngram: int | None = None  # prompt-lookup only
    draft_model: str | None = None  # draft only

    @property
    def label(self) -> str:
        """The spelling that parses back to this setup (sweep's setup names, compare's rows)."""
        if self.method == "prompt-lookup":
            return f"prompt-lookup:{self.draft_tokens}:{self.max_ngram}"
        return f"draft:{self.draft_model}:{self.draft_tokens}"

    def record(self) -> dict[str, Any]:
        """The run config's ``speculative`` (compare names a difference in any field)."""
        out: dict[str, Any] = {"method": self.method, "draft_tokens": self.draft_tokens}
        if self.method == "prompt-lookup":
            out["max_ngram"] = self.max_ngram
        else:
            out["draft_model"] = self.draft_model
        return out


def _count(text: str, what: str, low: int, high: int) -> int:
    try:
        value = int(text.strip())
    except ValueError:
        raise UserError(f"--speculative: {what} must be a whole number, not '{text}' (expected {SPELLING})") from None
    if not low <= value <= high:
        raise UserError(f"--speculative: {what} must be {low} to {high}, not {value}")
    return value


def parse_speculative(text: str | None) -> Speculative | None:
    """``text`` as ``--speculative`` takes it -> a :class:`Speculative`, None for ``none``/empty; UserError in
    one line for anything else."""
    if text is None:
        return None
    raw = text.strip()
    if raw.lower() in ("", "none", "off", "no"):
        return None
    head, _, rest = raw.partition(":")
    method = head.strip().lower().replace("_", "-")
    if method in ("prompt-lookup", "lookup", "ngram", "pld"):
        parts = rest.split(":") if rest else []
        if len(parts) > 2:
            raise UserError(f"--speculative '{text}': prompt-lookup takes at most N and MAX_NGRAM ({SPELLING})")
        n = _count(parts[0], "N (tokens drafted a step)", 1, MAX_DRAFT_TOKENS) if parts else DEFAULT_LOOKUP_TOKENS
        ngram = _count(parts[1], "MAX_NGRAM", 1, MAX_NGRAM) if len(parts) > 1 else DEFAULT_MAX_NGRAM
        return Speculative("prompt-lookup", n, max_ngram=ngram)
    if method == "draft":
        model, k = rest.strip(), DEFAULT_DRAFT_TOKENS
        last = model.rpartition(":")
        if last[1] and last[2].strip().lstrip("-").isdigit():  # a path may hold ':'; a trailing count is K
            model, k = last[0].strip(), _count(last[2], "K (tokens drafted a step)", 1, MAX_DRAFT_TOKENS)
        if not model:
            raise UserError(f"--speculative '{text}': draft needs a model: draft:MODEL[:K]")
        return Speculative("draft", k, draft_model=model)
    raise UserError(f"--speculative: unknown method '{head}'; expected {SPELLING}")


PREFIX_CACHE_MODES = ("none", "system")
NO_SHARED_PREFIX = ("--prefix-cache system: the prompts share no leading tokens (no --system-prompt, and the chat "
                    "template adds no fixed preamble): there is nothing to cache")  # fmt: skip


def parse_prefix_cache(text: str | None) -> str:
    """``--prefix-cache`` -> ``none`` or ``system``; UserError otherwise."""
    value = (text or "none").strip().lower()
    if value in ("", "off", "no"):
        value = "none"
    if value not in PREFIX_CACHE_MODES:
        raise UserError(f"--prefix-cache: unknown mode '{text}'; expected {' or '.join(PREFIX_CACHE_MODES)}")
    return value
