"""benchmarks/inject's LLMBENCH_INJECT_SLOW_PCT: each outermost causal-LM forward is followed by a busy wait of P%
of its own measured time, and LLMBENCH_INJECT_LOG says what was measured and spun."""

from __future__ import annotations

import importlib.util
from pathlib import Path

INJECT = Path(__file__).resolve().parents[2] / "benchmarks" / "inject"


def _inject_module(monkeypatch):
    """The hook module under a name of its own (a sitecustomize may already be imported), environment empty."""
    for var in ("LLMBENCH_INJECT_SLEEP_MS", "LLMBENCH_INJECT_EXIT_AFTER", "LLMBENCH_INJECT_SLOW_PCT",
                "LLMBENCH_INJECT_LOG"):  # fmt: skip
        monkeypatch.delenv(var, raising=False)
    spec = importlib.util.spec_from_file_location("llmbench_inject_test", INJECT / "sitecustomize.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_slow_pct_spins_its_share_of_the_outermost_forward_only(monkeypatch, tiny_model_dir):
    import torch
    from transformers import AutoModelForCausalLM

    inject = _inject_module(monkeypatch)
    assert not inject._handles  # nothing set: nothing hooked
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    inject.install()
    inject.set_slow_pct(50)
    try:
        ids = torch.tensor([[1, 2, 3, 4]])
        with torch.inference_mode():
            for _ in range(5):
                model(input_ids=ids)
        s = inject.stats()
        assert s["forwards"] == 5 and s["pct"] == 50  # the model's decoder layers, norms, ... are not counted
        assert 0.5 * s["forward_s"] <= s["injected_s"] <= 0.5 * s["forward_s"] + 0.005
        # the global hook gave way to the model's own two: no other module pays for a hook
        assert len(inject._handles) == 2 and not any(
            h is inject._find for h in torch.nn.modules.module._global_forward_pre_hooks.values()
        )
        inject.set_slow_pct(0)
        inject.reset()
        with torch.inference_mode():
            model(input_ids=ids)
        assert inject.stats()["forwards"] == 1 and inject.stats()["injected_s"] < 0.001
    finally:
        for h in inject._handles:
            h.remove()
