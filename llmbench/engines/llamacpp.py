"""llama.cpp through llama-cpp-python: its token loop (``Llama.generate``: eval, sample, yield one id), never
``create_completion(stream=True)``, whose text pieces can cover several tokens.

Per request the context is reset and its KV memory cleared (``generate(reset=True)`` alone keeps the prefix a
prompt shares with the previous one, so a repeated prompt would evaluate one token), and the perf counters
are reset, so ``llama_perf_context``'s ``n_p_eval`` says how many prompt tokens this request evaluated.
"""

from __future__ import annotations

import ctypes
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from llmbench.core.errors import UserError
from llmbench.engines.base import EngineTimers

DEFAULT_CONTEXT = 4096  # KV cells allocated at load; reserve() grows it for longer requests (up to the model's)


class LlamaCppRunner:
    """A GGUF loaded by llama.cpp, generating on the calling thread."""

    def __init__(self, path: Path, threads: int, context: int | None) -> None:
        import llama_cpp

        self.llama_cpp = llama_cpp
        self.path = path
        self.threads = threads
        self.train_context = context
        self.n_ctx = min(context or DEFAULT_CONTEXT, DEFAULT_CONTEXT)
        self.llm = self._open(self.n_ctx)
        self.train_context = int(self.llm._model.n_ctx_train()) or context
        self._scorer: Any = None
        self._metadata = dict(self.llm.metadata)
        self.speculative: Any = None  # core.speculative.Speculative (prompt lookup) or None
        self.prefix: list[int] | None = None  # --prefix-cache: the shared leading ids
        self._prefix_live = False  # the context's first cells hold the prefix's keys and values
        self._reference: Any = None  # a second context for plain generations (the lossless check)

    def _open(self, n_ctx: int, logits_all: bool = False) -> Any:
        try:
            return self.llama_cpp.Llama(
                model_path=str(self.path), n_ctx=n_ctx, n_batch=512, n_ubatch=512, n_threads=self.threads,
                n_threads_batch=self.threads, logits_all=logits_all, flash_attn=False, verbose=False, seed=0,
            )  # fmt: skip
        except (ValueError, RuntimeError) as e:
            raise UserError(f"llama.cpp cannot load {self.path}: {e}") from None

    def reserve(self, tokens: int) -> None:
        """Room for ``tokens`` (the longest prompt + new tokens) in the context, reopened larger when needed."""
        if tokens > self.n_ctx:
            limit = self.train_context or tokens
            if tokens > limit:
                raise UserError(f"{tokens} tokens exceed the model's context of {limit}")
            self.llm.close()
            self.n_ctx = min(limit, max(tokens, 2 * self.n_ctx))
            self.llm = self._open(self.n_ctx)
            self._prefix_live = False
            if self._reference is not None:
                self._reference.close()
                self._reference = None

    def set_levers(self, speculative: Any, prefix_ids: list[int] | None) -> None:
        """--speculative prompt-lookup (llama-cpp-python's LlamaPromptLookupDecoding) and --prefix-cache."""
        if speculative is not None and speculative.draft_tokens + 1 > 512:
            raise UserError(f"--speculative: llama.cpp verifies at most 511 drafts a step (n_batch 512), not "
                            f"{speculative.draft_tokens}")  # fmt: skip
        self.speculative, self.prefix, self._prefix_live = speculative, prefix_ids or None, False

    def generate(
        self,
        ids: list[int],
        max_new_tokens: int,
        eos: frozenset[int] | None,
        on_token: Callable[[int], bool],
        *,
        plain: bool = False,
        reuse_prefix: bool = True,
    ) -> EngineTimers:
        if plain:
            return self._plain(ids, max_new_tokens, eos, on_token)
        lc, llm = self.llama_cpp, self.llm
        ctx = llm._ctx.ctx
        prefix = self.prefix if reuse_prefix and self.prefix and ids[: len(self.prefix)] == self.prefix else None
        cold = None
        lc.llama_perf_context_reset(ctx)  # its counters then cover what this request evaluates, a prefix included
        if prefix is not None and len(ids) > len(prefix):
            cold = not self._prefix_live
            if cold:  # computed inside this request's time: it is the cold one
                self._clear()
                llm.eval(prefix)
                self._prefix_live = True
            llm.n_tokens = len(prefix)  # generate() keeps the cells the prompt shares with input_ids[:n_tokens]
        else:
            self._clear()  # no prefix of an earlier request survives
            self._prefix_live = False
        counts = _Drafting(llm, self.speculative) if self.speculative is not None else None
        steps = llm.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True)
        try:
            for n, token in enumerate(steps, start=1):
                if counts is not None:
                    counts.token()
                go = on_token(int(token))
                if n >= max_new_tokens or not go or (eos is not None and token in eos):
                    break
        finally:
            if counts is not None:
                counts.close()
        perf = lc.llama_perf_context(ctx)
        cached = len(prefix) if prefix is not None and cold is not None else None
        if counts is not None:
            # llama.cpp counts every evaluation of 2+ tokens as prompt time, a verification pass included: its
            # own TTFT/TPOT would mislead here
            return EngineTimers(bundles=counts.bundles, drafted=counts.drafted, accepted=counts.accepted,
                                draft_ms=round(counts.draft_s * 1000, 3))  # fmt: skip
        n_eval = int(perf.n_eval)
        return EngineTimers(
            prompt_tokens_evaluated=int(perf.n_p_eval),
            ttft_ms=round(float(perf.t_p_eval_ms), 3),
            tpot_ms=round(float(perf.t_eval_ms) / n_eval, 4) if n_eval else None,
            cold=cold,
            cached_tokens=None if cached is None else (0 if cold else cached),
        )

    def _clear(self) -> None:
        lc, llm = self.llama_cpp, self.llm
        llm.reset()
        lc.llama_memory_clear(lc.llama_get_memory(llm._ctx.ctx), True)

    def _plain(self, ids: list[int], max_new_tokens: int, eos: frozenset[int] | None,
               on_token: Callable[[int], bool]) -> EngineTimers:  # fmt: skip
        """A plain greedy generation in a context of its own (the measured one keeps its prefix)."""
        if self._reference is None:
            self._reference = self._open(self.n_ctx)
        ref, lc = self._reference, self.llama_cpp
        ref.reset()
        lc.llama_memory_clear(lc.llama_get_memory(ref._ctx.ctx), True)
        steps = ref.generate(ids, top_k=1, top_p=1.0, min_p=0.0, temp=0.0, repeat_penalty=1.0, reset=True)
        for n, token in enumerate(steps, start=1):
            go = on_token(int(token))
            if n >= max_new_tokens or not go or (eos is not None and token in eos):
                break
        return EngineTimers()

    def detokenize(self, ids: list[int]) -> str:
        return self.llm.detokenize(ids, special=False).decode("utf-8", errors="replace")

    def vocab_size(self) -> int:
        return int(self.llm.n_vocab())

    def logprobs(self, ids: list[int]) -> Any:
        """Teacher-forced next-token log-probabilities from a second context that keeps every position's logits
        (``logits_all``), opened on first use."""
        if self._scorer is None or self._scorer.n_ctx() < len(ids):
            if self._scorer is not None:
                self._scorer.close()
            self._scorer = self._open(max(len(ids), 512), logits_all=True)
        s = self._scorer
        s.reset()
        self.llama_cpp.llama_memory_clear(self.llama_cpp.llama_get_memory(s._ctx.ctx), True)
        s.eval(ids)
        logits = np.asarray(s.scores[: len(ids) - 1], dtype=np.float32)
        return _log_softmax(logits)

    def facts(self) -> dict[str, Any]:
        return {
            "n_threads": self.threads, "n_threads_batch": self.threads, "n_ctx": self.n_ctx, "n_batch": 512,
            "n_ubatch": 512, "flash_attn": False, "use_mmap": True, "sampler": "greedy (temp 0)",
            "system_info": self.llama_cpp.llama_print_system_info().decode(errors="replace").strip(" |"),
        }  # fmt: skip

    def precision(self) -> dict[str, Any]:
        return {
            "format": "gguf",
            "weights": gguf_file_type(self._metadata),
            "activations": "f32 (quantized weights: each block's dot product quantizes its activations to the "
            "weights' partner type, e.g. q8_0/q8_1)",
            "kv_cache": "f16",
        }

    def close(self) -> None:
        for llm in (self.llm, self._scorer, self._reference):
            if llm is not None:
                llm.close()


