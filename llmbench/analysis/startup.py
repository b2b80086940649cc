"""The cold start over processes: ``ab``'s ``load_s`` and ``ready_s`` rows, each worker process one sample.

A process loads its model once, so a run's load time is one number, and one number a side can't tell a slower
load from the machine's mood. ``ab --processes N`` starts N workers a side, pairs process k of base with process
k of head (started next to each other in time), and records each one's figures in
``config.engine_settings.processes[k]``:

    load_s   the model's load (``load.seconds``: transformers' files found, config, weights read and placed, eval;
             an engine's runner built; conversions apart, in ``load.convert_s``)
    ready_s  the worker's start to its ready message (``startup_s``: the interpreter, imports, load, checks)

With d_k = ln(head_k / base_k) over the N >= 2 pairs: change = expm1(mean d), and its 95% interval Student t
in logs, expm1(mean d +- t_{0.975,N-1} sd(d) / sqrt(N)) (base and head swap exactly). ``base``/``new``: the
arithmetic means of the seconds. ``--fail-on load_s=PCT`` gates it like any row.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from llmbench.analysis import variance

# row metric -> its key in engine_settings.processes[k]
PROCESS_METRICS = {"load_s": "load_s", "ready_s": "startup_s"}
MIN_PROCESSES = 2


def processes(run: Any) -> list[dict[str, Any]]:
    """The run's per-process records (``ab``'s workers), [] for a run of one process."""
    config = getattr(run, "config", None)
    found = ((getattr(config, "engine_settings", None) or {}).get("processes")) or []
    return [p for p in found if isinstance(p, dict)]


def _seconds(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and x > 0 else None


def process_change(base: Any, new: Any, metric: str) -> tuple[float, float, float, float, float, int] | None:
    """(base mean s, new mean s, change %, low %, high %, N) of ``metric`` over the processes both runs recorded
    it for, paired by index; None with fewer than 2 such pairs (no interval over processes)."""
    key = PROCESS_METRICS[metric]
    pairs = [(b, n) for b, n in ((_seconds(pb.get(key)), _seconds(pn.get(key)))
                                 for pb, pn in zip(processes(base), processes(new), strict=False))
             if b is not None and n is not None]  # fmt: skip
    if len(pairs) < MIN_PROCESSES:
        return None
    b, n = np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs])
    change, low, high = log_mean_change(np.log(n / b))
    return float(b.mean()), float(n.mean()), change, low, high, len(pairs)


def log_mean_change(d: np.ndarray) -> tuple[float, float, float]:
    """(change %, low %, high %) of the processes' log ratios ``d``: expm1(mean d), Student t in logs (compare shows
    it from :data:`variance.MIN_N` ["cold_start"] processes: benchmarks/README.md, "Interval coverage")."""
    point = float(d.mean())
    low, high = variance.t_interval(point, d) if np.ptp(d) > 0 else (point, point)
    return 100 * math.expm1(point), 100 * math.expm1(low), 100 * math.expm1(high)
