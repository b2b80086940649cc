"""The real-size paths a user takes: the built-in random Qwen2.5-0.5B and a trained model from a .gguf file."""

import json
import sys
from pathlib import Path

import pytest

from llmbench.cli import main

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_readme_quick_start_with_random_weights(tmp_path, monkeypatch):
    """`llmbench run prompts/env_violations.txt --weights random`, shortened to 2 tokens, offline."""
    out = tmp_path / "run.json"
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "llmbench",
            "run",
            str(ROOT / "prompts" / "env_violations.txt"),
            "--weights",
            "random",
            "--max-new-tokens",
            "2",
            "--warmup",
            "1",
            "--device",
            "cpu",
            "-o",
            str(out),
            "-q",
        ],
    )
    with pytest.raises(SystemExit) as e:
        main()
    assert e.value.code == 0
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["config"]["weights"] == "random" and data["config"]["model_source"] == "builtin"
    assert data["config"]["ignore_eos"] is True
    assert any("RANDOM WEIGHTS" in w for w in data["warnings"])
    assert data["load"]["parameters"] == 494_032_768  # Qwen2.5-0.5B, tied embeddings counted once
    assert len(data["requests"]) == 20
    assert all(r["output_tokens"] == 2 for r in data["requests"])
    # the real Qwen tokenizer and template: Chinese prompts of 13-24 characters are ~35-45 tokens
    assert all(30 <= r["prompt_tokens"] <= 50 for r in data["requests"])


@pytest.mark.slow
def test_gguf_file_loads_a_trained_model_that_writes_english(smollm2):
    """The one load of the .gguf in the test run (the smollm2 fixture: dequantized once, shared)."""
    lm = smollm2
    assert lm.source == "gguf" and lm.load.parameters == 134_515_008
    import llmbench

    run = llmbench.measure(["What is the capital of France?"], model=lm, max_new_tokens=12, warmup=0)
    assert "Paris" in run.requests[0].output_text
    r = run.requests[0]
    assert r.output_tokens == len(r.token_times_ms) <= 12
