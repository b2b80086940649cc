"""Loading a model the way the user named it, on the device and dtype asked, and proving nothing was offloaded.

Sources: a Hugging Face hub id (cache first, honouring HF_HOME / HF_HUB_OFFLINE), a local folder, a
``.gguf`` file, or (``weights="random"``) any of those, or a model llmbench carries (see builtin.py), built
from its config with random weights.

The seed's lesson: ``device_map="auto"`` once put weights on disk and made every token 8.6x slower with
no visible sign. So after loading, every parameter and buffer is checked, and anything on ``disk`` or
``meta`` (or on the CPU when a GPU computes) stops the run unless the user allowed it.

Why one module of 700-odd lines (over 600): naming the source, choosing device and dtype, loading and the offload proof
are one sequence over the same few objects (the spec, the config, the model); the pieces that stand alone live
beside it (autodtype, builtin, quantize, generation).
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import copy
import json
import os
import re
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Any

import psutil
import torch

from llmbench.core.errors import UserError
from llmbench.core.process import cold_clock
from llmbench.engines.hf import autodtype, builtin, weights_cache
from llmbench.engines.hf.quantize import check_quantize, forced_dtype, quantize_model, quantized_weight_bytes
from llmbench.machine.envinfo import cpu_flags
from llmbench.options import ModelOptions
from llmbench.results.schema import LoadInfo, Offload
from llmbench.spec import ModelSection, Weights, check_value, default_threads

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_DTYPE_ALIASES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16", "float": "float32"}
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*(/[\w.\-]+)?$")
RANDOM_SEED = 0  # random weights are the same on every run, so greedy outputs can be compared
_WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py"]
_ALTERNATIVES = (
    "use --weights random to run its architecture with random weights (offline), pass a local model folder or a "
    ".gguf file, or download it first (huggingface-cli download ...) into HF_HOME"
)


def validate(spec: ModelOptions) -> str:
    """Check the cheap things of ``spec`` before any slow work; return the resolved device."""
    spec.check()  # weights, attention kernel, threads: the spec's types and bounds
    device = resolve_device(spec.device)
    resolve_dtype(spec.dtype, device, probe=False)
    classify_source(spec.model, spec.weights)
    _device_map_arg(spec.device_map, device)
    if spec.quantization is not None:
        check_quantize(spec.quantization, device, resolve_dtype(spec.dtype, device, probe=False)[0])
    if spec.reprobe and spec.dtype.strip().lower() != "auto":
        raise UserError(
            f"--reprobe measures the dtypes for --dtype auto; with --dtype {spec.dtype} it has nothing to do"
        )
    return device


@dataclass
class LoadedModel:
    """A model ready to generate, with what loading it found out."""

    model: Any
    tokenizer: Any
    name: str  # as the user gave it (hub id, folder or .gguf path)
    weights: Weights
    source: str  # "hub" | "folder" | "gguf" | "builtin"
    device: str
    dtype: str
    dtype_reason: str
    threads: int
    load: LoadInfo
    max_positions: int | None
    warnings: list[str] = field(default_factory=list)
    quantization: str | None = None  # "int8" when the linears were quantized
    auto: list[str] = field(default_factory=list)  # config fields chosen automatically (automatic_choices)

    def call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Run ``fn(*args, **kwargs)`` on the thread this model generates on and return its result.

        torch keeps one OpenMP team (and thread count) per calling thread: code that drives the model itself
        (a bare ``generate()`` to compare against, a custom probe) belongs on the same thread as llmbench's
        measurements, or the two teams compete for the cores.
        """
        from llmbench.engines.hf.generation import generation_thread

        return generation_thread().run(fn, *args, **kwargs)


# ---------------------------------------------------------------------------------------------- device/dtype


