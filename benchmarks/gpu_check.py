"""The checks behind ``benchmarks/gpu_check.sh``: each reads what a step wrote, asserts what must hold, and appends
its figures to one file (``--figures``). A failed check is one line on stderr and exit 1.

    python benchmarks/gpu_check.py cuda                      # "no CUDA: ..." and exit 1 when there is none
    python benchmarks/gpu_check.py tiny-model DIR            # a 2-layer Qwen2 (random weights) saved in DIR
    python benchmarks/gpu_check.py offload-map DEVICE        # a --device-map with one layer on disk, one on CPU
    python benchmarks/gpu_check.py run FILE --device cuda --dtype bfloat16 --figures F
    python benchmarks/gpu_check.py sweep DIR --figures F
    python benchmarks/gpu_check.py endpoint FILE --figures F
    python benchmarks/gpu_check.py ab DIR --figures F

``--device cpu`` (gpu_check.sh's rehearsal, GPU_CHECK_DEVICE=cpu) checks the same files without the GPU's
claims: no card record, and the CPU's own cost instead.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class CheckFailed(Exception):
    pass


def need(cond: Any, what: str) -> None:
    if not cond:
        raise CheckFailed(what)


def figures(path: Path | None, title: str, lines: list[str]) -> None:
    text = f"## {title}\n" + "".join(f"{x}\n" for x in lines)
    print(text, end="")
    if path is not None:
        with path.open("a") as f:
            f.write(text + "\n")


def _f(x: Any, digits: int = 2) -> str:
    return "null" if x is None else f"{x:.{digits}f}" if isinstance(x, float) else str(x)


def cuda() -> list[str]:
    try:
        import torch
    except ImportError as e:
        raise CheckFailed(f"no CUDA: {sys.executable} has no torch ({e})") from None
    if not torch.cuda.is_available():
        raise CheckFailed(f"no CUDA: torch {torch.__version__} sees no CUDA device (a CPU build, or no driver)")
    p = torch.cuda.get_device_properties(0)
    return [f"torch {torch.__version__}, CUDA {torch.version.cuda}, {p.name}, {p.total_memory / 2**30:.1f} GiB, "
            f"bf16 {torch.cuda.is_bf16_supported()}"]  # fmt: skip


def tiny_model(folder: Path) -> None:
    """A 2-layer Qwen2 with random weights and the real Qwen tokenizer, as safetensors: a model the offload check
    can be pointed at (random weights are built on the device, never offloaded)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from llmbench.engines.hf.builtin import qwen_tokenizer

    torch.manual_seed(1)
    config = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=512,
                         tie_word_embeddings=True, bos_token_id=151643, eos_token_id=151645)  # fmt: skip
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    qwen_tokenizer().save_pretrained(folder)


def offload_map(device: str) -> str:
    """model.layers.0 on disk, model.layers.1 on the CPU, the rest on ``device``: both kinds of offload."""
    home = 0 if device.startswith("cuda") else "cpu"
    return json.dumps({"model.embed_tokens": home, "model.layers.0": "disk", "model.layers.1": "cpu",
                       "model.norm": home, "model.rotary_emb": home, "lm_head": home})  # fmt: skip


def _load(path: Path) -> Any:
    from llmbench.results.storage import load_run

    return load_run(path)


def run_figures(path: Path, device: str, dtype: str | None) -> list[str]:
    run = _load(path)
    c, s = run.config, run.summary
    need(run.complete, f"{path}: the run did not complete")
    need(c.device.startswith(device), f"{path}: --device auto chose {c.device}, expected {device}")
    if dtype:
        need(c.dtype == dtype, f"{path}: --dtype auto chose {c.dtype} ({c.dtype_reason}), expected {dtype}")
    need(not (run.load.offload.disk or run.load.offload.cpu), f"{path}: weights were offloaded")
    need(all(r.output_tokens > 1 for r in run.requests), f"{path}: a request gave fewer than 2 tokens")
    out = [f"config: device {c.device}, dtype {c.dtype} ({c.dtype_reason}), {len(run.requests)} requests x "
           f"{c.max_new_tokens} tokens",
           f"TTFT mean {_f(s.ttft_ms.mean)} ms, p50 {_f(s.ttft_ms.p50)}; TPOT mean {_f(s.tpot_ms.mean, 3)} ms, "
           f"p50 {_f(s.tpot_ms.p50, 3)}",
           f"roofline: TPOT >= {_f(s.tpot_bound_ms, 3)} ms at {_f(s.roofline_mem_read_gbps, 1)} GB/s, "
           f"efficiency {_f(s.tpot_efficiency, 3)}"]  # fmt: skip
    cpu = run.cpu or {}
    need(cpu.get("cpu_ms_per_output_token"), f"{path}: no CPU time per token recorded")
    out.append(f"CPU: {_f(cpu.get('cpu_ms_per_output_token'), 3)} ms per output token, {_f(cpu.get('cores_busy'))}"
               f" cores busy; energy {_f(cpu.get('energy_j'))} J ({cpu.get('energy_missing') or 'RAPL'})")  # fmt: skip
    gpu = run.machine.gpu if run.machine else None
    if not device.startswith("cuda"):
        need(gpu is None, f"{path}: a card record on a {device} run")
        return out
    need(gpu, f"{path}: a CUDA run without the card's record (machine.gpu)")
    need(gpu.get("energy_j") is not None or gpu.get("energy_missing"), f"{path}: energy neither measured nor explained")
    need(gpu.get("energy_j") is None or gpu["energy_j"] > 0, f"{path}: energy 0 J")
    samples = run.machine.gpu_samples
    need(samples and any(x.get("sm_clock_mhz") for x in samples), f"{path}: no SM clock in the GPU samples")
    need(gpu.get("torch_max_allocated_bytes"), f"{path}: torch's peak memory not recorded")
    how = gpu.get("energy_method") or gpu.get("energy_missing")
    out += [f"GPU {gpu.get('name')}: energy {_f(gpu.get('energy_j'))} J ({how}), "
            f"{_f(gpu.get('j_per_output_token'), 4)} J per output token, "
            f"{_f(gpu.get('output_tokens_per_j'))} tokens per J",
            f"power mean {_f(gpu.get('power_w_mean'))} W, max {_f(gpu.get('power_w_max'))} W; SM clock "
            f"{gpu.get('sm_clock_mhz_min')}-{gpu.get('sm_clock_mhz_max')} MHz; "
            f"clock events {gpu.get('clock_events')}; "
            f"slowdowns {gpu.get('slowdowns')}; temperature max {gpu.get('temperature_c_max')} C",
            f"memory: card max {_gb(gpu.get('memory_used_max_bytes'))}, torch max allocated "
            f"{_gb(gpu.get('torch_max_allocated_bytes'))}, reserved {_gb(gpu.get('torch_max_reserved_bytes'))}; "
            f"{len(samples)} samples; other processes {gpu.get('other_processes')}; unsupported "
            f"{sorted(gpu.get('unsupported') or {})}"]  # fmt: skip
    return out


