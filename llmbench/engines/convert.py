"""A model's files for an engine: a ``.gguf`` as it is (llama.cpp, OpenVINO GenAI), or a Hugging Face folder
converted by the engine's own tool, offline, from the local folder:

- llama.cpp: llama.cpp's ``convert_hf_to_gguf.py`` (to f32/f16/bf16/q8_0), then ``llama_model_quantize`` (through
  llama-cpp-python) for the k-quants and q4/q5;
- OpenVINO GenAI: optimum-intel's exporter (``optimum-cli export openvino --weight-format ...``), which may live
  in a Python environment of its own (``LLMBENCH_OPTIMUM_CLI``);
- ONNX Runtime GenAI: its model builder (``python -m onnxruntime_genai.models.builder -p ...``); a quantized
  ``.gguf`` is first dequantized by transformers (as ``--engine transformers`` runs it) into a folder.

``--weights random`` builds the architecture with llmbench's seeded random weights and saves it as a folder first.
Every step runs in a child process (a converter that crashes or runs out of memory can't take the run with it),
writes into a temporary folder renamed into the cache when complete (removed when the step fails or is
interrupted), and is reused when the same source (by content hash), engine and library versions, precision and
tool (and the versions of the packages in the tool's environment) ask for it again. Conversion time is
reported, never timed. A failed step is one line (UserError) with the tool's last line.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from llmbench.core.errors import UserError
from llmbench.options import ModelOptions

CONVERT_VERSION = 1  # llmbench's own part of every cache key: bump when a step's arguments change
ENV_CONVERTER = "LLMBENCH_LLAMA_CPP_CONVERTER"  # path of llama.cpp's convert_hf_to_gguf.py
ENV_OPTIMUM_CLI = "LLMBENCH_OPTIMUM_CLI"  # path of an optimum-cli with optimum-intel (may be another venv's)
GGUF_OUTTYPES = ("f32", "f16", "bf16", "q8_0")  # what convert_hf_to_gguf.py writes itself


def package_version(dist: str) -> str:
    """An installed distribution's version ("?" when it can't be read)."""
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return "?"


def tools_root() -> Path:
    """``$XDG_DATA_HOME/llmbench/tools`` (~/.local/share): where scripts/install-engines.sh puts llama.cpp's
    converter and optimum-intel's exporter venv."""
    from llmbench.core.settings import settings

    return settings().data_root / "tools"


def cache_root() -> Path:
    """``$XDG_CACHE_HOME/llmbench/engines`` (beside the --dtype auto cache)."""
    from llmbench.core.settings import settings

    return settings().cache_root / "engines"


# -------------------------------------------------------------------------------------------------- hashing