def resolve_device(requested: str) -> str:
    """'auto' -> the best device present; otherwise check the asked device exists. UserError if not."""
    req = (requested or "auto").strip().lower()
    if req == "auto":
        if torch.cuda.is_available():
            return "cuda:0"
        if _mps_available():
            return "mps"
        return "cpu"
    if req == "cpu":
        return "cpu"
    if req == "mps":
        if not _mps_available():
            raise UserError("--device mps: no Apple MPS device is available here; use --device cpu")
        return "mps"
    m = re.fullmatch(r"cuda(?::(\d+))?", req)
    if m:
        if not torch.cuda.is_available():
            build = "a CPU-only build" if torch.version.cuda is None else f"CUDA {torch.version.cuda}"
            raise UserError(
                f"--device {requested}: no CUDA device is available (torch {torch.__version__}, {build}); "
                "use --device cpu"
            )
        index = int(m.group(1) or 0)
        if index >= torch.cuda.device_count():
            raise UserError(f"--device {requested}: only {torch.cuda.device_count()} CUDA device(s) here")
        return f"cuda:{index}"
    raise UserError(f"unknown --device '{requested}'; expected auto, cpu, cuda, cuda:N or mps")


def _mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def cpu_native_dtypes() -> set[str]:
    """The 16-bit dtypes this CPU computes natively (Linux flags): bfloat16 with AVX512-BF16/AMX-BF16,
    float16 with AVX512-FP16/AMX-FP16. Elsewhere they are emulated, often several times slower."""
    flags = cpu_flags()
    native = set()
    if flags & {"avx512_bf16", "amx_bf16"}:
        native.add("bfloat16")
    if flags & {"avx512_fp16", "amx_fp16"}:
        native.add("float16")
    return native


def resolve_dtype(
    requested: str, device: str, *, probe: bool = True, reprobe: bool = False, warnings: list[str] | None = None
) -> tuple[str, str]:
    """The dtype name to load in, and why. 'auto': bfloat16 on a GPU that has it; on a CPU the stable choice of
    :mod:`llmbench.engines.hf.autodtype` (a preference order the probe overrides only beyond its noise, cached per
    machine). ``probe=False`` only validates. Cache problems are appended to ``warnings``."""
    req = (requested or "auto").strip().lower()
    req = _DTYPE_ALIASES.get(req, req)
    if req != "auto":
        if req not in DTYPES:
            raise UserError(f"unknown --dtype '{requested}'; expected auto, float32, bfloat16 or float16")
        return req, "asked"
    kind = device.split(":")[0]
    if kind == "cuda":
        if not probe or torch.cuda.is_bf16_supported():
            return "bfloat16", "auto: the GPU supports bfloat16 (float16's speed, float32's range)"
        return "float16", "auto: the GPU has no bfloat16"
    if kind == "mps":
        return "float16", "auto: MPS computes float16 natively"
    candidates = ("float32", *sorted(cpu_native_dtypes()))
    if len(candidates) == 1:
        return "float32", "auto: the CPU has no native bfloat16/float16, where float32 is fastest"
    if not probe:
        return autodtype.preferred(candidates), "auto (not probed)"
    key = autodtype.machine_key(torch.get_num_threads(), cpu_flags(), torch.__version__)
    choice = autodtype.choose(candidates, key, reprobe=reprobe)
    if warnings is not None:
        warnings.extend(choice.warnings)
    return choice.dtype, choice.reason


def dtype_warnings(dtype: str, device: str) -> list[str]:
    """Warnings for a dtype that is known to be slow on the device."""
    if dtype == "float16" and device == "cpu" and "float16" not in cpu_native_dtypes():
        return [
            "float16 on a CPU without native float16 (no AVX512-FP16/AMX-FP16): it is emulated (prefill measured "
            "~6x slower than bfloat16 on an AMD EPYC); --dtype bfloat16 or float32 is usually faster"
        ]
    return []


def configure_threads(threads: int | None) -> int:
    """Set torch's intra-op threads: as asked, else the one default every engine takes
    (:func:`llmbench.spec.default_threads`); return the count in force."""
    if threads is not None:
        check_value(ModelSection, "threads", threads)
    torch.set_num_threads(threads if threads is not None else default_threads())
    return torch.get_num_threads()


