"""Quality beside speed: how far a setup's next-token distributions are from a reference setup's, on the same
tokens, and where its greedy answers part from the reference's.

- **Teacher-forced**: the evaluation text is tokenized once, cut into chunks that fit the context, and both
  setups read every chunk. At each position, KL(P_ref || P_cand) = sum_v p_ref(v) (log p_ref(v) - log p_cand(v))
  of the next-token distributions (mean, p99, max over positions), whether the two argmaxes agree (top-1
  agreement), and each side's perplexity of the text (exp of the mean negative log-likelihood of the next
  token). As llama.cpp's ``perplexity --kl-divergence``, the standard for "what did quantization cost".
- **Greedy**: each prompt is continued greedily by both; the first position where the tokens differ (None:
  identical for max_new_tokens), summarised as the median and the share of identical answers.

The reference is computed once per (model, setup, text) and kept in memory (a sweep compares every setup
with it); ``save_reference``/``load_reference`` keep each position's top-K reference log-probabilities and the
remaining mass in a file, from which KL is a *bucketed lower bound* (the remaining vocabulary as one bucket;
exact when K covers the distribution) and the result says so (``kld_method``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np
import torch

from llmbench.core.errors import UserError, read_user_file
from llmbench.results.schema import QUALITY_VERSION

TOP_K = 256  # reference log-probabilities kept per position in a cache file


def default_text() -> str:
    """The evaluation text llmbench ships: ~3,000 tokens of varied English and Chinese prose."""
    files = resources.files("llmbench")
    return (
        files.joinpath("data/corpus.txt").read_text(encoding="utf-8")
        + "\n"
        + files.joinpath("data/eval.txt").read_text(encoding="utf-8")
    )


def read_text(path: str | Path | None) -> tuple[str, str]:
    """(text, where it came from): ``path``'s UTF-8 text, or the shipped one."""
    if path is None:
        return default_text(), "llmbench/data/corpus.txt + eval.txt"
    try:
        return read_user_file(path, "evaluation text").decode("utf-8"), str(path)
    except UnicodeDecodeError:
        raise UserError(f"evaluation text {path} is not UTF-8") from None


def chunks(ids: list[int], size: int) -> list[list[int]]:
    """Consecutive chunks of at most ``size`` tokens (each predicts its own next tokens); UserError for a text
    too short to predict anything."""
    if len(ids) < 2:
        raise UserError(f"the evaluation text has {len(ids)} token(s): at least 2 are needed to predict one")
    return [ids[i : i + size] for i in range(0, len(ids), size) if len(ids[i : i + size]) >= 2]


def next_token_logprobs(model: Any, chunk: list[int], device: str) -> torch.Tensor:
    """log softmax of the logits at every position but the last: row t is the distribution of token t+1."""
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([chunk], device=device)).logits[0, :-1]
    return torch.log_softmax(logits.float(), dim=-1).cpu()


def kl_divergence(ref_logp: torch.Tensor, cand_logp: torch.Tensor) -> torch.Tensor:
    """KL(P_ref || P_cand) per row, from log-probabilities (rows: positions, columns: the vocabulary)."""
    return (ref_logp.exp() * (ref_logp - cand_logp)).sum(dim=-1).clamp_min(0.0)


def bucketed_kl(top_idx: torch.Tensor, top_logp: torch.Tensor, cand_logp: torch.Tensor) -> torch.Tensor:
    """KL over the reference's top-K tokens plus one bucket for the rest of the vocabulary: a lower bound of the
    exact KL (merging outcomes never increases a divergence), exact when the top-K hold all the mass."""
    p_top = top_logp.exp()
    q_top = cand_logp.gather(-1, top_idx).exp()
    p_rest = (1.0 - p_top.sum(-1)).clamp_min(1e-12)
    q_rest = (1.0 - q_top.sum(-1)).clamp_min(1e-12)
    top = (p_top * (top_logp - q_top.clamp_min(1e-30).log())).sum(-1)
    return (top + p_rest * (p_rest.log() - q_rest.log())).clamp_min(0.0)


@dataclass
class Reference:
    """A reference setup's next-token distributions over the evaluation text's chunks."""

    setup: dict[str, Any]
    text_sha256: str
    chunk_tokens: int
    chunks: list[list[int]]
    logp: list[torch.Tensor] = field(default_factory=list)  # exact: full log-probabilities per chunk
    top_idx: list[torch.Tensor] = field(default_factory=list)  # from a file: top-K indices and log-probs
    top_logp: list[torch.Tensor] = field(default_factory=list)

    @property
    def exact(self) -> bool:
        return bool(self.logp)


