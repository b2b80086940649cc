"""``llmbench scan``: TTFT against prompt length, TPOT against context depth, throughput against batch size.

The inputs are controlled (synthetic prompts of exact token lengths, :mod:`llmbench.workloads.synthetic`), each point is
measured in interleaved rounds (every round visits every point, the order rotating, so drift lands on all),
and the curves are fitted to the shape the arithmetic predicts:

- *length*: TTFT = a + b L + c L^2 (a prompt-sized forward pass: linear work per token, plus attention's
  quadratic term), by least squares over every request, bootstrap intervals on a, b, c, and R^2;
- *depth*: TPOT after D tokens of context = t0 + k D (each step also reads a KV cache that grows with D),
  beside the roofline: (weights + D x KV bytes per token) / measured bandwidth;
- *batch*: B prompts in one generate() call: per-sequence TTFT and TPOT, aggregate decode tokens/s = B / TPOT,
  beside the roofline's step (weights once + B x KV), and the batch size where throughput stops growing.

Every point is an ordinary run JSON (``DIR/length-256.json``, ``DIR/depth-2048.json``, ``DIR/batch-4.json``);
``DIR/scan.json`` holds the grid, per-point statistics and the fits.
"""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from llmbench.backends import Request
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.options import ModelOptions, RunOptions
from llmbench.results.schema import SCAN_VERSION, utc_now
from llmbench.results.storage import prepare_output, write_record
from llmbench.runner.loop import NullReporter, Reporter, Track, execute, new_track
from llmbench.workloads.limits import MAX_TOKENS_MADE, check_planned
from llmbench.workloads.prompts import MAX_PROMPT_TOKENS, check_whole
from llmbench.workloads.synthetic import SyntheticSpec, make, synthetic_record

LENGTH_NEW_TOKENS = 2  # a length point measures TTFT: two tokens (the second gives a TPOT sample) are enough
MAX_BATCH = 65_536  # sequences in one generate() call: far beyond any that fits in memory
GROWTH = 1.10  # throughput "stops growing" at the batch size after which the next one adds less than 10%
BOOTSTRAP = 1000


@dataclass(frozen=True)
class Point:
    kind: Literal["length", "depth", "batch"]
    value: int

    @property
    def label(self) -> str:
        return f"{self.kind}-{self.value}"


def parse_values(text: str, option: str) -> list[int]:
    """``"16,64"`` -> [16, 64]; an empty text -> []; UserError naming the option for anything else."""
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    try:
        return [int(t) for t in items]
    except ValueError:
        raise UserError(f"{option} '{text}': not a whole number in the list") from None


def grid(prompt_tokens: list[int], depth: list[int], batch: list[int]) -> list[Point]:
    """The points to measure; UserError for an empty grid or a value below what can run."""
    points = ([Point("length", v) for v in prompt_tokens] + [Point("depth", v) for v in depth]
              + [Point("batch", v) for v in batch])  # fmt: skip
    if not points:
        raise UserError("scan has nothing to measure: give --prompt-tokens, --depth and/or --batch")
    for p in points:
        option = f"--{'prompt-tokens' if p.kind == 'length' else p.kind}"
        least = 1 if p.kind != "depth" else 0
        if p.value < least:
            raise UserError(f"{option} {p.value}: must be at least {least}")
        high = MAX_BATCH if p.kind == "batch" else MAX_PROMPT_TOKENS  # its prompts are made before any check
        if p.value > high:
            raise UserError(f"{option} {p.value}: more than any model {'batches' if p.kind == 'batch' else 'reads'} "
                            f"(at most {high:,})")  # fmt: skip
    if len(set(points)) != len(points):
        raise UserError("scan lists a point twice")
    return points