# ---------------------------------------------------------------------------------------------- sources


def classify_source(model: str, weights: str) -> tuple[str, Path | None]:
    """('gguf'|'folder'|'builtin'|'hub', local path or None). UserError for a path that isn't there."""
    if not model or not model.strip():
        raise UserError("--model is empty")
    p = Path(model).expanduser()
    if model.lower().endswith(".gguf"):
        if not p.is_file():
            raise UserError(f"GGUF file not found: {model}")
        return "gguf", p
    if p.is_dir():
        return "folder", p
    if p.exists():
        raise UserError(f"--model {model} is a file; expected a model folder, a .gguf file or a hub id")
    if model.startswith((".", "/", "~")) or "\\" in model or model.count("/") > 1:
        raise UserError(f"model folder not found: {model}")
    if not _HUB_ID.match(model):
        raise UserError(f"--model '{model}' is neither an existing folder nor a valid hub id (owner/name)")
    if weights == "random" and builtin.builtin_config(model) is not None:
        return "builtin", None
    return "hub", None


def _hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def hub_snapshot(repo_id: str, *, config_only: bool) -> Path:
    """The cached snapshot folder of a hub model, downloading it first when online. UserError when unreachable."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HfHubHTTPError, LocalEntryNotFoundError

    patterns = ["*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja"] if config_only else _WEIGHT_PATTERNS
    try:
        return Path(snapshot_download(repo_id, local_files_only=True, allow_patterns=patterns))
    except LocalEntryNotFoundError:
        pass
    hf_home = os.environ.get("HF_HOME", "~/.cache/huggingface")
    if _hub_offline():
        raise UserError(
            f"model '{repo_id}' is not in the Hugging Face cache (HF_HOME={hf_home}) and "
            f"HF_HUB_OFFLINE is set; {_ALTERNATIVES}"
        ) from None
    try:
        return Path(snapshot_download(repo_id, allow_patterns=patterns))
    except (LocalEntryNotFoundError, HfHubHTTPError, OSError) as e:
        reason = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
        raise UserError(
            f"model '{repo_id}' is not cached (HF_HOME={hf_home}) and the hub can't be reached "
            f"({reason}); {_ALTERNATIVES}"
        ) from None


def check_weight_files(folder: Path, allow_pickle: bool, hub_id: str | None = None) -> None:
    """A folder must hold safetensors weights; pickle-only weights need --allow-pickle (pickle runs code). A
    hub model's snapshot never has pickles (only safetensors are fetched), so --allow-pickle can't help there."""
    if any(folder.glob("*.safetensors")):
        return
    if hub_id is not None:
        raise UserError(
            f"'{hub_id}' has no safetensors weights in the cache (llmbench fetches safetensors only: pickle runs "
            "code); download the repository yourself (huggingface-cli download ...) and pass its folder with "
            "--allow-pickle if you trust it, or use --weights random"
        )
    pickles = sorted(p.name for p in chain(folder.glob("*.bin"), folder.glob("*.pt"), folder.glob("*.pth")))
    if pickles and not allow_pickle:
        raise UserError(
            f"{folder} has only pickle weights ({pickles[0]}); loading pickle can run arbitrary code: "
            "convert them to safetensors, or pass --allow-pickle if you trust this folder"
        )
    if not pickles:
        raise UserError(
            f"{folder} has no weights (*.safetensors); use --weights random to run its architecture with random weights"
        )


# ---------------------------------------------------------------------------------------------- memory checks


def count_parameters(config) -> int:
    """Parameters of a model built from ``config``, counted on the meta device (no memory, tied weights once)."""
    from transformers import AutoModelForCausalLM

    # torch.device("meta"), not accelerate's init_empty_weights: the latter leaves tied weights untied (2x count).
    with torch.device("meta"):
        m = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in m.parameters())


def available_bytes(device: str) -> int:
    """Free memory where the weights will live: RAM for the CPU, VRAM for a GPU."""
    if device.startswith("cuda"):
        free, _total = torch.cuda.mem_get_info(torch.device(device))
        return int(free)
    return int(psutil.virtual_memory().available)


def check_fits(weights_bytes: int, device: str, allow_offload: bool) -> None:
    """Stop before loading when the weights can't fit: loading would swap, offload or be OOM-killed."""
    free = available_bytes(device)
    need = int(weights_bytes * 1.10) + (256 << 20)  # activations, KV cache and allocator slack
    if need > free and not allow_offload:
        where = "VRAM" if device.startswith("cuda") else "RAM"
        raise UserError(
            f"the weights need ~{_gb(weights_bytes)} but only {_gb(free)} of {where} is free; free memory, "
            "choose a smaller --dtype or model, or pass --device-map auto --allow-offload to run partly "
            "offloaded (slow, and recorded)"
        )


