"""The random-weights cache: built once, memory-mapped after, bit for bit the weights an in-memory build makes;
one builder among processes racing on a cold cache; broken entries rebuilt; an unwritable cache never fatal.

This file: the part that needs a loaded tokenizer or model (tests/integration); the rest is in
tests/unit/test_weights_cache.py."""

from __future__ import annotations

import pytest

from llmbench.engines.hf import models
from tests.unit.test_weights_cache import (
    cache,  # noqa: F401 (fixtures)
    entries,
)


def test_the_builtin_tokenizer_comes_back_the_same_from_the_cache(cache, monkeypatch, qwen_tokenizer):
    from llmbench.engines.hf import builtin

    warnings: list[str] = []
    models._builtin_tokenizer(warnings)  # builds and saves it
    monkeypatch.setattr(builtin, "qwen_tokenizer", lambda: pytest.fail("built again instead of loaded"))
    tok = models._builtin_tokenizer(warnings)
    assert warnings == [] and len(entries(cache, "tokenizers")) == 1
    assert tok.backend_tokenizer.to_str() == qwen_tokenizer.backend_tokenizer.to_str()
    assert tok.chat_template == qwen_tokenizer.chat_template
    assert (tok.eos_token_id, tok.pad_token_id) == (qwen_tokenizer.eos_token_id, qwen_tokenizer.pad_token_id)
    for text in ("某工厂夜间偷排废水 12345", "A plant <|im_end|> dumps\n\n water  at night"):
        assert tok(text)["input_ids"] == qwen_tokenizer(text)["input_ids"]
    chat = [{"role": "user", "content": "hi"}]
    assert tok.apply_chat_template(chat, add_generation_prompt=True) == qwen_tokenizer.apply_chat_template(
        chat, add_generation_prompt=True
    )
