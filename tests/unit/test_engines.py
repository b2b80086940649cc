"""--engine: llama.cpp, OpenVINO GenAI and ONNX Runtime GenAI behind the one run loop, fed the same token ids.

The backend's own logic (stamps, the engine's timers, prefix-reuse and vocabulary checks) is driven by a runner
with known delays, which gives the ground truth; each real engine is then run on the trained SmolLM2 GGUF and on
a tiny real Qwen2 folder converted by the engine's own tool (skipped, with the reason, where a package or a
converter is missing; .ci/run installs them all).

This file: the part that needs no child process and no socket (tests/unit); the rest is in tests/e2e/test_engines.py."""

from __future__ import annotations

import importlib.util

import pytest

import llmbench
from llmbench import engines
from llmbench.core.errors import UserError
from llmbench.options import ModelOptions
from tests.e2e.test_engines import known_engine
from tests.helpers import installed


def test_an_engine_with_another_vocabulary_is_refused(qwen_tokenizer):
    with pytest.raises(UserError, match="vocabulary differs"):
        llmbench.measure(["one"], model=known_engine(qwen_tokenizer, garble=True), max_new_tokens=2, warmup=0)


def test_engine_names_precisions_and_knobs_are_checked(tiny_model_dir):
    assert engines.engine_info("LlamaCpp").name == "llama.cpp" and engines.engine_info("ort").name == "onnxruntime"
    with pytest.raises(UserError, match="unknown --engine 'vllm'"):
        engines.engine_info("vllm")
    assert engines.check_precision("openvino", None, "folder") == "int8"
    assert engines.check_precision("llama.cpp", None, "gguf") is None  # a .gguf runs as it is quantized
    with pytest.raises(UserError, match="quantize it again"):
        engines.check_precision("llama.cpp", "q4_0", "gguf")
    with pytest.raises(UserError, match="unknown --precision 'int3'"):
        engines.check_precision("onnxruntime", "int3", "folder")
    with pytest.raises(UserError, match="takes --dtype"):
        engines.check_precision("transformers", "int8", "folder")
    for name in ("llama.cpp", "openvino", "onnxruntime"):
        if installed(name):
            with pytest.raises(UserError, match="--dtype is a transformers knob"):
                engines.validate(ModelOptions(model=str(tiny_model_dir), engine=name, dtype="bfloat16"))


@pytest.mark.parametrize("engine", ["llama.cpp", "openvino", "onnxruntime"])
def test_a_missing_engine_is_one_line_naming_its_extra(cli, prompt_file, tiny_model_dir, monkeypatch, engine):
    real = importlib.util.find_spec
    hidden = set(engines.ENGINES[engine].modules)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name in hidden else real(name, *a))
    r = cli("run", prompt_file, "--engine", engine, "-m", tiny_model_dir, "--max-new-tokens", "2", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and f"pip install 'llmbench[{engines.ENGINES[engine].extra}]'" in lines[0]


def test_transformers_knobs_are_refused_on_another_engine(cli, prompt_file, tiny_model_dir):
    r = cli("run", prompt_file, "--engine", "onnxruntime", "-m", tiny_model_dir, "--compile", "-q")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