def _gb(n: int) -> str:
    return f"{n / 1e9:.2f} GB"


# ---------------------------------------------------------------------------------------------- offload check


def find_offload(model, device: str) -> Offload:
    """Where the weights really are: modules mapped to disk (or CPU while a GPU computes), and tensors on meta.

    accelerate leaves offloaded weights as ``meta`` tensors and streams them in at every forward pass,
    so the ``meta`` list and ``missing_bytes`` catch offloading however it was set up.
    """
    compute = device.split(":")[0]
    dm = getattr(model, "hf_device_map", None) or {}
    disk = sorted(k for k, v in dm.items() if str(v) == "disk")
    cpu = sorted(k for k, v in dm.items() if str(v) == "cpu") if compute != "cpu" else []
    meta: list[str] = []
    missing = 0
    seen: set[int] = set()
    for name, t in chain(model.named_parameters(), model.named_buffers()):
        if id(t) in seen:
            continue
        seen.add(id(t))
        off_device = t.device.type == "meta" or (compute != "cpu" and t.device.type == "cpu")
        if off_device:
            missing += t.numel() * t.element_size()
        if t.device.type == "meta":
            meta.append(name)
    return Offload(disk=disk, cpu=cpu, meta=meta, missing_bytes=missing)


def offload_message(off: Offload) -> str:
    """One line naming what is offloaded and how much memory was missing."""
    parts = []
    for label, names in (("on disk", off.disk), ("on the CPU", off.cpu), ("on meta", off.meta)):
        if names:
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            parts.append(f"{label}: {shown}")
    return f"weights are offloaded ({'; '.join(parts)}); {_gb(off.missing_bytes)} of weights are not in memory"


# ---------------------------------------------------------------------------------------------- loading