def build_reference(model: Any, tokenizer: Any, text: str, device: str, setup: dict, chunk_tokens: int) -> Reference:
    """The reference's distributions over ``text`` (tokenized once, chunked to ``chunk_tokens``)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    parts = chunks(ids, chunk_tokens)
    sha = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Reference(setup, sha, chunk_tokens, parts, logp=[next_token_logprobs(model, c, device) for c in parts])


def save_reference(ref: Reference, path: str | Path) -> None:
    """Each position's top-K reference log-probabilities (float16) and indices, compressed, at exactly ``path``
    (numpy would add ``.npz`` to a path without it, and the next run, looking at ``path``, would never find
    it), through a temporary file, so a reader never sees half a file."""
    import os

    meta = {"setup": ref.setup, "text_sha256": ref.text_sha256, "chunk_tokens": ref.chunk_tokens,
            "version": QUALITY_VERSION}  # fmt: skip
    arrays: dict[str, Any] = {"meta": np.array([repr(meta)])}
    for i, (c, lp) in enumerate(zip(ref.chunks, ref.logp, strict=True)):
        vals, idx = lp.topk(min(TOP_K, lp.shape[-1]), dim=-1)
        arrays[f"chunk{i}"], arrays[f"idx{i}"], arrays[f"logp{i}"] = np.array(c), idx.numpy(), vals.half().numpy()
    p = Path(path)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as f:  # a file object: numpy writes it as it is, no suffix added
            np.savez_compressed(f, **arrays)
        os.replace(tmp, p)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise UserError(f"--reference-cache {p}: cannot write it: {e.strerror or e}") from None


def load_reference(path: str | Path) -> Reference:
    """A reference saved by :func:`save_reference` (KL from it is the bucketed lower bound); UserError for
    anything else (not a zip, a zip of other arrays, a chunk without its log-probabilities)."""
    import ast
    import zipfile

    def bad(why: object) -> UserError:
        return UserError(f"--reference-cache {path}: not a reference file ({why})")

    try:
        data = np.load(Path(path), allow_pickle=False)
        meta = ast.literal_eval(str(data["meta"][0]))
    except (OSError, ValueError, KeyError, IndexError, SyntaxError, EOFError, zipfile.BadZipFile) as e:
        raise bad(e) from None
    if not isinstance(data, np.lib.npyio.NpzFile) or not isinstance(meta, dict):
        raise bad("no llmbench header")
    if meta.get("version") != QUALITY_VERSION:
        raise UserError(
            f"--reference-cache {path}: version {meta.get('version')!r}, this llmbench reads {QUALITY_VERSION}"
        )
    n = sum(1 for k in data.files if k.startswith("chunk"))
    try:
        return Reference(meta["setup"], meta["text_sha256"], int(meta["chunk_tokens"]),
                         [data[f"chunk{i}"].tolist() for i in range(n)],
                         top_idx=[torch.from_numpy(data[f"idx{i}"]).long() for i in range(n)],
                         top_logp=[torch.from_numpy(data[f"logp{i}"]).float() for i in range(n)])  # fmt: skip
    except (KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile) as e:  # a damaged member
        raise bad(e) from None


def teacher_forced(ref: Reference, model: Any, device: str) -> dict[str, Any]:
    """The candidate against ``ref`` on the same chunks: KL (mean, p99, max), top-1 agreement, perplexities."""
    return teacher_forced_from(ref, lambda c: next_token_logprobs(model, c, device))


def teacher_forced_from(ref: Reference, logprobs: Any) -> dict[str, Any]:
    """:func:`teacher_forced` for any candidate: ``logprobs(chunk)`` gives its next-token log-probabilities
    (positions x vocabulary; an engine's, as numpy or torch). A candidate whose vocabulary has more rows than
    the reference's (padding) is compared over the reference's."""
    kls, agree, nll_ref, nll_cand = [], [], [], []
    for i, c in enumerate(ref.chunks):
        cand = torch.as_tensor(logprobs(c)).float()
        width = ref.logp[i].shape[-1] if ref.exact else None
        if width is not None and cand.shape[-1] != width:
            if cand.shape[-1] < width:
                raise UserError(f"the candidate's vocabulary ({cand.shape[-1]}) is smaller than the reference's "
                                f"({width}): their distributions can't be compared")  # fmt: skip
            cand = torch.log_softmax(cand[:, :width], dim=-1)
        target = torch.tensor(c[1:]).unsqueeze(-1)
        nll_cand.append(-cand.gather(-1, target).squeeze(-1))
        if ref.exact:
            r = ref.logp[i]
            kls.append(kl_divergence(r, cand))
            agree.append(r.argmax(-1) == cand.argmax(-1))
            nll_ref.append(-r.gather(-1, target).squeeze(-1))
        else:
            kls.append(bucketed_kl(ref.top_idx[i], ref.top_logp[i], cand))
            agree.append(ref.top_idx[i][:, 0] == cand.argmax(-1))
    kl = torch.cat(kls).numpy()
    out: dict[str, Any] = {
        "positions": int(kl.size),
        "kld_mean": float(kl.mean()),
        "kld_p99": float(np.percentile(kl, 99)),
        "kld_max": float(kl.max()),
        "top1_agreement": float(torch.cat(agree).float().mean()),
        "perplexity_candidate": float(torch.cat(nll_cand).mean().exp()),
        "perplexity_reference": float(torch.cat(nll_ref).mean().exp()) if nll_ref else None,
        "kld_method": "exact" if ref.exact else f"top-{TOP_K} buckets (a lower bound)",
    }
    return out


def first_divergence(a: list[int], b: list[int]) -> int | None:
    """The first position where two greedy continuations differ (None: identical, as far as both go)."""
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))


def greedy_summary(divergences: list[int | None], max_new_tokens: int) -> dict[str, Any]:
    """The share of identical answers and the median first divergence (identical ones count as max_new_tokens)."""
    at = [max_new_tokens if d is None else d for d in divergences]
    return {
        "prompts": len(divergences),
        "identical_share": sum(d is None for d in divergences) / len(divergences) if divergences else None,
        "first_divergence_median": float(np.median(at)) if at else None,
        "first_divergence": divergences,
        "max_new_tokens": max_new_tokens,
    }