def file_sha256(path: Path) -> str:
    """The content hash of a file, remembered per (path, size, mtime) so a 1 GB source is read once."""
    st = path.stat()
    memo = cache_root() / "hashes.json"
    key = f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}"
    try:
        known = json.loads(memo.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        known = {}
    if isinstance(known, dict) and isinstance(known.get(key), str):
        return known[key]
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    digest = h.hexdigest()
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        known = known if isinstance(known, dict) else {}
        known[key] = digest
        tmp = memo.with_name(f"hashes.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known), encoding="utf-8")
        tmp.replace(memo)
    except OSError:
        pass  # an unwritable cache only costs hashing again
    return digest


def source_sha256(path: Path) -> str:
    """A file's content hash, or a folder's: every file that shapes the model (weights, config, tokenizer)."""
    if path.is_file():
        return file_sha256(path)
    h = hashlib.sha256()
    for p in sorted(path.iterdir()):
        if p.is_file() and p.suffix in (".json", ".safetensors", ".model", ".tiktoken", ".jinja", ".txt", ".bin"):
            h.update(p.name.encode() + b"\0" + file_sha256(p).encode() + b"\0")
    return h.hexdigest()


def cache_key(**parts: Any) -> str:
    """A short hash of what a conversion depends on."""
    text = json.dumps({**parts, "llmbench_convert": CONVERT_VERSION}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:20]


# -------------------------------------------------------------------------------------------------- the steps


@dataclass
class Prepared:
    """The files an engine loads, and how they came to be."""

    path: Path
    steps: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    parameters: int | None = None
    weights_bytes: int | None = None
    decode_weight_bytes: int | None = None

    @property
    def convert_s(self) -> float:
        """Seconds spent converting in this invocation (0 when every step came from the cache)."""
        return sum(s["seconds"] for s in self.steps if not s["cached"])

    def record(self) -> dict[str, Any] | None:
        """``load.converted``: the steps (from, to, tool, seconds, cached) and the files loaded."""
        return {"steps": self.steps, "path": str(self.path)} if self.steps else None


def _run_step(
    what: str, tool: str, argv: list[str], out: Path, key: str, steps: list[dict[str, Any]],
    status: Callable[[str], None], env: dict[str, str] | None = None,
) -> Path:  # fmt: skip
    """``argv`` makes ``out`` (a file or folder under the cache), unless the cache has it: the step recorded."""
    if out.exists():
        steps.append({"step": what, "tool": tool, "seconds": 0.0, "cached": True, "cache_key": key})
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    argv = [a.replace("{OUT}", str(tmp)) for a in argv]
    status(f"{what} ({tool}) ...")
    log = out.parent / f"{out.name}.log"
    t = time.perf_counter()
    with log.open("wb") as f:
        try:
            proc = subprocess.run(argv, stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
                                       **(env or {})})  # fmt: skip
        except BaseException as e:  # Ctrl-C, SIGTERM: the half-written temp must not stay in the cache
            shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
            if isinstance(e, OSError):
                raise UserError(f"{what} failed: cannot start {argv[0]}: {e.strerror or e}") from None
            raise
    seconds = time.perf_counter() - t
    if proc.returncode != 0 or not tmp.exists():
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
        raise UserError(f"{what} failed ({tool}, exit {proc.returncode}): {_last_line(log)} (log: {log})")
    try:
        tmp.rename(out)
    except OSError:
        if not out.exists():  # another process finished the same conversion first: use its result
            raise
        shutil.rmtree(tmp, ignore_errors=True) if tmp.is_dir() else tmp.unlink(missing_ok=True)
    steps.append({"step": what, "tool": tool, "seconds": round(seconds, 3), "cached": False, "cache_key": key})
    return out


def _last_line(log: Path) -> str:
    """The last line of a tool's output that says something (an error, usually)."""
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8", errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no output"
    useful = [ln for ln in lines if not ln.startswith(("Warning", "warnings.warn", "  ")) and "%|" not in ln]
    return (useful or lines or ["no output"])[-1][:300]


def _py(*args: str) -> list[str]:
    return [sys.executable, *args]


# -------------------------------------------------------------------------------------------------- sources


def config_and_tokenizer(spec: ModelOptions, source: str, path: Path | None) -> tuple[Any, Any]:
    """The transformers config and the Hugging Face tokenizer of the model (the tokenizer makes every id)."""
    from llmbench.engines.hf import models

    folder: Path | None
    gguf: dict[str, Any]
    if source == "hub":  # the config and tokenizer files are enough here; the weights come with the conversion
        folder, gguf = models.hub_snapshot(spec.model, config_only=True), {}
    else:
        folder, gguf = models._model_files(spec, source, path)
    return models._config_and_tokenizer(spec, source, folder, gguf)


def _source_files(spec: ModelOptions, source: str, path: Path | None, steps: list[dict[str, Any]],
                  status: Callable[[str], None]) -> Path:  # fmt: skip
    """The files the conversion starts from: the .gguf or folder itself, a hub snapshot, or (random weights) a
    folder of llmbench's seeded random weights of the same architecture."""
    from llmbench.engines.hf import models

    if spec.weights == "random":
        if source in ("folder", "hub", "gguf"):
            facts = _config_facts(spec, source, path)
        else:
            from llmbench.engines.hf import builtin

            facts = builtin.builtin_config(spec.model) or {}
        key = cache_key(kind="random", model=spec.model, config=facts, seed=models.RANDOM_SEED,
                        torch=package_version("torch"), transformers=package_version("transformers"))  # fmt: skip
        out = cache_root() / "random" / key
        return _run_step(f"building {spec.model} with random weights", "transformers (llmbench's seeded init)",
                         _py("-m", "llmbench.engines.convert", "random", json.dumps(_spec_args(spec)), "{OUT}"),
                         out, key, steps, status)  # fmt: skip
    if source == "hub":
        return models.hub_snapshot(spec.model, config_only=False)
    assert path is not None
    if source == "folder":
        models.check_weight_files(path, spec.allow_pickle)
    return path


def _config_facts(spec: ModelOptions, source: str, path: Path | None) -> dict[str, Any]:
    config, _tok = config_and_tokenizer(spec, source, path)
    return json.loads(config.to_json_string(use_diff=False))


def _spec_args(spec: ModelOptions) -> dict[str, Any]:
    return {"model": spec.model, "weights": spec.weights, "allow_pickle": spec.allow_pickle,
            "trust_remote_code": spec.trust_remote_code}  # fmt: skip


def prepare(
    engine: str, spec: ModelOptions, source: str, path: Path | None, precision: str | None,
    status: Callable[[str], None],
) -> Prepared:  # fmt: skip
    """The engine's files for ``spec`` at ``precision`` (None: the .gguf as it is)."""
    steps: list[dict[str, Any]] = []
    src = _source_files(spec, source, path, steps, status)
    if engine == "llama.cpp":
        out = src if src.suffix == ".gguf" else _to_gguf(src, precision or "q8_0", steps, status)
        return _with_sizes(Prepared(out, steps), "gguf")
    if engine == "openvino":
        out = src if src.suffix == ".gguf" else _to_openvino(src, precision or "int8", steps, status)
        return _with_sizes(Prepared(out, steps), "gguf" if out.suffix == ".gguf" else "openvino")
    if engine == "onnxruntime":
        folder = _dequantized(src, spec, steps, status) if src.suffix == ".gguf" else src
        out = _to_onnxruntime(folder, precision or "int8", steps, status)
        return _with_sizes(Prepared(out, steps), "onnx")
    raise UserError(f"no conversion for engine {engine}")


def _to_gguf(folder: Path, precision: str, steps: list[dict[str, Any]], status: Callable[[str], None]) -> Path:
    converter = llama_cpp_converter()
    tool_hash = file_sha256(converter)[:12]
    outtype = precision if precision in GGUF_OUTTYPES else "f16"
    src_hash = source_sha256(folder)
    # the converter runs on this interpreter: its gguf and transformers (the tokenizer's conversion) shape the file
    key = cache_key(kind="gguf", source=src_hash, outtype=outtype, converter=tool_hash,
                    gguf=package_version("gguf"), transformers=package_version("transformers"))  # fmt: skip
    gguf = _run_step(f"converting {folder.name} to GGUF {outtype}", f"llama.cpp convert_hf_to_gguf.py ({tool_hash})",
                     _py(str(converter), str(folder), "--outtype", outtype, "--outfile", "{OUT}"),
                     cache_root() / "llama.cpp" / f"{key}.gguf", key, steps, status)  # fmt: skip
    if precision == outtype:
        return gguf
    version = package_version("llama-cpp-python")
    key = cache_key(kind="gguf-quantize", source=src_hash, precision=precision, converter=tool_hash, version=version)
    return _run_step(f"quantizing GGUF to {precision}", f"llama_model_quantize (llama-cpp-python {version})",
                     _py("-m", "llmbench.engines.llamacpp", "quantize", str(gguf), "{OUT}", precision),
                     cache_root() / "llama.cpp" / f"{key}.gguf", key, steps, status)  # fmt: skip


def _tool(env: str, given: Path | None, what: str, candidates: tuple[object, ...], missing: str) -> Path:
    """``given``, the file ``$env`` names (UserError if it is not one), else the first of ``candidates`` that is a
    file, else UserError ``missing``."""
    if given is not None:
        if not given.is_file():
            raise UserError(f"{env}={given}: no such file ({what})")
        return given
    for candidate in candidates:
        if candidate and Path(str(candidate)).is_file():
            return Path(str(candidate))
    raise UserError(missing)


def llama_cpp_converter() -> Path:
    """llama.cpp's ``convert_hf_to_gguf.py``: ``$LLMBENCH_LLAMA_CPP_CONVERTER``, or one on PATH; UserError
    saying where to get it (llama-cpp-python's wheel does not ship it; its source archive does)."""
    from llmbench.core.settings import settings

    return _tool(
        ENV_CONVERTER, settings().llama_cpp_converter, "llama.cpp's convert_hf_to_gguf.py",
        (tools_root() / "llama.cpp" / "convert_hf_to_gguf.py", shutil.which("convert_hf_to_gguf.py")),
        "converting a Hugging Face folder for llama.cpp needs llama.cpp's convert_hf_to_gguf.py, which "
        f"llama-cpp-python's wheel does not ship: run scripts/install-engines.sh llamacpp, or set {ENV_CONVERTER} to "
        "it (it is in llama-cpp-python's source archive and llama.cpp's repository), or give a .gguf file",
    )  # fmt: skip


def optimum_cli() -> Path:
    """optimum-intel's ``optimum-cli``: ``$LLMBENCH_OPTIMUM_CLI``, or the one beside this Python, or on PATH."""
    from llmbench.core.settings import settings

    return _tool(
        ENV_OPTIMUM_CLI, settings().optimum_cli, "optimum-intel's optimum-cli",
        (tools_root() / "ov-export" / "bin" / "optimum-cli", Path(sys.executable).parent / "optimum-cli",
         shutil.which("optimum-cli")),
        "converting a Hugging Face folder for OpenVINO needs optimum-intel's exporter (optimum-cli), which pins an "
        f"older transformers: run scripts/install-engines.sh openvino (a venv of its own), or set {ENV_OPTIMUM_CLI} "
        "to an optimum-cli, or give a .gguf",
    )  # fmt: skip


def _to_openvino(folder: Path, precision: str, steps: list[dict[str, Any]], status: Callable[[str], None]) -> Path:
    cli = optimum_cli()
    key = cache_key(kind="openvino", source=source_sha256(folder), precision=precision, tool=str(cli.resolve()),
                    tool_packages=tool_packages(cli), openvino=package_version("openvino"))  # fmt: skip
    return _run_step(
        f"exporting {folder.name} to OpenVINO IR ({precision} weights)", "optimum-intel optimum-cli export openvino",
        [str(cli), "export", "openvino", "--model", str(folder), "--task", "text-generation-with-past",
         "--weight-format", precision, "{OUT}"],
        cache_root() / "openvino" / key, key, steps, status,
    )  # fmt: skip


EXPORT_PACKAGES = ("optimum", "optimum_intel", "nncf", "openvino", "openvino_tokenizers", "transformers", "torch")


def tool_packages(cli: Path) -> list[str]:
    """The versions of the packages that shape an export, in the environment ``cli`` runs in (its venv's
    ``*.dist-info`` names, e.g. ``nncf-2.14.0.dist-info``): the same path after an upgrade is another tool. When
    ``cli`` is in no venv, this interpreter's versions."""
    venv = cli.resolve().parent.parent
    names = sorted(d.name for d in venv.glob("lib/python*/site-packages/*.dist-info")
                   if d.name.split("-")[0].lower() in EXPORT_PACKAGES)  # fmt: skip
    return names or [f"{name}-{package_version(name.replace('_', '-'))}" for name in EXPORT_PACKAGES]


def _to_onnxruntime(folder: Path, precision: str, steps: list[dict[str, Any]], status: Callable[[str], None]) -> Path:
    from llmbench.core.errors import require

    require("converting a model for ONNX Runtime GenAI (its model builder)", "onnxruntime", "onnx", "onnx_ir")
    version = package_version("onnxruntime-genai")
    key = cache_key(kind="onnxruntime", source=source_sha256(folder), precision=precision, version=version)
    out = cache_root() / "onnxruntime" / key
    return _run_step(
        f"building {folder.name} for ONNX Runtime GenAI ({precision})", f"onnxruntime_genai builder {version}",
        _py("-m", "onnxruntime_genai.models.builder", "-i", str(folder), "-o", "{OUT}", "-p", precision, "-e", "cpu",
            "-c", str(out.parent / f"{key}.hf-cache")),
        out, key, steps, status,
    )  # fmt: skip


def _dequantized(gguf: Path, spec: ModelOptions, steps: list[dict[str, Any]], status: Callable[[str], None]) -> Path:
    key = cache_key(kind="dequantized", source=file_sha256(gguf), transformers=package_version("transformers"))
    return _run_step(f"dequantizing {gguf.name} to a float32 folder", "transformers (gguf)",
                     _py("-m", "llmbench.engines.convert", "dequantize", str(gguf), "{OUT}"),
                     cache_root() / "dequantized" / key, key, steps, status)  # fmt: skip


# -------------------------------------------------------------------------------------------------- sizes


def _with_sizes(p: Prepared, kind: str) -> Prepared:
    """Parameters, weight bytes and the bytes a decode step reads (an input embedding that only a Gather reads
    is left out: a step gathers one row), from the engine's own files."""
    from llmbench.engines import sizes

    try:
        counted = {"gguf": sizes.gguf_sizes, "openvino": sizes.openvino_sizes, "onnx": sizes.onnx_sizes}[kind](p.path)
    except Exception as e:  # a file layout we don't know: the roofline is omitted, not wrong
        p.warnings.append(f"could not count the weights of {p.path.name} ({type(e).__name__}): no roofline")
        return p
    p.parameters, p.weights_bytes, p.decode_weight_bytes = counted
    return p


# -------------------------------------------------------------------------------------------------- child steps


def _random_main(args: dict[str, Any], out: str) -> None:
    """Save llmbench's seeded random-weights model (float32) and its tokenizer as a Hugging Face folder."""
    import torch

    from llmbench.engines.hf import models

    spec = ModelOptions(model=args["model"], weights="random", dtype="float32", device="cpu",
                        allow_pickle=args["allow_pickle"], trust_remote_code=args["trust_remote_code"])  # fmt: skip
    source, path = models.classify_source(spec.model, spec.weights)
    folder, gguf = models._model_files(spec, source, path)
    config, tokenizer = models._config_and_tokenizer(spec, source, folder, gguf)
    model = models._random_model(config, torch.float32, "cpu")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


def _dequantize_main(gguf: str, out: str) -> None:
    """A .gguf dequantized by transformers (float32), saved as a Hugging Face folder."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    p = Path(gguf)
    model = AutoModelForCausalLM.from_pretrained(p.parent, gguf_file=p.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(p.parent, gguf_file=p.name)
    # the weights are plain float32 tensors now; transformers only refuses to save "a gguf-quantized model"
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)


if __name__ == "__main__":  # the child steps: python -m llmbench.engines.convert random|dequantize ...
    op = sys.argv[1]
    if op == "random":
        _random_main(json.loads(sys.argv[2]), sys.argv[3])
    elif op == "dequantize":
        _dequantize_main(sys.argv[2], sys.argv[3])
    else:
        raise SystemExit(f"unknown step {op}")