def load_model(spec: ModelOptions) -> LoadedModel:
    """Load what ``spec`` names, check it is fully in memory, and return it ready to generate."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # llmbench shows its own status; tqdm bars would litter logs and CI

    device = validate(spec)
    threads = configure_threads(spec.threads)  # before the dtype probe: it runs on these threads
    warnings: list[str] = []
    if forced_dtype(spec.quantize) is not None:
        dtype_name, dtype_reason = "float32", f"{spec.quantize} weights compute in float32 (dynamic quantization)"
    else:
        dtype_name, dtype_reason = resolve_dtype(spec.dtype, device, reprobe=spec.reprobe, warnings=warnings)
    dtype = DTYPES[dtype_name]
    warnings += dtype_warnings(dtype_name, device)
    source, path = classify_source(spec.model, spec.weights)

    before_load = cold_clock()
    t0 = time.perf_counter()
    folder, gguf = _model_files(spec, source, path)
    t_located = time.perf_counter()
    config, tokenizer = _config_and_tokenizer(spec, source, folder, gguf, warnings)
    t_config = time.perf_counter()
    _import_model_code(config)  # transformers imports an architecture's code on first use: a phase of its own
    t_code = time.perf_counter()
    n_params = count_parameters(config)
    weights_bytes = n_params * torch.tensor([], dtype=dtype).element_size()
    check_fits(weights_bytes, device, spec.allow_offload or spec.device_map is not None)
    if spec.weights == "random":
        if spec.device_map is not None:
            warnings.append("--device-map is ignored with --weights random: the weights are built on the device")
        weights = _random_weights(config, dtype, device, warnings)
        warnings.insert(0, "RANDOM WEIGHTS: the architecture is real, the outputs are meaningless; timings only")
    else:
        weights = _pretrained_weights(spec, source, folder, gguf, dtype, device)
    model = weights.value
    t_weights = time.perf_counter()  # from_pretrained reads and places in one call: weights_s holds both
    # Whether the weights are the files' pages (shared between processes, file-backed) or a private copy; asked of
    # the kernel, not assumed. Quantized linears are new private tensors: not mapped, whatever the file was.
    mmapped = weights_cache.file_backed(model.parameters(), weights.files) if spec.quantization is None else False
    model.eval()
    if spec.attn is not None:
        set_attention(model, spec.attn)
    seconds = time.perf_counter() - t0
    quantize_s = None
    if spec.quantization is not None:
        t1 = time.perf_counter()
        model = quantize_model(model, spec.quantization)
        quantize_s = round(time.perf_counter() - t1, 3)

    off = _checked_offload(model, device, spec.allow_offload, warnings)
    moe = mixture_of_experts(config)
    if moe:
        warnings.append(
            f"mixture of experts ({moe}): a decode step reads only the experts its tokens are routed to, so the "
            "weights-per-step roofline (tpot_bound_ms, tpot_efficiency) is omitted rather than counting every expert"
        )
    hf_map = getattr(model, "hf_device_map", None)
    load = LoadInfo(
        seconds=round(seconds, 3),
        device_map={k: str(v) for k, v in hf_map.items()} if hf_map else None,
        offload=off,
        allowed_offload=spec.allow_offload,
        parameters=n_params,
        weights_bytes=weights_bytes,
        decode_weight_bytes=None if moe else decode_weight_bytes(model),
        quantize_s=quantize_s,
        weights_cache=weights.record,
        weights_mmapped=mmapped,
    )
    _prepare_generation(model, tokenizer)
    load.phases = {
        "before_load_s": before_load,
        "locate_s": round(t_located - t0, 3),
        "config_tokenizer_s": round(t_config - t_located, 3),
        "model_code_s": round(t_code - t_config, 3),
        "weights_s": round(t_weights - t_code, 3),
        # eval and the attention kernel: the phases add up to load.seconds (quantizing, the offload check and
        # generation's set-up come after it; ready_s counts them)
        "build_s": round(t0 + seconds - t_weights, 3),
    }
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=spec.model,
        weights=spec.weights,
        source=source,
        device=device,
        dtype=dtype_name,
        dtype_reason=dtype_reason,
        threads=threads,
        load=load,
        max_positions=getattr(config, "max_position_embeddings", None),
        warnings=warnings,
        quantization=spec.quantization,
        auto=automatic_choices(spec),
    )


def context_length(spec: ModelOptions) -> int | None:
    """The model's context (max_position_embeddings) from its config alone, without loading weights, for a
    built-in model or a local folder; None where that would need more (a hub download, a GGUF parse)."""
    source, path = classify_source(spec.model, spec.weights)
    if source == "builtin":
        facts = builtin.builtin_config(spec.model) or {}
        return facts.get("max_position_embeddings")
    if source == "folder" and path is not None and (path / "config.json").is_file():
        try:
            value = json.loads((path / "config.json").read_text(encoding="utf-8")).get("max_position_embeddings")
        except (OSError, ValueError):
            return None
        return value if isinstance(value, int) else None
    return None


def automatic_choices(spec: ModelOptions) -> list[str]:
    """The config fields llmbench (or transformers) chose because the user left them to it."""
    chosen = {
        "device": spec.device.strip().lower() == "auto",
        "dtype": spec.dtype.strip().lower() == "auto" and forced_dtype(spec.quantize) is None,
        "threads": spec.threads is None,
        "attn_implementation": spec.attn is None,
    }
    return [k for k, v in chosen.items() if v]


def _model_files(spec: ModelOptions, source: str, path: Path | None) -> tuple[Path | None, dict[str, Any]]:
    """(the folder to load from, the gguf_file argument) for a source; a hub model is fetched (cache first)."""
    if source == "gguf":
        assert path is not None
        _require_gguf()
        return path.parent, {"gguf_file": path.name}
    if source == "folder":
        return path, {}
    if source == "hub":
        return hub_snapshot(spec.model, config_only=spec.weights == "random"), {}
    return None, {}


# A process reads a folder's config and tokenizer once (~1-2 s with a 151,936-token vocabulary): a notebook, a sweep
# or a test suite that loads the same folder again (another dtype, quantized, another run) reuses them. The key
# holds every file's size and mtime, so a changed folder is read again. The tokenizer is shared (llmbench only
# reads it; a deep copy costs as much as a read); the config is copied (loading writes dtype and attention into it).
_READ: collections.OrderedDict[tuple, tuple[Any, Any]] = collections.OrderedDict()
_READ_MAX = 4
_READ_LOCK = threading.Lock()


def _read_key(folder: Path, gguf: dict[str, Any], remote: bool) -> tuple | None:
    """What a folder's config and tokenizer were read from: its files' names, sizes and mtimes (None: unreadable,
    or remote code, whose modules may change without the folder changing)."""
    if remote:
        return None
    try:
        files = tuple(sorted((p.name, st.st_size, st.st_mtime_ns) for p in folder.iterdir()
                             if (st := p.stat()) and p.is_file()))  # fmt: skip
    except OSError:
        return None
    return (str(folder.resolve()), files, tuple(sorted(gguf.items())))


def _config_and_tokenizer(
    spec: ModelOptions, source: str, folder: Path | None, gguf: dict[str, Any], warnings: list[str] | None = None
):
    from transformers import AutoConfig, AutoTokenizer

    try:
        if source == "builtin":
            facts = builtin.builtin_config(spec.model)
            assert facts is not None  # classify_source said builtin
            return AutoConfig.for_model(**facts), _builtin_tokenizer([] if warnings is None else warnings)
        assert folder is not None
        if source in ("folder", "hub") and not (folder / "config.json").is_file():
            raise UserError(f"{folder} has no config.json: not a transformers model folder")
        remote = {"trust_remote_code": spec.trust_remote_code}
        key = _read_key(folder, gguf, spec.trust_remote_code)
        with _READ_LOCK:
            hit = _READ.get(key) if key is not None else None
        if hit is None:
            hit = (AutoConfig.from_pretrained(folder, **gguf, **remote),
                   AutoTokenizer.from_pretrained(folder, **gguf, **remote))  # fmt: skip
            if key is not None:
                with _READ_LOCK:
                    _READ[key] = hit
                    while len(_READ) > _READ_MAX:
                        _READ.popitem(last=False)
        return copy.deepcopy(hit[0]), hit[1]
    except UserError:
        raise
    except Exception as e:  # config.json or tokenizer files unreadable: transformers raises many types
        raise UserError(f"cannot load the config/tokenizer of {spec.model}: {_first_line(e)}") from None


def _builtin_tokenizer(warnings: list[str]):
    """:func:`builtin.qwen_tokenizer`, kept in the cache: building it converts the BPE vocabulary (~4 s a process),
    loading its saved ``tokenizer.json`` takes about a second. The key holds everything the build reads."""
    import hashlib

    import tokenizers
    import transformers
    from transformers import PreTrainedTokenizerFast

    from llmbench.core.version import __version__

    vocab = builtin.qwen_vocab_file()  # first: without dashscope this is the one clear error, cache or not
    parts = {"kind": "qwen-tokenizer", "vocab_sha256": hashlib.sha256(vocab.read_bytes()).hexdigest(),
             "pattern": builtin.QWEN_PATTERN, "special": builtin.QWEN_SPECIAL_TOKENS,
             "template": builtin.QWEN_CHAT_TEMPLATE, "llmbench": __version__,
             "transformers": transformers.__version__, "tokenizers": tokenizers.__version__}  # fmt: skip
    return weights_cache.cached(
        "tokenizers",
        parts,
        build=builtin.qwen_tokenizer,
        save=lambda tok, folder: tok.save_pretrained(folder),
        load=PreTrainedTokenizerFast.from_pretrained,
        what="the Qwen tokenizer",
        warnings=warnings,
    ).value


def _import_model_code(config: Any) -> None:
    """Import the causal LM class of ``config``'s architecture (transformers imports it lazily, seconds on a
    small CPU, which from_pretrained would otherwise count as reading weights); nothing for one it doesn't map."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    # remote code or an unmapped config: from_pretrained finds it (and says so) itself
    with contextlib.suppress(KeyError, ImportError, ValueError):
        MODEL_FOR_CAUSAL_LM_MAPPING[type(config)]


