"""``quality --reference-cache``: the cached reference logits are reused only for the very reference they are of
(the same model files, pretrained or random weights, dtype as loaded, text and chunk size); anything else
computes the reference again (``kld_method`` says which: exact when computed, top-K buckets when read back)."""

from __future__ import annotations

import asyncio

import torch
from transformers import AutoModelForCausalLM

from llmbench.drivers.quality import quality
from llmbench.options import ModelOptions, RunOptions
from llmbench.workloads.prompts import PromptSet
from tests.unit.test_quality import text_file  # noqa: F401 (fixture)


def measure(model: str, text, cache, weights: str = "pretrained") -> dict:
    spec = ModelOptions(model=model, weights=weights, device="cpu", dtype="bfloat16", threads=1)
    prompts = PromptSet.from_list(["A plant dumps untreated water at night"], name="t")
    return asyncio.run(quality(spec, RunOptions(max_new_tokens=2, ignore_eos=True), text=text, prompts=prompts,
                               chunk_tokens=64, reference_cache=cache))  # fmt: skip


def test_a_reference_is_not_reused_for_other_weights_at_the_same_path(tiny_copy, text_file, tmp_path):
    cache = tmp_path / "ref.npz"
    assert measure(str(tiny_copy), text_file, cache)["kld_method"] == "exact"
    assert measure(str(tiny_copy), text_file, cache)["kld_method"].startswith("top-")  # the same: reused
    # the same folder, re-saved with other weights (a fine-tune written in place, a re-download)
    torch.manual_seed(7)
    model = AutoModelForCausalLM.from_pretrained(tiny_copy)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    model.save_pretrained(tiny_copy)
    assert measure(str(tiny_copy), text_file, cache)["kld_method"] == "exact"
    # random weights of the same model: other logits altogether
    assert measure(str(tiny_copy), text_file, cache, weights="random")["kld_method"] == "exact"
