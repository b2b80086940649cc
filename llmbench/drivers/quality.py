"""``llmbench quality``: a candidate setup against a reference setup of the same model, on the same tokens.

See :mod:`llmbench.engines.quality` for what is measured. The reference is float32 without quantization by default;
when the candidate *is* that setup, the same loaded model serves both (KL 0, agreement 1, by construction).
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError
from llmbench.engines import quality as q
from llmbench.options import ModelOptions, RunOptions
from llmbench.results.schema import utc_now
from llmbench.results.storage import write_record
from llmbench.workloads.prompts import MAX_PROMPT_TOKENS, PromptSet

DEFAULT_CHUNK = 512  # tokens per teacher-forced chunk (capped by the model's context)
DEFAULT_GREEDY_PROMPTS = 8


def setup_of(spec: ModelOptions, options: RunOptions | None = None) -> dict[str, Any]:
    """The fields that make a setup, as recorded in quality.json (an engine's: engine and precision too)."""
    setup = {"model": spec.model, "dtype": spec.dtype, "quantize": spec.quantization, "attn": spec.attn,
             "compile": bool(options and options.compile)}  # fmt: skip
    if not spec.is_transformers:
        setup.update(engine=spec.engine, precision=spec.precision)
    return setup


MODEL_FILES = (".json", ".safetensors", ".bin", ".gguf", ".model", ".tiktoken", ".txt", ".py", ".jinja")


def reference_identity(spec: ModelOptions, lm: Any) -> dict[str, Any]:
    """What a reference's logits depend on, the key of ``--reference-cache``: the setup as loaded (dtype, device),
    pretrained or random weights, and for a local model the files' identity (name, size, modification time), so a
    folder re-downloaded or re-saved at the same path is not read through another model's logits."""
    identity = {**setup_of(spec), "dtype": lm.dtype, "device": str(lm.device).split(":")[0], "weights": spec.weights}
    path = Path(spec.model).expanduser()
    files = [path] if path.is_file() else sorted(path.iterdir()) if path.is_dir() else []
    identity["files"] = [[f.name, f.stat().st_size, f.stat().st_mtime_ns] for f in files
                         if f.is_file() and f.suffix in MODEL_FILES]  # fmt: skip
    return identity


def default_prompts() -> PromptSet:
    """The first sentences of the shipped text, for greedy continuations when no prompt file is given."""
    sentences = [s.strip() for s in re.split(r"(?<=[.。])\s*", q.default_text()) if len(s.strip()) > 20]
    return PromptSet.from_list(sentences[:DEFAULT_GREEDY_PROMPTS], name="llmbench/data (first sentences)")


def _encoded(lm: Any, prompt: str, options: RunOptions) -> Any:
    from llmbench.engines.chat import messages_for
    from llmbench.engines.hf.generation import encode_messages

    use_template = options.chat_template and bool(getattr(lm.tokenizer, "chat_template", None))
    return encode_messages(lm.tokenizer, messages_for(prompt, options.system_prompt), use_template)


def greedy_ids(lm: Any, prompt: str, options: RunOptions, max_cache_len: int | None = None) -> list[int]:
    """One greedy continuation of ``prompt`` of exactly ``options.max_new_tokens`` tokens, as a run would send
    it (chat template, the setup's cache and compile). ``max_cache_len``: a static cache's size, the same for
    every prompt (as a run sizes it), so a compiled graph is traced once, not per prompt length."""
    import torch

    from llmbench.engines.hf.generation import TokenStamper, generate_kwargs

    enc = _encoded(lm, prompt, options)
    size = max_cache_len or int(enc["input_ids"].shape[-1]) + options.max_new_tokens
    kw = generate_kwargs(options.max_new_tokens, ignore_eos=True, cache=options.cache, compile=options.compile,
                         max_cache_len=size)  # fmt: skip
    stamper = TokenStamper()
    with torch.inference_mode():
        lm.model.generate(input_ids=enc["input_ids"].to(lm.device), attention_mask=enc["attention_mask"].to(lm.device),
                          streamer=stamper, **kw)  # fmt: skip
    return stamper.token_ids()


def evaluate(ref: q.Reference, ref_lm: Any, cand_lm: Any, prompts: PromptSet, options: RunOptions) -> dict[str, Any]:
    """Teacher-forced statistics and greedy divergences of ``cand_lm`` against the reference (generation thread)."""
    stats = q.teacher_forced(ref, cand_lm.model, cand_lm.device)
    reference_options = options.replaced(cache="dynamic", compile=False)
    longest = max(int(_encoded(cand_lm, p, options)["input_ids"].shape[-1]) for p in prompts.prompts)
    size = longest + options.max_new_tokens
    divergences = [q.first_divergence(greedy_ids(ref_lm, p, reference_options), greedy_ids(cand_lm, p, options, size))
                   for p in prompts.prompts]  # fmt: skip
    return {**stats, "greedy": q.greedy_summary(divergences, options.max_new_tokens)}


def engine_greedy_ids(em: Any, prompt: str, options: RunOptions) -> list[int]:
    """One greedy continuation of exactly ``options.max_new_tokens`` tokens on another engine, from the ids the
    model's tokenizer makes (as a run sends it)."""
    from llmbench.engines.chat import encode_ids, messages_for

    use_template = options.chat_template and bool(getattr(em.tokenizer, "chat_template", None))
    ids = encode_ids(em.tokenizer, messages_for(prompt, options.system_prompt), use_template)
    out: list[int] = []

    def keep(token: int) -> bool:
        out.append(token)
        return True

    em.runner.generate(ids, options.max_new_tokens, None, keep)
    return out


def evaluate_engine(ref: q.Reference, ref_lm: Any, em: Any, prompts: PromptSet, options: RunOptions) -> dict[str, Any]:
    """:func:`evaluate` for an engine other than transformers: teacher-forced figures where it exposes logits
    (llama.cpp, ONNX Runtime GenAI), greedy divergence always (generation thread)."""
    from llmbench.engines import ENGINES

    if ENGINES[em.engine].logits:
        stats = q.teacher_forced_from(ref, em.runner.logprobs)
    else:
        stats = {"positions": 0, "kld_mean": None, "kld_p99": None, "kld_max": None, "top1_agreement": None,
                 "perplexity_candidate": None, "perplexity_reference": None,
                 "kld_method": f"none: {em.engine} exposes no logits (greedy divergence only)"}  # fmt: skip
    reference_options = options.replaced(cache="dynamic", compile=False)
    divergences = [q.first_divergence(greedy_ids(ref_lm, p, reference_options), engine_greedy_ids(em, p, options))
                   for p in prompts.prompts]  # fmt: skip
    return {**stats, "greedy": q.greedy_summary(divergences, options.max_new_tokens)}


def evaluate_engine_spec(ref: q.Reference, ref_lm: Any, spec: ModelOptions, prompts: PromptSet,
                         options: RunOptions) -> dict[str, Any]:  # fmt: skip
    """Load ``spec``'s engine here (its files are cached by now), evaluate it, let it go (generation thread)."""
    from llmbench.engines.base import load

    em = load(spec)
    try:
        if not same_tokenizer(ref_lm.tokenizer, em.tokenizer):
            raise UserError("the reference and the candidate have different tokenizers")
        return evaluate_engine(ref, ref_lm, em, prompts, options)
    finally:
        em.runner.close()


def same_tokenizer(a: Any, b: Any) -> bool:
    return a is b or a.get_vocab() == b.get_vocab()


async def quality(
    candidate: ModelOptions,
    options: RunOptions,
    *,
    reference_dtype: str = "float32",
    reference_model: str | None = None,
    text: str | Path | None = None,
    prompts: PromptSet | None = None,
    chunk_tokens: int = DEFAULT_CHUNK,
    reference_cache: Path | None = None,
    output: Path | None = None,
) -> dict[str, Any]:
    """Measure ``candidate`` against the reference setup; the record (written to ``output`` when given)."""
    from llmbench.core.process import freeze_now
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    text_value, text_source = q.read_text(text)
    cached = check_inputs(candidate, options, reference_model, text_value, chunk_tokens, reference_cache)
    if not candidate.is_transformers:
        return await _engine_quality(candidate, options, reference_dtype, reference_model, text_value, text_source,
                                     prompts, chunk_tokens, reference_cache, output, cached)  # fmt: skip
    reference = candidate.replaced(model=reference_model or candidate.model, dtype=reference_dtype,
                                   quantize=None, attn=None)  # fmt: skip
    try:
        models.validate(reference)
    except UserError as e:
        raise UserError(f"the reference ({reference.model}, {reference_dtype}) can't be built: {e}") from None
    thread = generation_thread()
    cand_lm = await asyncio.wrap_future(thread.submit(models.load_model, candidate))
    # Compared as loaded, so --dtype auto that resolved to float32 *is* the reference setup.
    same = setup_of(reference) == {**setup_of(candidate), "dtype": cand_lm.dtype} and not options.compile
    try:
        ref_lm = cand_lm if same else await asyncio.wrap_future(thread.submit(models.load_model, reference))
    except UserError as e:
        raise UserError(f"the reference ({reference.model}, {reference_dtype}) can't be built: {e}") from None
    freeze_now()
    if not same_tokenizer(ref_lm.tokenizer, cand_lm.tokenizer):
        raise UserError("the reference and the candidate have different tokenizers: their distributions are over "
                        "different tokens and can't be compared")  # fmt: skip
    prompts = prompts or default_prompts()
    check_fits(ref_lm, prompts, options, cand_lm.max_positions)  # before the teacher-forced pass
    size = min(chunk_tokens, cand_lm.max_positions or chunk_tokens)
    ref = await asyncio.wrap_future(thread.submit(_reference, ref_lm, text_value, reference_identity(reference, ref_lm),
                                                  size, reference_cache, cached))  # fmt: skip
    result = await asyncio.wrap_future(thread.submit(evaluate, ref, ref_lm, cand_lm, prompts, options))
    record = {
        "quality_version": q.QUALITY_VERSION,
        "created_at": utc_now(),
        "weights": candidate.weights,
        "device": cand_lm.device,
        "candidate": {**setup_of(candidate, options), "dtype": cand_lm.dtype},
        "reference": {**setup_of(reference), "dtype": ref_lm.dtype},
        "text": {
            "source": text_source,
            "sha256": ref.text_sha256,
            "tokens": sum(len(c) for c in ref.chunks),
            "chunk_tokens": size,
            "chunks": len(ref.chunks),
        },
        "prompts": {"source": prompts.path, "sha256": prompts.sha256, "count": len(prompts.prompts)},
        **result,
        "notes": notes(candidate, same),
        "metrics": q_formulas(),
    }
    if output is not None:
        write_record(output, record)
    return record


async def _engine_quality(
    candidate: ModelOptions, options: RunOptions, reference_dtype: str, reference_model: str | None, text: str,
    text_source: str, prompts: PromptSet | None, chunk_tokens: int, reference_cache: Path | None,
    output: Path | None, cached: q.Reference | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``quality --engine E``: the engine's model (in this process) against transformers' reference setup of the
    same source (a .gguf dequantized by transformers, a folder, random weights)."""
    from llmbench import engines
    from llmbench.core.process import freeze_now
    from llmbench.engines.base import load
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread

    engines.validate(candidate)
    if options.compile or options.cache != "dynamic":
        raise UserError("--compile is a transformers knob; the other engines manage their own")
    reference = candidate.replaced(model=reference_model or candidate.model, dtype=reference_dtype,
                                   engine="transformers", precision=None, quantize=None, attn=None,
                                   threads=None)  # fmt: skip
    try:
        models.validate(reference)
    except UserError as e:
        raise UserError(f"the reference ({reference.model}, {reference_dtype}) can't be built: {e}") from None
    thread = generation_thread()
    em = await asyncio.wrap_future(thread.submit(load, candidate))
    try:
        ref_lm = await asyncio.wrap_future(thread.submit(models.load_model, reference))
        freeze_now()
        if not same_tokenizer(ref_lm.tokenizer, em.tokenizer):
            raise UserError("the reference and the candidate have different tokenizers: their distributions are "
                            "over different tokens and can't be compared")  # fmt: skip
        prompts = prompts or default_prompts()
        check_fits(ref_lm, prompts, options, getattr(em, "max_positions", None))
        size = min(chunk_tokens, ref_lm.max_positions or chunk_tokens)
        ref = await asyncio.wrap_future(thread.submit(_reference, ref_lm, text, reference_identity(reference, ref_lm),
                                                      size, reference_cache, cached))  # fmt: skip
        result = await asyncio.wrap_future(thread.submit(evaluate_engine, ref, ref_lm, em, prompts, options))
    finally:
        await asyncio.wrap_future(thread.submit(em.runner.close))
    record = {
        "quality_version": q.QUALITY_VERSION, "created_at": utc_now(), "weights": candidate.weights, "device": "cpu",
        "candidate": {**setup_of(candidate, options), "dtype": em.dtype, "engine_version": em.version,
                      "precision_detail": em.runner.precision()},
        "reference": {**setup_of(reference), "dtype": ref_lm.dtype},
        "text": {"source": text_source, "sha256": ref.text_sha256, "tokens": sum(len(c) for c in ref.chunks),
                 "chunk_tokens": size, "chunks": len(ref.chunks)},
        "prompts": {"source": prompts.path, "sha256": prompts.sha256, "count": len(prompts.prompts)},
        **result, "notes": notes(candidate, False), "metrics": q_formulas(),
    }  # fmt: skip
    if output is not None:
        write_record(output, record)
    return record


def check_inputs(candidate: ModelOptions, options: RunOptions, reference_model: str | None, text: str,
                 chunk_tokens: int, cache: Path | None) -> q.Reference | None:  # fmt: skip
    """What ``quality`` can refuse before either model loads (UserError); the reference cache's contents when
    the file exists (read now: a damaged file is one line before minutes of loading, not after)."""
    from llmbench.engines.hf import models
    from llmbench.results.storage import prepare_dir

    if not 2 <= chunk_tokens <= MAX_PROMPT_TOKENS:
        raise UserError(f"--chunk-tokens must be at least 2 (a chunk predicts its own next tokens), not {chunk_tokens}")
    if not text.strip():
        raise UserError("the evaluation text is empty: nothing to predict")
    contexts: list[int] = []
    for m in {candidate.model, reference_model or candidate.model}:
        try:
            context = models.context_length(candidate.replaced(model=m))
        except UserError:  # a reference that can't be found: refused next, in the reference's own words
            context = None
        contexts += [context] if context else []
    if contexts and options.max_new_tokens >= min(contexts):
        raise UserError(f"--max-new-tokens {options.max_new_tokens} leaves no room in the model's context of "
                        f"{min(contexts)} tokens")  # fmt: skip
    if cache is None:
        return None
    if cache.exists():
        return q.load_reference(cache)
    prepare_dir(cache.parent)  # it is written once the reference is computed: a place that can't be, fails now
    return None


def check_fits(lm: Any, prompts: PromptSet, options: RunOptions, other_positions: int | None) -> None:
    """UserError when a greedy continuation (the longest prompt, templated, + max_new_tokens) exceeds either
    model's context (known once loaded), before the teacher-forced pass."""
    limits = [n for n in (lm.max_positions, other_positions) if n]
    if not limits:
        return
    longest = max(int(_encoded(lm, p, options)["input_ids"].shape[-1]) for p in prompts.prompts)
    if longest + options.max_new_tokens > min(limits):
        raise UserError(f"the greedy continuations need {longest} prompt tokens + --max-new-tokens "
                        f"{options.max_new_tokens}: more than the model's context of {min(limits)} tokens")  # fmt: skip


def _reference(lm: Any, text: str, setup: dict, size: int, cache: Path | None,
               cached: q.Reference | None = None) -> q.Reference:  # fmt: skip
    """From the cache file (``cached``: its contents, read before loading) when it holds this very reference
    (``setup``: :func:`reference_identity`; the text; the chunk size), else computed (and saved there, replacing
    another reference's)."""
    import hashlib

    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    if cache is not None and cached is None and cache.exists():
        cached = q.load_reference(cache)
    if cached is not None and cached.setup == setup and cached.text_sha256 == sha and cached.chunk_tokens == size:
        return cached
    ref = q.build_reference(lm.model, lm.tokenizer, text, lm.device, setup, size)
    if cache is not None:
        q.save_reference(ref, cache)
    return ref


def notes(candidate: ModelOptions, same: bool) -> list[str]:
    out = []
    if candidate.weights == "random":
        out.append("RANDOM WEIGHTS: the logits carry no meaning, so KL divergence and agreement here are a smoke "
                   "test of the machinery, not a quality figure")  # fmt: skip
    if same:
        out.append("the candidate is the reference setup: one model served both (KL 0 and agreement 1 by design)")
    return out


def q_formulas() -> dict[str, str]:
    return {
        "kld_mean": "mean over positions of KL(P_ref || P_cand) = sum_v p_ref(v) (log p_ref(v) - log p_cand(v)) of "
        "the next-token distributions, teacher-forced on the evaluation text",
        "kld_p99": "99th percentile of the per-position KL", "kld_max": "largest per-position KL",
        "top1_agreement": "share of positions where both argmaxes are the same token",
        "perplexity_*": "exp(mean negative log-likelihood of the text's next token)",
        "first_divergence": "per prompt, the first generated position where greedy tokens differ (null: identical "
        "for max_new_tokens)",
    }  # fmt: skip