def _gb(x: Any) -> str:
    return "null" if x is None else f"{x / 2**30:.2f} GiB"


def sweep_figures(folder: Path, device: str) -> list[str]:
    out = []
    setups = {}
    for path in sorted(folder.glob("*.json")):
        if path.name == "sweep.json":
            continue
        run = _load(path)
        c = run.config
        setups[(c.cache_implementation, c.compile)] = run.summary.tpot_ms.mean
        out.append(f"{path.stem}: cache {c.cache_implementation}, compile {c.compile}: TTFT mean "
                   f"{_f(run.summary.ttft_ms.mean)} ms, TPOT mean {_f(run.summary.tpot_ms.mean, 3)} ms")  # fmt: skip
    need(("dynamic", False) in setups, f"{folder}: no eager (dynamic cache) setup")
    if device.startswith("cuda"):
        need(("static", True) in setups, f"{folder}: no torch.compile'd setup")
        eager, compiled = setups[("dynamic", False)], setups[("static", True)]
        out.append(f"compiled vs eager TPOT: {100 * (compiled / eager - 1):+.1f}%")
    return out


def endpoint_figures(path: Path) -> list[str]:
    run = _load(path)
    need(run.complete and run.config.mode == "endpoint", f"{path}: not a complete endpoint run")
    need(not run.failed_requests, f"{path}: {len(run.failed_requests)} requests failed")
    need(all(r.output_tokens > 1 for r in run.requests), f"{path}: a request streamed fewer than 2 tokens")
    s = run.summary
    server = [r.server_ttft_ms for r in run.requests if getattr(r, "server_ttft_ms", None) is not None]
    need(server, f"{path}: the server's own stamps did not arrive (usage chunk's llmbench field)")
    return [f"{len(run.requests)} requests streamed over SSE: TTFT mean {_f(s.ttft_ms.mean)} ms (the server's own "
            f"{_f(sum(server) / len(server))} ms), TPOT mean {_f(s.tpot_ms.mean, 3)} ms"]  # fmt: skip


def ab_figures(folder: Path) -> list[str]:
    from llmbench.analysis.compare import compare_runs

    comp = compare_runs(_load(folder / "base.json"), _load(folder / "head.json"))
    need(comp.paired and comp.n_pairs > 0, f"{folder}: the ab runs are not paired")
    out = [f"{comp.n_pairs} pairs (A/A: the same worker command on both sides)"]
    for row in comp.rows:
        if row.metric in ("ttft_ms", "tpot_ms"):
            out.append(f"{row.metric} {row.stat}: {row.change_pct:+.2f}% [{row.ci_low_pct:+.2f}, "
                       f"{row.ci_high_pct:+.2f}]")  # fmt: skip
        # the gate's statistic (ab's median) only: six 95% intervals would exclude 0 by chance one A/A in four
        if row.metric in ("ttft_ms", "tpot_ms") and row.stat == "p50":
            need(row.ci_low_pct <= 0 <= row.ci_high_pct,
                 f"A/A {row.metric} {row.stat}: {row.change_pct:+.2f}% with its interval [{row.ci_low_pct:+.2f}, "
                 f"{row.ci_high_pct:+.2f}] excluding 0")  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description="gpu_check.sh's checks")
    ap.add_argument("what", choices=["cuda", "tiny-model", "offload-map", "run", "sweep", "endpoint", "ab"])
    ap.add_argument("path", nargs="?")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype")
    ap.add_argument("--figures", type=Path)
    ap.add_argument("--title")
    a = ap.parse_args()
    try:
        if a.what == "cuda":
            figures(a.figures, "device", cuda())
        elif a.what == "tiny-model":
            tiny_model(Path(a.path))
        elif a.what == "offload-map":
            print(offload_map(a.path or a.device))
        elif a.what == "run":
            figures(a.figures, a.title or f"run {a.path}", run_figures(Path(a.path), a.device, a.dtype))
        elif a.what == "sweep":
            figures(a.figures, a.title or "eager vs --compile", sweep_figures(Path(a.path), a.device))
        elif a.what == "endpoint":
            figures(a.figures, a.title or "serve -> run --endpoint", endpoint_figures(Path(a.path)))
        elif a.what == "ab":
            figures(a.figures, a.title or "ab A/A between two workers", ab_figures(Path(a.path)))
    except CheckFailed as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