def _pretrained_weights(
    spec: ModelOptions, source: str, folder: Path | None, gguf: dict[str, Any], dtype, device: str
) -> weights_cache.Cached[Any]:
    """The pretrained model, with the safetensors files it was loaded from (to ask whether it maps them)."""
    model = _pretrained_model(spec, source, folder, gguf, dtype, device)
    files = sorted(folder.glob("*.safetensors")) if folder is not None and source in ("folder", "hub") else []
    return weights_cache.Cached(model, None, files)


def _pretrained_model(spec: ModelOptions, source: str, folder: Path | None, gguf: dict[str, Any], dtype, device: str):
    from transformers import AutoModelForCausalLM

    assert folder is not None
    if source in ("folder", "hub"):
        check_weight_files(folder, spec.allow_pickle, spec.model if source == "hub" else None)
    kwargs: dict[str, Any] = dict(
        dtype=dtype,
        device_map=_device_map_arg(spec.device_map, device),
        trust_remote_code=spec.trust_remote_code,
        **gguf,
    )
    if source != "gguf":
        kwargs["use_safetensors"] = not spec.allow_pickle or any(folder.glob("*.safetensors"))
    if spec.device_map is not None:
        # accelerate needs somewhere to put disk-offloaded weights; the check after loading then reports them.
        kwargs["offload_folder"] = folder_ = tempfile.mkdtemp(prefix="llmbench-offload-")
        atexit.register(shutil.rmtree, folder_, True)  # offloaded weights can be GBs: never leave them
    try:
        return AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except Exception as e:  # a corrupt safetensors/GGUF file surfaces as its library's own error type
        raise UserError(f"cannot load the weights of {spec.model}: {_first_line(e)}") from None


