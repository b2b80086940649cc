"""Structured output for ``llmbench serve``: a JSON schema compiled into a grammar by llguidance (Microsoft's
constrained decoder, the one vLLM and SGLang ship; no dependencies of its own, a CPU build on PyPI) and applied
as a mask on each step's logits, so a model can only write tokens that keep its answer inside the schema.

A server compiles a schema the first time it sees it and keeps the compiled grammar (vLLM's and SGLang's grammar
caches do the same): a request with a new schema pays the compile inside its wait, later ones copy the cached
matcher (microseconds). :class:`Grammars` is that cache, bounded. What every schema shares is built once, with it:
the tokenizer's token table for llguidance (0.3 s for SmolLM2's 49,152 tokens, 1.6 s for Qwen2.5's 151,936), and
llguidance's torch mask, whose import and first call compile TorchScript (1.7 s and 1.4 s here): 5.6 s in all for
Qwen2.5. ``llmbench serve --grammars`` says when: in the first request that asks (the default: a server that never
sees a schema never pays; that request's wait shows it), or before listening (``start``), or never (``off``).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import OrderedDict
from typing import Any

from transformers import LogitsProcessor

MAX_GRAMMARS = 256  # compiled schemas kept; the least recently used goes first


def available() -> bool:
    """Whether llguidance is installed (``pip install 'llmbench[serve]'`` brings it)."""
    import importlib.util

    return importlib.util.find_spec("llguidance") is not None


class Grammars:
    """Compiled JSON-schema grammars for one tokenizer and vocabulary, cached by the schema's canonical JSON."""

    def __init__(self, tokenizer: Any, vocab_size: int) -> None:
        import llguidance.hf
        import llguidance.torch
        import torch

        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size)
        self.vocab_size = vocab_size
        self._cache: OrderedDict[str, Any] = OrderedDict()
        self._lock = threading.Lock()  # requests compile on threads: one compile of a schema, however many ask
        self.compiles = 0
        # the mask's TorchScript compiled now (its first call), not in the first constrained request's wait
        mask = llguidance.torch.allocate_token_bitmask(1, vocab_size)
        llguidance.torch.apply_token_bitmask_inplace(torch.zeros(1, vocab_size), mask)

    def matcher(self, schema: dict[str, Any]) -> tuple[Any, float, bool]:
        """(a fresh matcher for ``schema``, the compile's milliseconds (0 when cached), whether it was compiled
        now). ValueError (a 400) for a schema llguidance can't compile. Thread-safe."""
        with self._lock:
            return self._matcher(schema)

    def _matcher(self, schema: dict[str, Any]) -> tuple[Any, float, bool]:
        import llguidance

        key = hashlib.sha256(json.dumps(schema, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            return cached.deep_copy(), 0.0, False
        t0 = time.perf_counter()
        try:  # compact separators: a grammar that allows any whitespace lets a model write it forever
            grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, overrides={"whitespace_flexible": False})
        except ValueError as e:
            raise ValueError(f"response_format: the schema can't be compiled: {e}") from None
        compiled = llguidance.LLMatcher(self.tokenizer, grammar, log_level=0)
        if compiled.is_error():
            raise ValueError(f"response_format: the schema can't be compiled: {compiled.get_error()[:200]}")
        ms = (time.perf_counter() - t0) * 1000
        self.compiles += 1
        self._cache[key] = compiled
        if len(self._cache) > MAX_GRAMMARS:
            self._cache.popitem(last=False)
        return compiled.deep_copy(), ms, True


class GrammarProcessor(LogitsProcessor):
    """generate()'s logits processor for one request: each step, the token the model chose last is fed to the
    matcher, and every token the grammar does not allow next is masked (-inf). At the grammar's end only EOS is
    allowed."""

    def __init__(self, matcher: Any, prompt_tokens: int, vocab_size: int) -> None:
        import llguidance.torch

        self.matcher = matcher
        self.prompt_tokens = prompt_tokens
        self.bitmask = llguidance.torch.allocate_token_bitmask(1, vocab_size)

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        import llguidance.torch

        if input_ids.shape[-1] > self.prompt_tokens:  # the model chose a token since the last call
            self.matcher.consume_token(int(input_ids[0, -1]))
        llguidance.torch.fill_next_token_bitmask(self.matcher, self.bitmask, 0)
        llguidance.torch.apply_token_bitmask_inplace(scores, self.bitmask.to(scores.device))
        return scores


def schema_of(response_format: dict[str, Any]) -> dict[str, Any]:
    """The schema a response format holds to (OpenAI's ``json_schema``, or ``json_object`` with an optional
    ``schema``: any object without one); ValueError (a 400) for another type or a malformed one."""
    kind = response_format.get("type")
    if kind == "json_schema":
        spec = response_format.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
    elif kind == "json_object":
        schema = response_format.get("schema", {"type": "object"})
    else:
        raise ValueError(f"response_format type {kind!r}: llmbench serve constrains json_schema and json_object")
    if not isinstance(schema, dict):
        raise ValueError("response_format: the schema must be a JSON object")
    return schema