class _Drafting:
    """Prompt lookup on one request: llama-cpp-python's LlamaPromptLookupDecoding as ``draft_model``, its
    proposals counted, and ``eval`` counted per call (one call = one forward pass of the target), so the tokens
    generate() yields between two calls are one bundle.

    Verifying drafts needs every position's logits (``_logits_all``) and a score row per context cell; both are
    switched on after the prompt's evaluation (the first token), so the prompt is not charged for logits the
    plain loop never computes, and switched off at the end.
    """

    def __init__(self, llm: Any, spec: Any) -> None:
        import numpy as np
        from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

        self.llm, self.drafted, self.draft_s = llm, 0, 0.0
        self.bundles: list[int] = []
        self.evals = 0
        self._seen = -1  # eval count at the last token
        lookup = LlamaPromptLookupDecoding(max_ngram_size=spec.max_ngram, num_pred_tokens=spec.draft_tokens)

        def draft(input_ids: Any, **kw: Any) -> Any:
            t = time.perf_counter()
            out = lookup(input_ids, **kw)
            self.draft_s += time.perf_counter() - t
            self.drafted += len(out)
            return out

        inner_eval = type(llm).eval

        def counted_eval(tokens: Any) -> None:
            self.evals += 1
            inner_eval(llm, tokens)

        if llm.scores.shape[0] < llm._n_ctx:  # built for n_batch rows: verifying writes one per cell
            llm.scores = np.zeros((llm._n_ctx, llm._n_vocab), dtype=np.single)
        llm._logits_all = False
        llm.draft_model = draft
        llm.eval = counted_eval

    def token(self) -> None:
        """Called as each token is yielded: a new eval since the last token starts a new bundle."""
        if self.evals != self._seen:
            self._seen = self.evals
            self.bundles.append(1)
        else:
            self.bundles[-1] += 1
        self.llm._logits_all = True  # from the first token on: every later evaluation verifies drafts

    @property
    def accepted(self) -> int:
        return sum(self.bundles) - len(self.bundles)  # each pass adds its own token to the drafts it kept

    def close(self) -> None:
        llm = self.llm
        llm.__dict__.pop("eval", None)
        llm.draft_model = None
        llm._logits_all = False