def _checked_offload(model, device: str, allowed: bool, warnings: list[str]) -> Offload:
    """Where the weights are; UserError when any are off the computing device and that was not allowed."""
    off = find_offload(model, device)
    if off.disk or off.cpu or off.meta:
        if not allowed:
            raise UserError(
                offload_message(off) + ": every token would wait on the copy; free memory or pass "
                "--allow-offload to measure it anyway (recorded in the JSON)"
            )
        warnings.append("OFFLOADED: " + offload_message(off))
    return off


def mixture_of_experts(config) -> str:
    """'N experts, K per token' for a mixture-of-experts config (transformers' field names), else ''."""
    experts = next((getattr(config, k, None) for k in ("num_local_experts", "num_experts", "n_routed_experts")
                    if isinstance(getattr(config, k, None), int)), None)  # fmt: skip
    per_token = getattr(config, "num_experts_per_tok", None)
    return f"{experts} experts, {per_token} per token" if experts and experts > 1 else ""


def decode_weight_bytes(model) -> int:
    """Bytes of weights one decode step reads: every parameter once (tied embeddings are one tensor), except
    an untied input embedding, of which a step gathers a single row. Int8-quantized linears count their int8
    weights and scales (held outside ``parameters()``)."""
    seen: set[int] = set()
    total = 0
    for p in model.parameters():
        if id(p) not in seen:
            seen.add(id(p))
            total += p.numel() * p.element_size()
    emb = model.get_input_embeddings()
    out = model.get_output_embeddings()
    out_weight = getattr(out, "weight", None)
    if emb is not None and (out is None or out_weight is not emb.weight):
        total -= emb.weight.numel() * emb.weight.element_size()
    return total + quantized_weight_bytes(model)