def check_plan(points: list[Point], rounds: int, prompts_per_point: int, batch_prompt_tokens: int,
               given: set[str]) -> None:  # fmt: skip
    """UserError, before the model loads, for counts that can't run and for options no point uses (``given``:
    the options the user gave): ``--batch-prompt-tokens`` without a batch point, ``--max-new-tokens`` with
    length points alone (they generate :data:`LENGTH_NEW_TOKENS`)."""
    if rounds < 1 or prompts_per_point < 1:
        raise UserError("--rounds and --prompts-per-point must be at least 1")
    kinds = {p.kind for p in points}
    if "batch" in kinds:
        check_whole("--batch-prompt-tokens", batch_prompt_tokens, high=MAX_PROMPT_TOKENS, what=" tokens")
    elif "batch_prompt_tokens" in given:
        raise UserError("--batch-prompt-tokens is the length of a batch point's prompts: give --batch")
    if "max_new_tokens" in given and kinds == {"length"}:
        raise UserError(f"--max-new-tokens: length points generate {LENGTH_NEW_TOKENS} tokens (they measure TTFT); "
                        "it is for --depth and --batch points")  # fmt: skip
    per_round = sum(1 if p.kind == "batch" else prompts_per_point for p in points)
    check_planned(("--rounds", rounds), ("requests a round (points x --prompts-per-point)", per_round))
    # every point's prompts are made (text held in memory) before the first is measured: their tokens, all told
    made = sum(p.value * batch_prompt_tokens if p.kind == "batch" else max(p.value, 1) * prompts_per_point
               for p in points)  # fmt: skip
    if made > MAX_TOKENS_MADE:
        raise UserError(f"the scan's points make {made:,} prompt tokens before measuring: more than llmbench "
                        f"holds (at most {MAX_TOKENS_MADE:,}); give fewer or shorter points, or fewer "
                        "--prompts-per-point")  # fmt: skip


def check_context(points: list[Point], max_positions: int | None, new_tokens: int, batch_tokens: int) -> None:
    """UserError for a point the model's context can't hold (before any request)."""
    if not max_positions:
        return
    for p in points:
        need = {"length": p.value + LENGTH_NEW_TOKENS, "depth": p.value + new_tokens,
                "batch": batch_tokens + new_tokens}[p.kind]  # fmt: skip
        if need > max_positions:
            raise UserError(f"{p.label}: {need} tokens (prompt + new) exceed the model's context of {max_positions}")


