"""Shared fixtures: a tiny but real Qwen2 model with the real Qwen tokenizer, saved like a user's model folder."""

from __future__ import annotations

import os
import shutil
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


@pytest.fixture(scope="session", autouse=True)
def private_cache_folder(tmp_path_factory):
    """Tests never write into the user's cache folder (the --dtype auto cache): the session gets its own."""
    old = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old


@pytest.fixture(scope="session")
def qwen_tokenizer():
    from llmbench.engines.hf.builtin import qwen_tokenizer

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


THREE_PROMPTS = "# three prompts\n某工厂夜间偷排废水\n\nA plant dumps untreated water at night\n混合 mixed 文本 text\n"


@pytest.fixture
def prompt_file(tmp_path) -> Path:
    p = tmp_path / "prompts.txt"
    p.write_text(THREE_PROMPTS, encoding="utf-8")
    return p


@pytest.fixture
def cli():
    """The one CLI helper (tests/helpers.py): ``cli(*args, process=False, env=None, cwd=None)``."""
    from tests.helpers import cli as run_cli

    return run_cli


@pytest.fixture
def many_prompts(tmp_path):
    p = tmp_path / "many.txt"
    p.write_text("".join(f"第{i}号工厂夜间偷排废水 number {i}\n" for i in range(N_PROMPTS)), encoding="utf-8")
    return p
