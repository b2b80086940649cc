"""``--dtype auto`` on a CPU: the same choice on every invocation on one machine.

Which dtype decodes fastest depends on the chip (bfloat16 was 2.5x faster per token than float32 on one AMD
EPYC, and no faster on an Intel Xeon with the same AVX512-BF16 flag), so a probe has a say. But the probe's
differences between dtypes are often a few percent, smaller than its own noise on a shared machine: three
identical invocations once chose float16, float32 and bfloat16. So:

1. **A fixed preference** decides unless the probe says otherwise beyond its noise: among the dtypes the CPU
   computes natively, the one with the fewest bytes (a decode step reads every weight once), bfloat16 before
   float16 (float32's range, no overflow), float32 when the CPU has neither.
2. **The probe** times, in ``ROUNDS`` interleaved rounds (each round times every candidate once, the order
   rotating, so drift lands on all alike), a decode-shaped matrix-vector product (the operation that bounds
   TPOT) and a prefill-shaped matrix product (TTFT). A candidate displaces the preferred dtype only if it is
   faster at decoding beyond noise (the upper end of the 95% bootstrap interval of its per-round time ratio
   is below ``1 - MARGIN``) and not slower at prefill beyond noise (the lower end of that interval is below
   ``1 + MARGIN``). Paired rounds cancel the machine's drift; the interval measures what is left.
3. **The decision is cached** per machine (CPU model and flags, core count, torch version, thread count) in
   the user's cache folder and reused by later runs; ``--reprobe`` (or deleting the file) measures again. A
   corrupt or unwritable cache is ignored with a warning, never fatal.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

ROUNDS = 9  # paired rounds: enough for a bootstrap interval on the ratio (~2 s for three dtypes)
MARGIN = 0.05  # a challenger must be at least 5% faster at decoding, beyond noise
PREFERENCE = ("bfloat16", "float16", "float32")  # fewest bytes first; bfloat16's range before float16's
CACHE_VERSION = 1

# (dtype -> list of per-round decode ms, dtype -> list of per-round prefill ms)
Timings = tuple[dict[str, list[float]], dict[str, list[float]]]


@dataclass
class Choice:
    """A decision of ``--dtype auto`` and why; ``warnings`` for a cache that could not be read or written."""

    dtype: str
    reason: str
    warnings: list[str] = field(default_factory=list)


def preferred(candidates: tuple[str, ...]) -> str:
    """The dtype the preference order picks among ``candidates`` (which always include float32)."""
    return next(d for d in PREFERENCE if d in candidates)


def decide(candidates: tuple[str, ...], timings: Timings) -> tuple[str, str]:
    """(dtype, reason) from interleaved timings: the preferred dtype unless another beats it beyond noise."""
    decode, prefill = timings
    base = preferred(candidates)
    best, best_ratio, notes = base, 1.0, []
    for d in candidates:
        if d == base:
            continue
        dec_mid, dec_low, dec_high = _ratio_interval(decode[d], decode[base])
        pre_mid, pre_low, _ = _ratio_interval(prefill[d], prefill[base])
        notes.append(f"{d}/{base} decode {dec_mid:.2f} [{dec_low:.2f}, {dec_high:.2f}], prefill {pre_mid:.2f}")
        if dec_high < 1 - MARGIN and pre_low < 1 + MARGIN and dec_mid < best_ratio:
            best, best_ratio = d, dec_mid
    medians = ", ".join(f"{d} {np.median(decode[d]):.1f} ms" for d in candidates)
    why = (
        f"faster than {base} beyond noise" if best != base else f"{base} preferred: no other dtype faster beyond noise"
    )
    return best, f"auto: {why} (decode-shaped matvec medians {medians}; {'; '.join(notes) or 'one candidate'})"


def _ratio_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Median per-round ratio a/b and the 95% bootstrap interval of the mean ratio (seeded: deterministic)."""
    from scipy import stats

    ratios = np.asarray(a) / np.asarray(b)
    if len(ratios) < 2 or np.ptp(ratios) == 0:
        r = float(np.median(ratios))
        return r, r, r
    ci = stats.bootstrap((ratios,), np.mean, confidence_level=0.95, method="percentile", n_resamples=2000,
                         rng=np.random.default_rng(0)).confidence_interval  # fmt: skip
    return float(np.median(ratios)), float(ci.low), float(ci.high)