class Scan:
    """Loads the model once, makes each point's prompts, measures the points in interleaved rounds."""

    def __init__(
        self,
        points: list[Point],
        spec: ModelOptions,
        options: RunOptions,
        out_dir: Path,
        *,
        prompts_per_point: int = 3,
        batch_prompt_tokens: int = 128,
        seed: int = 0,
        reporter: Reporter | None = None,
    ) -> None:
        self.points, self.spec, self.options, self.out_dir = points, spec, options, out_dir
        self.prompts_per_point, self.batch_prompt_tokens, self.seed = prompts_per_point, batch_prompt_tokens, seed
        self.reporter = reporter or NullReporter()
        self.tracks: dict[Point, Track] = {}
        self.started_at = utc_now()
        self.lm: Any = None

    async def run_all(self, stop: Stop | None = None) -> dict[str, Any]:
        """:meth:`load`, then :meth:`run`."""
        await self.load()
        return await self.run(stop)

    async def load(self) -> None:
        """The model (once, on the generation thread), then each point's backend, prompts and output file."""
        from llmbench.backends.inprocess import InProcessBackend
        from llmbench.core.process import freeze_now
        from llmbench.engines.hf import models
        from llmbench.engines.hf.generation import generation_thread

        self.reporter.status(f"loading {self.spec.model} ...")
        engine = not self.spec.is_transformers  # another engine: in this process, one model for every point
        if engine and any(p.kind == "batch" for p in self.points):
            raise UserError(f"--engine {self.spec.engine}: batch points need transformers' batched generate(); "
                            "drop --batch (--batch '')")  # fmt: skip
        if engine:
            from llmbench.engines.base import load

            self.lm = await asyncio.wrap_future(generation_thread().submit(load, self.spec, self.reporter.status))
        else:
            self.lm = await asyncio.wrap_future(generation_thread().submit(models.load_model, self.spec))
        freeze_now()
        check_context(self.points, self.lm.max_positions, self.options.max_new_tokens, self.batch_prompt_tokens)
        for p in self.points:
            new = LENGTH_NEW_TOKENS if p.kind == "length" else self.options.max_new_tokens
            options = self.options.replaced(max_new_tokens=new, repeats=self.options.repeats)
            backend: Any
            if engine:
                from llmbench.backends.engine import EngineBackend

                backend = EngineBackend(self.spec, options, loaded=self.lm, label=f"{p.label}: ")
            else:
                backend = InProcessBackend(self.spec, options, loaded=self.lm, label=f"{p.label}: ",
                                           batch=p.value if p.kind == "batch" else 1)  # fmt: skip
            tokens = {"length": p.value, "depth": p.value, "batch": self.batch_prompt_tokens}[p.kind]
            floor = backend.count_prompt_tokens("x")
            if p.kind == "depth" and tokens < floor:
                tokens = floor  # depth 0: the shortest prompt the template allows; recorded as prompt_tokens
            count = p.value if p.kind == "batch" else self.prompts_per_point
            prompts = make(SyntheticSpec(tokens, count, self.seed), self.lm.tokenizer, backend.count_prompt_tokens)
            await backend.start(prompts)
            path = prepare_output(self.out_dir / f"{p.label}.json", overwrite=False)
            track = new_track(backend, prompts, path)
            track.prompts = prompts
            track.run.config.synthetic = synthetic_record(SyntheticSpec(tokens, count, self.seed), scan_point=p.label)
            self.tracks[p] = track

    def plan(self) -> list[tuple[Track, Request]]:
        """``rounds`` rounds; each visits every point (who goes first rotates) and measures its prompts once (a
        batch point: one request of all its prompts)."""
        plan: list[tuple[Track, Request]] = []
        order = list(self.tracks.items())
        for rnd in range(self.options.repeats):
            k = rnd % len(order)
            for p, t in order[k:] + order[:k]:
                assert t.prompts is not None
                if p.kind == "batch":
                    plan.append((t, Request(t.prompts.prompts[0], 0, rnd, batch=t.prompts.prompts)))
                else:
                    plan += [(t, Request(text, i, rnd)) for i, text in enumerate(t.prompts.prompts)]
        return plan

    async def run(self, stop: Stop | None = None) -> dict[str, Any]:
        """Warm up, measure, write the runs and ``scan.json``; the record. A stop keeps what finished."""
        path = self.out_dir / "scan.json"
        tracks = list(self.tracks.values())
        first = tracks[0].prompts
        assert first is not None
        try:
            await execute(tracks, self.plan(), first, warmup=self.options.warmup, stop=stop, reporter=self.reporter)
        except RunInterrupted as e:
            write_record(path, self.record(complete=False))
            raise RunInterrupted(e.runs, path, e.signal_name) from None
        record = self.record(complete=True)
        write_record(path, record)
        return record

    # -- the record -----------------------------------------------------------------------------------------

    def record(self, complete: bool) -> dict[str, Any]:
        """What ``scan.json`` holds (documented in README, "llmbench scan")."""
        lm = self.lm
        points = [self._point(p, t) for p, t in self.tracks.items()]
        gbps = self._bandwidth()
        engine = getattr(lm, "engine", "transformers")
        if engine == "transformers":
            kv = kv_bytes_per_token(lm.model.config, lm.dtype)
        else:  # the engine's own KV cache element
            kv = kv_bytes_per_token(lm.hf_config, kv_element(lm.runner.precision().get("kv_cache")))
        weights = lm.load.decode_weight_bytes
        return {
            "scan_version": SCAN_VERSION,
            "created_at": self.started_at,
            "finished_at": utc_now(),
            "complete": complete,
            "model": lm.name,
            "engine": engine,
            "weights": lm.weights,
            "device": lm.device,
            "dtype": lm.dtype,
            "threads": lm.threads,
            "rounds": self.options.repeats,
            "max_new_tokens": self.options.max_new_tokens,
            "prompts_per_point": self.prompts_per_point,
            "batch_prompt_tokens": self.batch_prompt_tokens,
            "seed": self.seed,
            "grid": {k: [p.value for p in self.points if p.kind == k] for k in ("length", "depth", "batch")},
            "roofline": {"decode_weight_bytes": weights, "kv_bytes_per_token": kv, "mem_read_gbps": gbps},
            "points": points,
            "fits": {
                "length": fit_length(self._samples("length", "ttft_ms")),
                "depth": fit_depth(self._samples("depth", "tpot_ms"), weights, kv, gbps),
                "batch": fit_batch(
                    [x for x in points if x["kind"] == "batch"],
                    weights,
                    kv,
                    gbps,
                    self.batch_prompt_tokens,
                    self.options.max_new_tokens,
                ),
            },
            "metrics": SCAN_FORMULAS,
        }

    def _samples(self, kind: str, metric: str) -> list[tuple[int | None, float]]:
        """(prompt_tokens, metric) of every request of the points of ``kind``."""
        return [(q.prompt_tokens, getattr(q, metric)) for p, t in self.tracks.items() if p.kind == kind
                for q in t.run.requests if getattr(q, metric) is not None]  # fmt: skip

    def _bandwidth(self) -> float | None:
        probes = [p.mem_read_gbps for t in self.tracks.values() for p in (t.probe_before, t.probe_after)
                  if p is not None]  # fmt: skip
        return max(probes) if probes else None

    def _point(self, p: Point, t: Track) -> dict[str, Any]:
        s, reqs = t.run.summary, t.run.requests
        row: dict[str, Any] = {"kind": p.kind, "value": p.value, "label": p.label, "run_file": f"{p.label}.json",
                               "requests": len(reqs)}  # fmt: skip
        if s is None:
            return row
        row.update(
            prompt_tokens=int(np.median([q.prompt_tokens for q in reqs if q.prompt_tokens is not None])),
            ttft_ms_mean=s.ttft_ms.mean if s.ttft_ms else None, ttft_ms_p50=s.ttft_ms.p50 if s.ttft_ms else None,
            tpot_ms_mean=s.tpot_ms.mean if s.tpot_ms else None, tpot_ms_p50=s.tpot_ms.p50 if s.tpot_ms else None,
        )  # fmt: skip
        if p.kind == "batch" and s.tpot_ms:
            row["aggregate_decode_tokens_per_s"] = round(p.value * 1000.0 / s.tpot_ms.mean, 3)
        return row


