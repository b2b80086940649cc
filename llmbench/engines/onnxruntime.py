"""ONNX Runtime GenAI: the ``Generator`` loop: ``append_tokens(ids)`` (the prefill), then per token
``generate_next_token()`` + ``get_next_tokens()``.

A fresh Generator per request holds no KV cache of an earlier one. Exactly N tokens: ``min_length = max_length =
prompt + N`` (EOS can't end it earlier). Threads: the decoder session's ``intra_op_num_threads`` (the same pool
runs prefill and decode), set through ``Config.overlay``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from llmbench.core.errors import UserError
from llmbench.engines.base import EngineTimers


class OnnxRuntimeRunner:
    """An ONNX Runtime GenAI model folder (genai_config.json + model.onnx) on the CPU."""

    def __init__(self, path: Path, threads: int, precision: str | None) -> None:
        import onnxruntime_genai as og

        self.og, self.path, self.threads, self.asked = og, path, threads, precision
        self.session_options = {"intra_op_num_threads": threads, "inter_op_num_threads": 1}
        try:
            cfg = og.Config(str(path))
            cfg.clear_providers()  # the CPU
            cfg.overlay(json.dumps({"model": {"decoder": {"session_options": self.session_options}}}))
            self.model = og.Model(cfg)
        except Exception as e:  # onnxruntime_genai raises plain RuntimeError/OrtException types
            raise UserError(f"ONNX Runtime GenAI cannot load {path}: {str(e).strip().splitlines()[0][:200]}") from None
        self.tokenizer = og.Tokenizer(self.model)
        self.config = json.loads((path / "genai_config.json").read_text(encoding="utf-8"))

    def generate(
        self, ids: list[int], max_new_tokens: int, eos: frozenset[int] | None, on_token: Callable[[int], bool]
    ) -> EngineTimers:
        og = self.og
        params = og.GeneratorParams(self.model)
        length = len(ids) + max_new_tokens
        params.set_search_options(max_length=length, min_length=length if eos is None else 0, do_sample=False,
                                  num_beams=1)  # fmt: skip
        generator = og.Generator(self.model, params)
        generator.append_tokens(np.asarray(ids, dtype=np.int32))
        n = 0
        while not generator.is_done():
            generator.generate_next_token()
            token = int(generator.get_next_tokens()[0])
            n += 1
            if not on_token(token) or n >= max_new_tokens or (eos is not None and token in eos):
                break
        del generator
        return EngineTimers()  # ONNX Runtime GenAI keeps no timers or counters of its own

    def detokenize(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(np.asarray(ids, dtype=np.int32)))

    def vocab_size(self) -> int:
        return int(self.config["model"]["vocab_size"])

    def logprobs(self, ids: list[int]) -> Any:
        """Teacher-forced next-token log-probabilities: the prefill's logits at every position."""
        og = self.og
        params = og.GeneratorParams(self.model)
        params.set_search_options(max_length=len(ids) + 1, do_sample=False)
        generator = og.Generator(self.model, params)
        generator.append_tokens(np.asarray(ids, dtype=np.int32))
        logits = np.asarray(generator.get_output("logits"), dtype=np.float32)[0]
        if logits.shape[0] != len(ids):
            raise UserError(f"ONNX Runtime GenAI gave logits for {logits.shape[0]} of {len(ids)} positions")
        z = logits[:-1] - logits[:-1].max(axis=-1, keepdims=True)
        return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))

    def facts(self) -> dict[str, Any]:
        return {**self.session_options, "provider": "CPU", "search": "greedy, min_length = max_length"}

    def precision(self) -> dict[str, Any]:
        weights = self.asked or "?"
        quantized = weights in ("int4", "int8")
        return {
            "format": "onnx (onnxruntime-genai builder)",
            "weights": f"{weights} (MatMulNBits, block 32)" if quantized else weights,
            # the builder's CPU default: accuracy_level 4, MatMulNBits quantize their input per block to int8
            "activations": "int8 in quantized MatMuls (accuracy_level 4), float32 elsewhere" if quantized
            else ("float32" if weights == "fp32" else weights),
            "kv_cache": "float32" if weights in ("fp32", "int4", "int8") else weights,
        }  # fmt: skip

    def close(self) -> None:
        del self.model


def load(path: Path, *, threads: int, context: int | None, precision: str | None = None) -> OnnxRuntimeRunner:
    """ONNX Runtime GenAI with the folder ``path`` loaded, ``threads`` intra-op threads."""
    return OnnxRuntimeRunner(path, threads, precision)
