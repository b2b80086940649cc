"""Engines beside transformers: llama.cpp, OpenVINO GenAI and ONNX Runtime GenAI, in process, fed token ids.

Every engine gets the same work: the prompt's ids made once by the model's Hugging Face tokenizer (chat template
included), greedy decoding of exactly ``max_new_tokens`` tokens (each engine's own way of ignoring EOS), no
prefix carried over from an earlier request (checked per request on the engine's own counter), thread counts set
explicitly and alike for prefill and decode. Each token is stamped when the engine hands its id over; ids are
decoded to text after the request.

- :mod:`llmbench.engines.base`: what an engine runner does (:class:`~llmbench.engines.base.Runner`) and the
  loaded model (:class:`~llmbench.engines.base.EngineModel`).
- :mod:`llmbench.engines.convert`: a model's files for an engine (GGUF as is; a Hugging Face folder converted
  by the engine's own tool), cached by the source's hash, the engine's version and the precision.
- :mod:`llmbench.engines.llamacpp`, :mod:`~llmbench.engines.openvino`, :mod:`~llmbench.engines.onnxruntime`.

No engine package is imported here: ``--help`` and the readers stay light.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

# the registry needs only errors, so it sits in core (options reads it); re-exported here, where it is looked for
from llmbench.core.engine_registry import ENGINE_ALIASES as ENGINE_ALIASES
from llmbench.core.engine_registry import ENGINES as ENGINES
from llmbench.core.engine_registry import EngineInfo as EngineInfo
from llmbench.core.engine_registry import engine_info as engine_info
from llmbench.core.engine_registry import require_engine as require_engine
from llmbench.core.errors import UserError

if TYPE_CHECKING:
    from llmbench.options import ModelOptions


def check_precision(engine: str, precision: str | None, source: str) -> str | None:
    """The precision to convert to (lower case), None: the file's own (a GGUF on llama.cpp or OpenVINO), or
    UserError for one the engine's converter can't make."""
    info = engine_info(engine)
    if info.name == "transformers":
        if precision is not None:
            raise UserError("--precision is for the other engines; transformers takes --dtype and --quantize")
        return None
    p = precision.strip().lower() if precision else None
    if source == "gguf" and info.name in ("llama.cpp", "openvino"):
        if p not in (None, "gguf"):
            raise UserError(
                f"--engine {info.name} runs a .gguf as it is quantized; --precision {precision} would quantize "
                "it again (compounding the error): give the Hugging Face folder, or drop --precision"
            )
        return None
    if p in (None, "gguf"):
        return info.default_precision
    if p not in info.precisions:
        raise UserError(
            f"--engine {info.name}: unknown --precision '{precision}'; expected {', '.join(info.precisions)}"
        )
    return p


def validate(spec: ModelOptions) -> str:
    """The cheap checks of an engine run before anything loads (the engine installed, its knobs, the source, the
    precision); the engine's name. transformers' own checks are :func:`llmbench.engines.hf.models.validate`."""
    from llmbench.engines.hf import models

    info = require_engine(spec.engine)
    if info.name == "transformers":
        models.validate(spec)
        return info.name
    if spec.device.strip().lower() not in ("auto", "cpu"):
        raise UserError(f"--engine {info.name} runs on the CPU here; --device {spec.device} is for transformers")
    knobs = (("--dtype", spec.dtype.strip().lower() != "auto"), ("--quantize", spec.quantization),
             ("--attn", spec.attn), ("--device-map", spec.device_map), ("--reprobe", spec.reprobe))  # fmt: skip
    for flag, given in knobs:
        if given:
            raise UserError(f"{flag} is a transformers knob; --engine {info.name} takes --precision")
    spec.check()  # the spec's types and bounds, should a caller have changed one
    source, _path = models.classify_source(spec.model, spec.weights)
    check_precision(info.name, spec.precision, source)
    return info.name


def check_run_options(engine: str, options: object) -> None:
    """UserError for run options only transformers honours: engines decode greedily and manage their own cache."""
    if getattr(options, "sample", False):
        raise UserError(f"--sample: --engine {engine} is measured with greedy decoding (the same work on every engine)")
    if getattr(options, "compile", False) or getattr(options, "cache", "dynamic") != "dynamic":
        raise UserError("--cache and --compile are transformers knobs; the other engines manage their own")
    check_levers(engine, options)


def check_levers(engine: str, options: object) -> None:
    """UserError in one line for a --speculative method or --prefix-cache ``engine`` does not have in-process
    (checked before anything loads)."""
    from llmbench.core.speculative import parse_prefix_cache, parse_speculative

    info = engine_info(engine)
    spec = parse_speculative(getattr(options, "speculative", None))
    if spec is not None and spec.method not in info.speculative:
        has = f"it has {', '.join(info.speculative)}" if info.speculative else "it has none in-process"
        raise UserError(f"--speculative {spec.method}: --engine {info.name} has no such method ({has})")
    if parse_prefix_cache(getattr(options, "prefix_cache", "none")) != "none" and not info.prefix_cache:
        raise UserError(f"--prefix-cache: --engine {info.name} keeps no prefix cache in-process")


def status() -> list[dict[str, str]]:
    """Each engine: installed version, what it reads, its converter, and (llama.cpp) whether its build uses
    instructions this CPU lacks (the SIGILL a -march=native build from another CPU dies with)."""
    from llmbench.engines import convert as cv

    rows = []
    for info in ENGINES.values():
        ok = all(importlib.util.find_spec(m) is not None for m in info.modules)
        row = {"engine": info.name, "installed": cv.package_version(info.distribution) if ok else "no",
               "extra": f"llmbench[{info.extra}]", "reads": "", "converter": "", "note": ""}  # fmt: skip
        if info.name == "transformers":
            row.update(reads="Hugging Face folders, hub ids, .gguf (dequantized)", converter="-")
        elif info.name == "llama.cpp":
            row["reads"] = ".gguf; a folder through llama.cpp's converter"
            row["converter"] = _found(cv.llama_cpp_converter)
            if ok:
                row["note"] = llama_cpp_build_check()
        elif info.name == "openvino":
            row["reads"] = ".gguf (llama/qwen2/qwen3), OpenVINO IR; a folder through optimum-intel"
            row["converter"] = _found(cv.optimum_cli)
        else:
            row["reads"] = "onnxruntime-genai folders; a folder (or a float .gguf) through its model builder"
            have = all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnx_ir"))
            row["converter"] = "onnxruntime_genai.models.builder" if ok and have else "missing (onnx, onnx_ir)"
        rows.append(row)
    return rows


def _found(fn: object) -> str:
    try:
        return str(fn())  # type: ignore[operator]
    except UserError:
        return "not found"


def llama_cpp_build_check() -> str:
    """'' when llama.cpp's build uses only instructions this CPU has, else what it would die of (SIGILL).

    The library is asked in a child process: a build for a wider CPU can die of SIGILL on its first call, and
    that must not take ``llmbench engines`` down with it.
    """
    import signal
    import subprocess
    import sys

    from llmbench.machine.envinfo import cpu_flags

    probe = "import llama_cpp; print(llama_cpp.llama_print_system_info().decode(errors='replace'))"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"its build could not be asked what it uses ({type(e).__name__})"
    if done.returncode == -signal.SIGILL:
        return "its build uses instructions this CPU lacks: it dies of SIGILL (rebuild: install-engines.sh llamacpp)"
    if done.returncode != 0:
        return f"its build could not be asked what it uses (exit {done.returncode})"
    built = done.stdout
    flags = cpu_flags()
    if not flags:
        return ""
    needs = {"AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "AVX512": "avx512f",
             "AVX512_VBMI": "avx512vbmi", "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16",
             "AMX_INT8": "amx_int8", "AMX_BF16": "amx_bf16"}  # fmt: skip
    missing = [name for name, flag in needs.items() if f"{name} = 1" in built and flag not in flags]
    if missing:
        return f"its build uses {', '.join(missing)}, which this CPU lacks: it will die with SIGILL (rebuild it)"
    return "build matches this CPU"