SCAN_FORMULAS = {
    "length fit": "ttft_ms = a + b * prompt_tokens + c * prompt_tokens^2, least squares over every request of the "
    "length points; 95% intervals: percentile bootstrap over requests; r2 = 1 - SS_res / SS_tot",
    "prefill_ms_per_1k_tokens": "1000 * b: the linear cost of 1,000 more prompt tokens",
    "quadratic_half_at_tokens": "the length at which c * L^2 is half of the fitted TTFT (null outside the range "
    "measured, or when c <= 0)",
    "depth fit": "tpot_ms = t0 + k * prompt_tokens (the context before decoding), least squares over requests",
    "ms_per_1k_context_tokens": "1000 * k",
    "kv_bytes_per_token": "2 (K and V) * layers * key/value heads * head dim * bytes per element",
    "roofline_tpot_ms": "(decode_weight_bytes + context tokens * kv_bytes_per_token) / mem_read_gbps: the "
    "fastest a step can read the weights once and the whole cache",
    "aggregate_decode_tokens_per_s": "batch * 1000 / mean per-sequence tpot_ms: tokens per second, all sequences",
    "roofline_aggregate_tokens_per_s": "batch / ((weights + batch * context * kv) / bandwidth), context = the "
    "batch prompt plus half the new tokens",
    "saturation_batch": f"the smallest batch after which the next one adds less than {GROWTH - 1:.0%} throughput",
}