def measure(candidates: tuple[str, ...], rounds: int = ROUNDS) -> Timings:
    """Per-round milliseconds of a decode-shaped product (1x1024 by 1024x65536: 128-256 MB of weights, more
    than any cache) and a prefill-shaped one (64x1024 by 1024x4096), for each dtype, in interleaved rounds on
    the calling thread's torch threads."""
    import torch
    import torch.nn.functional as F

    tensors = {}
    for name in candidates:
        dt = getattr(torch, name)
        # normal values: denormals would slow some CPUs down
        tensors[name] = (torch.full((1, 1024), 0.5, dtype=dt), torch.full((65536, 1024), 0.01, dtype=dt),
                         torch.full((64, 1024), 0.5, dtype=dt), torch.full((4096, 1024), 0.01, dtype=dt))  # fmt: skip
        F.linear(tensors[name][0], tensors[name][1])  # warm the kernel and the pages
        F.linear(tensors[name][2], tensors[name][3])
    decode: dict[str, list[float]] = {d: [] for d in candidates}
    prefill: dict[str, list[float]] = {d: [] for d in candidates}
    for r in range(rounds):
        for name in candidates[r % len(candidates) :] + candidates[: r % len(candidates)]:
            x, w, xp, wp = tensors[name]
            decode[name].append(_median_ms(F.linear, x, w))
            prefill[name].append(_median_ms(F.linear, xp, wp))
    return decode, prefill


def _median_ms(fn: Callable[..., Any], *args: Any, reps: int = 3) -> float:
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(*args)
        times.append((time.perf_counter() - t) * 1000)
    return float(np.median(times))


def machine_key(threads: int, cpu_flags: set[str], torch_version: str) -> dict[str, Any]:
    """What the decision depends on: the CPU (model, the flags that decide native dtypes and kernels, core
    count), torch's version and the thread count."""
    from llmbench.machine.envinfo import cpu_model

    relevant = sorted(f for f in cpu_flags if f.startswith(("avx", "amx", "fma", "f16c")))
    return {"cpu_model": cpu_model(), "cpu_flags": relevant, "cpu_count": os.cpu_count(), "torch": torch_version,
            "threads": threads, "machine": platform.machine()}  # fmt: skip


def cache_path() -> Path:
    """``$XDG_CACHE_HOME/llmbench/dtype-auto.json`` (Linux default ~/.cache; macOS ~/Library/Caches; Windows
    %LOCALAPPDATA%)."""
    from llmbench.core.settings import settings

    return settings().cache_root / "dtype-auto.json"


def choose(
    candidates: tuple[str, ...],
    key: dict[str, Any],
    *,
    reprobe: bool = False,
    measure_fn: Callable[[tuple[str, ...]], Timings] | None = None,
    path: Path | None = None,
) -> Choice:
    """The cached decision for ``key``, or a new one measured with ``measure_fn`` (default :func:`measure`)."""
    path = path or cache_path()
    key_id = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    warnings: list[str] = []
    entries = {} if reprobe else _read(path, warnings)
    hit = entries.get(key_id)
    if isinstance(hit, dict) and hit.get("dtype") in candidates and hit.get("key") == key:
        reason = f"{hit.get('reason', 'auto')}; cached from {hit.get('measured_at', '?')} in {path} (--reprobe)"
        return Choice(hit["dtype"], reason, warnings)
    dtype, reason = decide(candidates, (measure_fn or measure)(candidates))
    if reprobe:
        entries = _read(path, warnings)
    entries[key_id] = {"key": key, "dtype": dtype, "reason": reason,
                       "measured_at": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()) + "Z"}  # fmt: skip
    _write(path, entries, warnings)
    return Choice(dtype, reason.replace("auto: ", "auto (measured): ", 1), warnings)


def _read(path: Path, warnings: list[str]) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if (
            not isinstance(data, dict)
            or data.get("version") != CACHE_VERSION
            or not isinstance(data.get("entries"), dict)
        ):
            raise ValueError("not a dtype cache of this llmbench")
        return data["entries"]
    except (OSError, ValueError) as e:
        warnings.append(f"ignored the --dtype auto cache {path} ({e}); measured again")
        return {}


def _write(path: Path, entries: dict[str, Any], warnings: list[str]) -> None:
    from llmbench.results.storage import write_atomic

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, json.dumps({"version": CACHE_VERSION, "entries": entries}, indent=1).encode())
    except OSError as e:
        warnings.append(
            f"could not write the --dtype auto cache {path} ({e.strerror or e}): the next run measures again"
        )
