"""OpenVINO GenAI: ``LLMPipeline`` on the CPU with the stateful SDPA pipeline (``ATTENTION_BACKEND=SDPA``), fed an
``ov.Tensor`` of ids (no chat template applied by the engine), a ``StreamerBase`` subclass that receives ids.

The x86 default, paged attention, turns prefix caching on (a repeated prompt would reuse its KV blocks) and calls
the streamer from another thread; the stateful pipeline resets its state per ``generate()`` outside chat mode and
calls the streamer on the generating thread, between two steps.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from llmbench.core.errors import UserError
from llmbench.engines.base import EngineTimers


class OpenVINORunner:
    """An OpenVINO IR folder or a GGUF (llama/qwen2/qwen3) loaded by OpenVINO GenAI."""

    def __init__(self, path: Path, threads: int, precision: str | None) -> None:
        import openvino as ov
        import openvino_genai as og

        self.og, self.ov = og, ov
        self.path, self.threads, self.asked = path, threads, precision
        self.properties = {"ATTENTION_BACKEND": "SDPA", "INFERENCE_NUM_THREADS": threads,
                           "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}  # fmt: skip
        try:
            self.pipe = og.LLMPipeline(str(path), "CPU", **self.properties)
        except RuntimeError as e:
            raise UserError(f"OpenVINO GenAI cannot load {path}: {str(e).strip().splitlines()[0][:200]}") from None
        self.tokenizer = self.pipe.get_tokenizer()

    def generate(
        self, ids: list[int], max_new_tokens: int, eos: frozenset[int] | None, on_token: Callable[[int], bool]
    ) -> EngineTimers:
        og = self.og
        cfg = og.GenerationConfig()
        cfg.max_new_tokens = max_new_tokens
        cfg.do_sample = False
        if eos is None:
            cfg.ignore_eos = True  # the engine's own way: exactly max_new_tokens
        else:
            cfg.stop_token_ids = set(eos)
        streamer = _IdStreamer(og, on_token)
        result = self.pipe.generate(self.ov.Tensor(np.asarray([ids], dtype=np.int64)), cfg, streamer)
        pm = result.perf_metrics
        return EngineTimers(
            prompt_tokens_evaluated=int(pm.get_num_input_tokens()),
            ttft_ms=round(float(pm.get_ttft().mean), 3),
            tpot_ms=round(float(pm.get_tpot().mean), 4) if pm.get_num_generated_tokens() > 1 else None,
        )

    def detokenize(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def vocab_size(self) -> int:
        """The model's vocabulary, from its files (the tokenizer's vocab vector can't be read as text: byte
        tokens are not UTF-8)."""
        if self.path.suffix == ".gguf":
            import gguf

            field = gguf.GGUFReader(str(self.path)).fields["tokenizer.ggml.tokens"]
            return len(field.data)
        import json

        return int(json.loads((self.path / "config.json").read_text(encoding="utf-8"))["vocab_size"])

    def logprobs(self, ids: list[int]) -> Any:
        return None  # LLMPipeline exposes no logits

    def facts(self) -> dict[str, Any]:
        return {**self.properties, "pipeline": "stateful (SDPA)", "device": "CPU"}

    def precision(self) -> dict[str, Any]:
        core = self.ov.Core()

        def prop(name: str) -> str:
            try:
                return str(core.get_property("CPU", name))
            except RuntimeError:
                return "?"

        group = prop("DYNAMIC_QUANTIZATION_GROUP_SIZE")
        gguf = self.path.suffix == ".gguf"
        if gguf:
            from llmbench.engines.llamacpp import gguf_file_type

            weights = gguf_file_type(_gguf_metadata(self.path))
        else:
            weights = self.asked or "?"
        activations = prop("INFERENCE_PRECISION_HINT").replace("<Type: '", "").replace("'>", "")
        if group not in ("0", "?") and weights.lower() not in ("fp32", "f32", "fp16", "f16", "bf16"):
            activations += f" (int8 per group of {group} in compressed-weight MatMuls: dynamic quantization)"
        return {"format": "gguf" if gguf else "openvino-ir", "weights": weights, "activations": activations,
                "kv_cache": prop("KV_CACHE_PRECISION").replace("<Type: '", "").replace("'>", "")}  # fmt: skip

    def close(self) -> None:
        del self.pipe


_STREAMER: Any = None


def _IdStreamer(og: Any, on_token: Callable[[int], bool]) -> Any:
    """A streamer for one request: hands each id to ``on_token`` (which stamps it; False stops the engine)."""
    global _STREAMER
    if _STREAMER is None:

        class IdStreamer(og.StreamerBase):
            def __init__(self, on_token: Callable[[int], bool]) -> None:
                super().__init__()
                self.on_token = on_token

            def write(self, token: Any) -> Any:
                go = True
                for t in token if isinstance(token, list) else (token,):
                    go = self.on_token(int(t)) and go
                return og.StreamingStatus.RUNNING if go else og.StreamingStatus.STOP

            def end(self) -> None:
                pass

        _STREAMER = IdStreamer
    return _STREAMER(on_token)


def _gguf_metadata(path: Path) -> dict[str, Any]:
    import gguf

    reader = gguf.GGUFReader(str(path))
    field = reader.fields.get("general.file_type")
    return {"general.file_type": int(field.parts[field.data[0]][0])} if field is not None else {}


def load(path: Path, *, threads: int, context: int | None, precision: str | None = None) -> OpenVINORunner:
    """OpenVINO GenAI with ``path`` loaded, ``threads`` inference threads (prefill and decode)."""
    return OpenVINORunner(path, threads, precision)