def _bootstrap(x: np.ndarray, y: np.ndarray, deg: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(coefficients a, b[, c] lowest order first, their 95% intervals (2 x n), r2) of a polynomial fit."""
    coef = np.polynomial.polynomial.polyfit(x, y, deg)
    pred = np.polynomial.polynomial.polyval(x, coef)
    ss_tot = float(np.sum((y - y.mean()) ** 2))
    r2 = 1.0 - float(np.sum((y - pred) ** 2)) / ss_tot if ss_tot > 0 else float("nan")
    rng = np.random.default_rng(0)
    draws = []
    for _ in range(BOOTSTRAP):
        i = rng.integers(0, len(x), len(x))
        if len(np.unique(x[i])) > deg:
            draws.append(np.polynomial.polynomial.polyfit(x[i], y[i], deg))
    ci = np.percentile(np.array(draws), [2.5, 97.5], axis=0) if draws else np.full((2, deg + 1), np.nan)
    return coef, ci, r2


def fit_length(data: list[tuple[int | None, float]]) -> dict[str, Any] | None:
    """TTFT = a + b L + c L^2 (see SCAN_FORMULAS); None with fewer than three distinct lengths."""
    pts = [(float(x), y) for x, y in data if x is not None]
    if len({x for x, _ in pts}) < 3:
        return None
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    (a, b, c), ci, r2 = _bootstrap(x, y, 2)
    half = None
    if c > 0:  # c L^2 = (a + b L + c L^2) / 2  <=>  c L^2 - b L - a = 0
        root = (b + np.sqrt(b * b + 4 * a * c)) / (2 * c)
        half = round(float(root), 1) if x.min() <= root <= x.max() else None
    return {
        "a_ms": round(float(a), 4), "b_ms_per_token": round(float(b), 6), "c_ms_per_token2": float(c),
        "ci95": {"a_ms": _pair(ci[:, 0]), "b_ms_per_token": _pair(ci[:, 1]), "c_ms_per_token2": _pair(ci[:, 2], 12)},
        "r2": round(r2, 4), "prefill_ms_per_1k_tokens": round(1000 * float(b), 3), "quadratic_half_at_tokens": half,
        "requests": len(pts),
    }  # fmt: skip


def fit_depth(
    data: list[tuple[int | None, float]], weights: int | None, kv: int | None, gbps: float | None
) -> dict[str, Any] | None:
    """TPOT = t0 + k D, and the roofline at each depth measured; None with fewer than two distinct depths."""
    pts = [(float(x), y) for x, y in data if x is not None]
    if len({x for x, _ in pts}) < 2:
        return None
    x, y = np.array([p[0] for p in pts]), np.array([p[1] for p in pts])
    (t0, k), ci, r2 = _bootstrap(x, y, 1)
    bound = {}
    if weights and kv and gbps:
        bound = {str(int(d)): round((weights + d * kv) / (gbps * 1e9) * 1000, 3) for d in sorted(set(x))}
    return {
        "t0_ms": round(float(t0), 4), "k_ms_per_token": round(float(k), 7),
        "ci95": {"t0_ms": _pair(ci[:, 0]), "k_ms_per_token": _pair(ci[:, 1], 7)}, "r2": round(r2, 4),
        "ms_per_1k_context_tokens": round(1000 * float(k), 4), "roofline_tpot_ms": bound, "requests": len(pts),
    }  # fmt: skip


def fit_batch(
    rows: list[dict[str, Any]], weights: int | None, kv: int | None, gbps: float | None, prompt: int, new: int
) -> dict[str, Any] | None:
    """Aggregate throughput per batch size, the roofline's prediction, and where throughput stops growing."""
    rows = sorted((r for r in rows if r.get("aggregate_decode_tokens_per_s")), key=lambda r: r["value"])
    if not rows:
        return None
    table = []
    for r in rows:
        b = r["value"]
        predicted = None
        if weights and kv and gbps:
            step_s = (weights + b * (prompt + new / 2) * kv) / (gbps * 1e9)
            predicted = round(b / step_s, 2)
        table.append({"batch": b, "aggregate_decode_tokens_per_s": r["aggregate_decode_tokens_per_s"],
                      "roofline_aggregate_tokens_per_s": predicted, "tpot_ms_mean": r["tpot_ms_mean"]})  # fmt: skip
    saturation = None
    for cur, nxt in itertools.pairwise(table):
        if nxt["aggregate_decode_tokens_per_s"] < GROWTH * cur["aggregate_decode_tokens_per_s"]:
            saturation = cur["batch"]
            break
    return {"table": table, "saturation_batch": saturation}


def kv_element(kv_cache: str | None) -> str:
    """An engine's KV cache element type (f16, uint8_t, float32, ...) as kv_bytes_per_token's dtype name."""
    text = (kv_cache or "").lower()
    if text.startswith(("u8", "uint8", "i8", "int8", "q8")):
        return "int8"
    if text.startswith(("f16", "fp16", "float16", "half", "bf16", "bfloat16")):
        return "float16"
    return "float32"


def kv_bytes_per_token(config: Any, dtype: str) -> int | None:
    """2 (K, V) x layers x key/value heads x head dim x bytes per element, from a transformers config."""
    layers = getattr(config, "num_hidden_layers", None)
    heads = getattr(config, "num_key_value_heads", None) or getattr(config, "num_attention_heads", None)
    head_dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads if getattr(config, "num_attention_heads", None) else None
    )
    size = {"float32": 4, "bfloat16": 2, "float16": 2, "int8": 1}.get(dtype)
    if not (layers and heads and head_dim and size):
        return None
    return int(2 * layers * heads * head_dim * size)


def _pair(v: np.ndarray, digits: int = 6) -> list[float]:
    return [round(float(v[0]), digits), round(float(v[1]), digits)]
