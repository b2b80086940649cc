"""A prompt as the model reads it, the same for every engine (no torch here): chat messages, the template, the
token ids, and whether they fit the context."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from llmbench.core.errors import UserError


def messages_for(
    prompt: str, system_prompt: str | None, history: Sequence[dict[str, str]] = ()
) -> list[dict[str, str]]:
    """The chat messages of one prompt: an optional system message, the conversation so far (a session's earlier
    turns: user and assistant), then the user's."""
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*messages, *history, {"role": "user", "content": prompt}]


def chat_inputs(tokenizer: Any, messages: list[dict], use_template: bool,
                tools: list[dict] | None = None) -> tuple[str, bool]:  # fmt: skip
    """(text, add_special_tokens) to tokenize: the chat template with the assistant's turn opened (it holds its
    own special tokens) when ``use_template``, else the contents joined by blank lines. ``tools``: given to the
    template (its tools branch writes them into the system turn)."""
    if use_template:
        kw = {"tools": tools} if tools else {}
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kw), False
    return "\n\n".join(str(m.get("content", "")) for m in messages), True


def encode_ids(tokenizer: Any, messages: list[dict], use_template: bool) -> list[int]:
    """The prompt's token ids, as a list (what the engines other than transformers are fed)."""
    text, special = chat_inputs(tokenizer, messages, use_template)
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def fit_context(prompt_tokens: int, limit: int | None, max_new_tokens: int, truncate: bool, where: str) -> int:
    """How many tokens to cut from the prompt's start so that it and ``max_new_tokens`` fit a context of
    ``limit``; UserError when that is not allowed (``truncate`` off) or impossible."""
    room = (limit - max_new_tokens) if limit else None
    if room is None or prompt_tokens <= room:
        return 0
    if room < 1:
        raise UserError(f"--max-new-tokens {max_new_tokens} leaves no room in the model's context of {limit} tokens")
    if truncate:
        return prompt_tokens - room
    raise UserError(
        f"{where}: the prompt has {prompt_tokens} tokens; with --max-new-tokens {max_new_tokens} that exceeds the "
        f"model's context of {limit} tokens (--truncate cuts it to fit)"
    )


def common_prefix_len(id_lists: Sequence[Sequence[int]]) -> int:
    """How many leading ids every list shares: the shared part of the chat template (system prompt, fixed
    preamble) that a prefix cache can hold. Leaves at least one id of the shortest list to prefill."""
    if not id_lists:
        return 0
    first, n = id_lists[0], min(len(ids) for ids in id_lists)
    for k in range(n):
        if any(ids[k] != first[k] for ids in id_lists[1:]):
            return k
    return max(0, n - 1)


def text_offsets(decode: Any, ids: Sequence[int]) -> list[int]:
    """Where each token's text ends in the answer's text (``decode(ids)``), one offset per token: what a token
    made visible is ``text[offsets[k - 1]:offsets[k]]``. Decoded incrementally, as streaming servers do (Hugging
    Face's text-generation-inference): a window since the last token that decoded cleanly, so a token that ends
    inside a multi-byte character adds nothing until the character is whole, and the work is linear in the
    answer's length (decoding every prefix would be quadratic). ``decode``: ids -> text (special tokens skipped,
    as the recorded ``output_text`` is)."""
    offsets: list[int] = []
    shown, prefix, read = 0, 0, 0
    for k in range(1, len(ids) + 1):
        before = decode(list(ids[prefix:read]))
        after = decode(list(ids[prefix:k]))
        if len(after) > len(before) and not after.endswith("\ufffd"):
            shown += len(after) - len(before)
            prefix, read = read, k
        offsets.append(shown)
    return offsets
