"""The engines llmbench knows, before any is imported: names, extras, precisions. Only ``errors`` below it, so
the options layer can name engines without importing the engines layer."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from llmbench.core.errors import UserError


@dataclass(frozen=True)
class EngineInfo:
    """What llmbench knows of an engine before importing it."""

    name: str  # as --engine takes it
    extra: str  # pip install 'llmbench[EXTRA]'
    modules: tuple[str, ...]  # what must import
    distribution: str  # the package whose version is recorded
    precisions: tuple[str, ...]  # what --precision accepts for a Hugging Face folder
    default_precision: str
    logits: bool  # exposes next-token logits (quality: KL divergence and top-1 agreement)
    module: str = ""  # llmbench's runner for it (llmbench.engines.<module>)
    speculative: tuple[str, ...] = ()  # --speculative methods it has in-process (llmbench.core.speculative)
    prefix_cache: bool = False  # --prefix-cache system: a shared prefix's keys and values kept and reused


ENGINES: dict[str, EngineInfo] = {
    "transformers": EngineInfo("transformers", "cpu", ("transformers", "torch"), "transformers", (), "", True,
                               speculative=("prompt-lookup", "draft"), prefix_cache=True),
    # llama-cpp-python's generate() drafts through a LlamaDraftModel; it ships prompt lookup only (a second
    # GGUF as the draft is not in its Python API)
    "llama.cpp": EngineInfo(
        "llama.cpp", "llamacpp", ("llama_cpp",), "llama-cpp-python",
        ("f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_0", "q4_k_m", "q4_1", "q4_0"), "q8_0", True, "llamacpp",
        speculative=("prompt-lookup",), prefix_cache=True,
    ),
    "openvino": EngineInfo(
        "openvino", "openvino", ("openvino_genai", "openvino", "openvino_tokenizers"), "openvino-genai",
        ("fp32", "fp16", "int8", "int4"), "int8", False, "openvino",
    ),
    "onnxruntime": EngineInfo(
        "onnxruntime", "onnxruntime", ("onnxruntime_genai", "onnxruntime"), "onnxruntime-genai",
        ("fp32", "fp16", "bf16", "int8", "int4"), "int8", True, "onnxruntime",
    ),
}  # fmt: skip
ENGINE_ALIASES = {"llamacpp": "llama.cpp", "llama-cpp": "llama.cpp", "ov": "openvino", "ort": "onnxruntime",
                  "onnx": "onnxruntime", "hf": "transformers"}  # fmt: skip


def engine_info(name: str) -> EngineInfo:
    """The engine called ``name`` (aliases accepted); UserError naming the engines there are."""
    key = (name or "").strip().lower()
    key = ENGINE_ALIASES.get(key, key)
    if key not in ENGINES:
        raise UserError(f"unknown --engine '{name}'; expected {', '.join(ENGINES)}")
    return ENGINES[key]


def require_engine(name: str) -> EngineInfo:
    """The engine, after checking its package is installed: UserError naming the extra to install."""
    info = engine_info(name)
    missing = [m for m in info.modules if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(f"--engine {info.name} needs {', '.join(missing)}: pip install 'llmbench[{info.extra}]'")
    return info
