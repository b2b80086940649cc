"""This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e)."""

import pytest
import torch

from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions as ModelSpec


@pytest.mark.slow
def test_random_weights_from_folder_are_finite_normal_and_seeded(tiny_model_dir):
    a = load_model(ModelSpec(model=str(tiny_model_dir), weights="random", device="cpu", dtype="bfloat16"))
    b = load_model(ModelSpec(model=str(tiny_model_dir), weights="random", device="cpu", dtype="bfloat16"))
    assert a.warnings[0].startswith("RANDOM WEIGHTS")
    tiny = torch.finfo(torch.bfloat16).tiny
    for (name, p), q in zip(a.model.named_parameters(), b.model.parameters(), strict=True):
        assert torch.isfinite(p).all(), name
        assert not ((p != 0) & (p.abs() < tiny)).any(), name
        assert torch.equal(p, q), name  # same seed, same weights: greedy outputs comparable across runs
    w = a.model.model.layers[0].mlp.up_proj.weight.float()
    assert 0.01 < w.std().item() < 0.04  # normal(0, initializer_range=0.02), not zeros or garbage