def set_attention(model, attn: str) -> None:
    """Switch the attention kernel of a loaded model (transformers' ``set_attn_implementation``)."""
    try:
        model.set_attn_implementation(attn)
    except (ValueError, ImportError) as e:  # a kernel this model or machine lacks (flash-attn not installed...)
        raise UserError(f"--attn {attn}: {_first_line(e)}") from None


def _device_map_arg(device_map: str | None, device: str) -> Any:
    if device_map is None:
        return device  # load straight onto the device: no accelerate placement, nothing can be offloaded
    text = device_map.strip()
    if text.startswith("{"):
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError as e:
            raise UserError(f"--device-map is not valid JSON: {e.msg}") from None
        if not isinstance(parsed, dict):
            raise UserError("--device-map JSON must be an object of module -> device")
        return parsed
    if text in ("auto", "balanced", "balanced_low_0", "sequential"):
        return text
    raise UserError(f"unknown --device-map '{device_map}'; expected auto, balanced, sequential or a JSON object")


def _random_weights(config, dtype: torch.dtype, device: str, warnings: list[str]) -> weights_cache.Cached[Any]:
    """:func:`_random_model`'s weights. On the CPU through the weights cache: built (and checked) once per machine,
    then memory-mapped from its safetensors file, bit for bit the same. Elsewhere built on the device as before:
    a GPU's generator draws other numbers than the CPU's, and mapped pages would be copied to the card anyway. A
    remote-code config is built as before too (loading it back would run its code from the cache folder)."""
    if device != "cpu" or getattr(config, "auto_map", None):
        return weights_cache.Cached(_random_model(config, dtype, device))
    return weights_cache.random_model(config, dtype, RANDOM_SEED, lambda: _random_model(config, dtype, "cpu"), warnings)


def _random_model(config, dtype: torch.dtype, device: str):
    """The architecture of ``config`` with transformers' own initialisation (normal, std=initializer_range).

    Seeded, so every run gets the same weights. Every tensor is checked finite and free of subnormal
    values: uninitialised memory or denormals would change CPU speed and make the timings lie.
    """
    from transformers import AutoModelForCausalLM

    torch.manual_seed(RANDOM_SEED)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    std = float(getattr(config, "initializer_range", 0.02) or 0.02)
    tiny = torch.finfo(dtype).tiny
    with torch.no_grad():
        for p in model.parameters():
            bad = ~torch.isfinite(p) | ((p != 0) & (p.abs() < tiny))
            if bool(bad.any()):
                p.normal_(0.0, std)
    return model


def _prepare_generation(model, tokenizer) -> None:
    """Make generate() quiet and deterministic: a pad id, and no sampling unless asked per call."""
    gc = model.generation_config
    if gc.pad_token_id is None:
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        gc.pad_token_id = pad
    if gc.eos_token_id is None and tokenizer.eos_token_id is not None:
        gc.eos_token_id = tokenizer.eos_token_id


def _require_gguf() -> None:
    from llmbench.core.errors import require

    require("loading a .gguf file", "gguf", "gguf")


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:240]