def gguf_file_type(metadata: dict[str, Any]) -> str:
    """The GGUF's ``general.file_type`` as a name (Q4_1, Q8_0, F16, ...)."""
    import gguf

    raw = metadata.get("general.file_type")
    try:
        return gguf.LlamaFileType(int(raw)).name.removeprefix("MOSTLY_").removeprefix("ALL_")  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(raw or "unknown")


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    m = logits.max(axis=-1, keepdims=True)
    z = logits - m
    return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def load(path: Path, *, threads: int, context: int | None, precision: str | None = None) -> LlamaCppRunner:
    """llama.cpp with ``path`` loaded on ``threads`` threads for prefill and decode alike."""
    return LlamaCppRunner(path, threads, context)


def quantize(src: str, dst: str, precision: str) -> None:
    """``llama_model_quantize``: a f16/f32 GGUF to ``precision`` (q4_0, q4_k_m, ...), all cores."""
    import os

    import llama_cpp

    name = f"LLAMA_FTYPE_MOSTLY_{precision.upper()}"
    if not hasattr(llama_cpp, name):
        raise SystemExit(f"llama.cpp has no file type {precision}")
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, name)
    params.nthread = os.cpu_count() or 1
    t = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(src.encode(), dst.encode(), ctypes.byref(params))
    if rc != 0:
        raise SystemExit(f"llama_model_quantize returned {rc}")
    print(f"quantized to {precision} in {time.perf_counter() - t:.1f} s")


if __name__ == "__main__":  # python -m llmbench.engines.llamacpp quantize SRC DST TYPE (a conversion step)
    if sys.argv[1:2] != ["quantize"] or len(sys.argv) != 5:
        raise SystemExit("usage: python -m llmbench.engines.llamacpp quantize SRC DST TYPE")
    quantize(sys.argv[2], sys.argv[3], sys.argv[4])
