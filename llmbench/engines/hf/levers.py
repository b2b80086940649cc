"""The two levers transformers pulls in-process beyond the plain loop: speculative decoding (prompt lookup or a
draft model, ``--speculative``) and a shared prefix's keys and values computed once (``--prefix-cache system``).

Speculative decoding hands the streamer a bundle per forward pass of the target (the drafts it accepted and its
own token, transformers' ``_assisted_decoding``): :class:`DraftCounter` counts what was drafted and accepted
through the candidate generator generate() makes for the request (there is no public hook; the wrapper sits on
the model instance for one request only). :class:`PrefixCache` keeps the prefix's ``DynamicCache`` and hands
each request a copy, so generate() prefills only the request's own tokens.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import time
from typing import Any

import torch

from llmbench.core.errors import UserError
from llmbench.core.speculative import NO_SHARED_PREFIX, Speculative


def speculative_kwargs(spec: Speculative, draft: Any) -> dict[str, Any]:
    """generate()'s keyword arguments for ``spec`` (``draft``: the loaded draft model, for ``draft:``)."""
    if spec.method == "prompt-lookup":
        return {"prompt_lookup_num_tokens": spec.draft_tokens, "max_matching_ngram_size": spec.max_ngram}
    # a fixed number of drafts a step. transformers reads these from the *draft's* generation config (generate()'s
    # keywords set the target's), so they are set there, every request: the "heuristic" schedule would write its
    # count back after every call (carrying over between requests), and a confidence threshold ends drafts early
    cfg = draft.generation_config
    cfg.num_assistant_tokens, cfg.num_assistant_tokens_schedule = spec.draft_tokens, "constant"
    cfg.assistant_confidence_threshold = 0.0
    return {"assistant_model": draft}


def check_draft_vocabulary(target: Any, draft: Any, target_tok: Any, draft_tok: Any, name: str) -> None:
    """UserError in one line unless the draft proposes ids in the target's vocabulary (the same tokenizer and
    the same embedding size: transformers would otherwise switch to its text-level path, or fail)."""
    tv = target.config.get_text_config().vocab_size
    dv = draft.config.get_text_config().vocab_size
    if tv != dv or target_tok.get_vocab() != draft_tok.get_vocab():
        raise UserError(
            f"--speculative draft:{name}: the draft's vocabulary differs from the target's ({dv} vs {tv} ids, "
            "or other tokens): a draft must share the target's tokenizer"
        )


@dataclasses.dataclass
class DraftCounts:
    """One request's speculative bookkeeping."""

    drafted: int = 0
    accepted: int = 0
    steps: int = 0
    draft_s: float = 0.0


class DraftCounter:
    """For one generate() call: wraps the candidate generator transformers makes, counting the tokens it proposes
    (``get_candidates``) and those the target accepted (``update_candidate_strategy``'s ``num_matches``, already
    capped at the length budget), and timing the drafting (for a draft model: its whole inner generate())."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.counts = DraftCounts()

    def __enter__(self) -> DraftCounts:
        make = type(self.model)._get_candidate_generator
        counts, model = self.counts, self.model

        def wrapped(*args: Any, **kwargs: Any) -> Any:
            gen = make(model, *args, **kwargs)
            propose, update = gen.get_candidates, gen.update_candidate_strategy

            def get_candidates(input_ids: Any, *a: Any, **k: Any) -> Any:
                t = time.perf_counter()
                out = propose(input_ids, *a, **k)
                counts.draft_s += time.perf_counter() - t
                counts.drafted += int(out[0].shape[-1] - input_ids.shape[-1])
                return out

            def update_candidate_strategy(input_ids: Any, scores: Any, num_matches: int) -> Any:
                counts.accepted += int(num_matches)
                counts.steps += 1
                return update(input_ids, scores, num_matches)

            gen.get_candidates, gen.update_candidate_strategy = get_candidates, update_candidate_strategy
            return gen

        model._get_candidate_generator = wrapped  # this instance, this request
        return counts

    def __exit__(self, *exc: object) -> None:
        self.model.__dict__.pop("_get_candidate_generator", None)


def cache_keyword(model: Any) -> str:
    """The keyword ``model``'s forward (and so generate()) takes its KV cache by: ``cache`` in transformers 5's
    newer releases, ``past_key_values`` before (still accepted there, with a deprecation warning, until 6)."""
    return "cache" if "cache" in inspect.signature(type(model).forward).parameters else "past_key_values"


class PrefixCache:
    """The keys and values of the ``length`` ids every prompt starts with, computed by the first request that
    needs them (that request is cold: its TTFT includes computing them) and copied for each later one (the
    copy is inside the request's time: it is what reuse costs with transformers' mutable cache)."""

    def __init__(self, length: int) -> None:
        if length < 1:
            raise UserError(NO_SHARED_PREFIX)
        self.length = length
        self.ids: list[int] | None = None
        self.cache: Any = None
        self.compute_ms: float | None = None

    def for_request(self, model: Any, input_ids: torch.Tensor) -> tuple[dict[str, Any], bool | None, int]:
        """generate()'s cache keyword for this request (a fresh copy of the prefix's cache), whether this request
        computed the prefix (cold), and the prompt tokens it reuses. On the generation thread, inside the
        request's timing. A prompt that does not start with the prefix (a later turn's history can differ)
        reuses nothing: ({}, None, 0)."""
        ids = input_ids[0, : self.length].tolist()
        if input_ids.shape[-1] <= self.length or (self.ids is not None and ids != self.ids):
            return {}, None, 0
        cold = self.cache is None
        if cold:
            from transformers import DynamicCache

            t = time.perf_counter()
            cache = DynamicCache(config=model.config)
            with torch.inference_mode():
                model(input_ids=input_ids[:, : self.length], use_cache=True,
                      **{cache_keyword(model): cache})  # fmt: skip
            self.cache, self.ids = cache, ids
            self.compute_ms = round((time.perf_counter() - t) * 1000, 3)
        return {cache_keyword(model): copy.deepcopy(self.cache)}, cold, 0 if cold else self.length


def load_draft(spec: Speculative, target: Any, target_spec: Any) -> Any:
    """The draft model of ``draft:MODEL``, loaded as the target was (device, dtype, threads, weights kind) and
    through the same checks (fully in memory, no weights offloaded), then checked for the target's vocabulary."""
    from llmbench.engines.hf import models
    from llmbench.options import ModelOptions

    base = target_spec if target_spec is not None else ModelOptions(model=target.name, weights=target.weights)
    draft_spec = base.replaced(model=spec.draft_model, device=target.device, dtype=target.dtype,
                               threads=target.threads, device_map=None, quantize=None, reprobe=False)  # fmt: skip
    draft = models.load_model(draft_spec)
    check_draft_vocabulary(target.model, draft.model, target.tokenizer, draft.tokenizer, str(spec.draft_model))
    return draft


def draft_record(draft: Any) -> dict[str, Any]:
    """``load.draft``: the draft's own load, as the target's is recorded."""
    load = draft.load
    return {"model": draft.name, "source": draft.source, "dtype": draft.dtype, "parameters": load.parameters,
            "weights_bytes": load.weights_bytes, "seconds": load.seconds, "offload": load.offload.model_dump(),
            "vocab_size": int(draft.model.config.get_text_config().vocab_size)}  # fmt: skip
