"""Shared fixtures: a tiny but real Qwen2 model with the real Qwen tokenizer, saved like a user's model folder."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

N_PROMPTS = 60  # many_prompts: enough that an interrupt lands mid-run

TINY = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 151936,
    "max_position_embeddings": 512,
    "rope_theta": 1000000.0,
    "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True,
    "bos_token_id": 151643,
    "eos_token_id": 151645,
}


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from llmbench.builtin import qwen_tokenizer

    return qwen_tokenizer()


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory, qwen_tokenizer) -> Path:
    """A 2-layer Qwen2 with random weights and the real Qwen tokenizer, saved as safetensors."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    path = tmp_path_factory.mktemp("tiny-qwen2")
    torch.manual_seed(1)
    model = AutoModelForCausalLM.from_config(Qwen2Config(**TINY))
    model.save_pretrained(path)
    qwen_tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def tiny_copy(tiny_model_dir, tmp_path) -> Path:
    """A private copy of the tiny model folder, for tests that change it."""
    dst = tmp_path / "model"
    shutil.copytree(tiny_model_dir, dst)
    return dst


@pytest.fixture
def prompt_file(tmp_path) -> Path:
    p = tmp_path / "prompts.txt"
    p.write_text(
        "# three prompts\n某工厂夜间偷排废水\n\nA plant dumps untreated water at night\n混合 mixed 文本 text\n",
        encoding="utf-8",
    )
    return p


class Result:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys, monkeypatch):
    """Run the real entry point (main) in-process, as the console script does; returns code and output."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")

    from llmbench.cli import main

    def invoke(*args):
        monkeypatch.setattr(sys, "argv", ["llmbench", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code = 0
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return invoke


@pytest.fixture
def many_prompts(tmp_path):
    p = tmp_path / "many.txt"
    p.write_text("".join(f"第{i}号工厂夜间偷排废水 number {i}\n" for i in range(N_PROMPTS)), encoding="utf-8")
    return p
