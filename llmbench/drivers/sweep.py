"""``llmbench sweep``: every combination of setup knobs, measured in interleaved rounds; best TTFT and TPOT apart.

TTFT (one prompt-sized forward pass: compute-bound) and TPOT (one token per step: bound by reading every
weight) answer to different knobs, so the sweep ranks them separately and never folds them into one score.
Each round runs every setup once over the whole prompt list, rotating which setup goes first, so slow drift
of the machine (heat, a neighbour's job) hits all setups alike instead of whichever ran last.
"""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from llmbench.backends import Request
from llmbench.backends.inprocess import InProcessBackend
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop, freeze_now

# the setups and their plan live in sweep_setups; re-exported, where callers look for them
from llmbench.drivers.sweep_setups import SETUP_KEYS as SETUP_KEYS
from llmbench.drivers.sweep_setups import Setup as Setup
from llmbench.drivers.sweep_setups import check_gates as check_gates
from llmbench.drivers.sweep_setups import engine_spec as engine_spec
from llmbench.drivers.sweep_setups import expand as expand
from llmbench.drivers.sweep_setups import plan as plan
from llmbench.drivers.sweep_setups import setup_options as setup_options
from llmbench.engines.hf import models
from llmbench.engines.hf.generation import generation_thread
from llmbench.engines.hf.models import LoadedModel
from llmbench.options import ModelOptions, RunOptions
from llmbench.results.schema import (
    COMPARE,
    SWEEP_VERSION,
    Run,
    differences,
    must_match,
    utc_now,
)
from llmbench.results.storage import prepare_output, save_run, write_record
from llmbench.runner.loop import NullReporter, Reporter, Track, execute, new_track
from llmbench.spec.commands import QualitySpec
from llmbench.workloads.prompts import PromptSet

# a sweep's quality check decodes each setup's greedy continuations this far at most: as far as ``llmbench quality``
# does by default (its spec's declaration)
QUALITY_TOKENS: int = QualitySpec.fields()["max_new_tokens"][1].default


@dataclass
class SweepEntry:
    """One setup's backend and run while the sweep runs."""

    setup: Setup
    backend: Any  # InProcessBackend, or a WorkerBackend running another engine
    path: Path
    track: Track | None = None

    @property
    def run(self) -> Run:
        assert self.track is not None, "the sweep has not started"
        return self.track.run


class Sweep:
    """Loads what the setups need, then measures them in interleaved rounds on the one run loop."""

    def __init__(
        self,
        setups: list[Setup],
        spec: ModelOptions,
        options: RunOptions,
        out_dir: Path,
        *,
        reporter: Reporter | None = None,
        rank_by: str = "mean",
        quality: bool = False,
        max_kld: float | None = None,
    ) -> None:
        if rank_by not in ("mean", "p50"):
            raise UserError(f"unknown --rank-by '{rank_by}'; expected mean or p50")
        if not setups:
            raise UserError("no setup to sweep: every combination was left out")
        check_gates(setups, options, None, max_kld)
        self.setups = setups
        self.spec = spec
        self.options = options
        self.out_dir = out_dir
        self.reporter = reporter or NullReporter()
        self.rank_by = rank_by  # the statistic that picks the best: mean (default) or p50 (robust to outliers)
        self.entries: list[SweepEntry] = []
        self.started_at = utc_now()
        self.quality = quality or max_kld is not None  # --max-kld needs the figures it limits
        self.max_kld = max_kld
        self.models: dict[tuple, LoadedModel] = {}

    # -- loading ------------------------------------------------------------------------------------------

    def _model_key(self, s: Setup) -> tuple:
        if not s.is_transformers:
            return (s.engine, s.precision, s.threads)
        # Uncompiled setups of one dtype share a model: threads and attention are switched before each block.
        # A compiled setup gets its own, so its traced graph (made for its threads and kernel) is never shared.
        if s.compile:
            return (s.dtype, s.quantize, s.threads, s.attn, "compiled")
        return (s.dtype, s.quantize)

    async def load(self, prompts: PromptSet) -> None:
        """Load every model the setups need (one per dtype/quantization, one per compiled setup) on the
        generation thread, check every prompt fits, compile, and reserve every output file before any request."""
        check_gates(self.setups, self.options, prompts, self.max_kld)  # the API's path: before the models load
        loaded: dict[tuple, LoadedModel] = {}
        thread = generation_thread()
        for s in self.setups:
            if not s.is_transformers:  # another engine: a worker process of its own (a crash ends only that setup)
                from llmbench.drivers.run import make_backend

                self.reporter.status(f"starting {s.label()} ...")
                worker = make_backend(engine_spec(self.spec, s), setup_options(self.options, s),
                                      label=f"{s.label()}: ", reporter=self.reporter)  # fmt: skip
                await worker.start(prompts)
                path = prepare_output(self.out_dir / f"{s.slug()}.json", overwrite=False)
                self.entries.append(SweepEntry(s, worker, path))
                continue
            key = self._model_key(s)
            if key not in loaded:
                loaded[key] = await asyncio.wrap_future(thread.submit(self._load, s, loaded))
            self.models = loaded
            base = loaded[key]
            lm = dataclasses.replace(base, threads=s.threads, load=base.load.model_copy(deep=True))
            options = setup_options(self.options, s)
            spec = self.spec.replaced(dtype=s.dtype or "auto", threads=s.threads, attn=s.attn,
                                      quantize=s.quantize)  # fmt: skip
            backend = InProcessBackend(spec, options, loaded=lm, label=f"{s.label()}: ")
            if s.compile:
                self.reporter.status(f"compiling {s.label()} ...")
            await backend.start(prompts)
            path = prepare_output(self.out_dir / f"{s.slug()}.json", overwrite=False)
            self.entries.append(SweepEntry(s, backend, path))
        sweep_json = self.out_dir / "sweep.json"
        if sweep_json.exists():
            raise UserError(f"{sweep_json} already exists; choose another -o folder")

    def _load(self, s: Setup, loaded: dict[tuple, LoadedModel]) -> LoadedModel:
        """On the generation thread: a copy of a model in memory (faster than building it again), or a load."""
        plain = (s.dtype, s.quantize)
        if plain in loaded:
            self.reporter.status(f"copying the {s.quantize or s.dtype} model for {s.label()} ...")
            src = loaded[plain]
            return dataclasses.replace(src, model=copy.deepcopy(src.model), warnings=list(src.warnings))
        self.reporter.status(f"loading {self.spec.model} as {s.label().split()[0]} ...")
        spec = self.spec.replaced(dtype=s.dtype or "auto", threads=s.threads, quantize=s.quantize,
                                  attn=None)  # fmt: skip
        lm = models.load_model(spec)
        freeze_now()
        return lm

    # -- measuring ----------------------------------------------------------------------------------------

    def plan(self, prompts: PromptSet) -> list[tuple[Track, Request]]:
        """``repeats`` rounds; each runs every setup once over the whole prompt list, and who goes first
        rotates, so drift of the machine lands on every setup alike."""
        k, plan = len(self.entries), []
        for rnd in range(self.options.repeats):
            for e in self.entries[rnd % k :] + self.entries[: rnd % k]:
                assert e.track is not None
                plan += [(e.track, Request(p, i, rnd)) for i, p in enumerate(prompts.prompts)]
        return plan

    async def run(self, prompts: PromptSet, stop: Stop | None = None) -> dict[str, Any]:
        """Warm up, then the rounds; write each run JSON and ``sweep.json``; return the sweep record. A stop:
        everything finished is saved, then :class:`RunInterrupted` is raised with the path of ``sweep.json``."""
        for e in self.entries:
            e.track = new_track(e.backend, prompts, e.path)
        path = self.out_dir / "sweep.json"
        tracks = [e.track for e in self.entries if e.track is not None]
        try:
            await execute(tracks, self.plan(prompts), prompts, warmup=self.options.warmup, stop=stop,
                          reporter=self.reporter, survive_backend_loss=True)  # fmt: skip
        except RunInterrupted as e:
            write_record(path, self.record(prompts, complete=False))
            raise RunInterrupted(e.runs, path, e.signal_name) from None
        finally:
            for entry in self.entries:
                if not entry.setup.is_transformers:
                    await entry.backend.close()  # the engines' workers: their memory is needed for the quality pass
        if self.quality:
            await self.measure_quality()
        record = self.record(prompts, complete=True)
        write_record(path, record)
        return record

    async def measure_quality(self) -> None:
        """Every setup against float32 without quantization (computed once; a setup that is it serves), on the
        text llmbench ships; written into each run JSON (``quality``)."""
        from llmbench.drivers import quality as dq
        from llmbench.engines.quality import build_reference, default_text

        thread = generation_thread()
        cached = self.models.get(("float32", None))
        if cached is not None:
            ref_lm: LoadedModel = cached
        else:
            self.reporter.status(f"loading the float32 reference of {self.spec.model} ...")
            spec = self.spec.replaced(dtype="float32", threads=self.entries[0].setup.threads, quantize=None)
            ref_lm = await asyncio.wrap_future(thread.submit(models.load_model, spec))
        self.reporter.status("measuring quality against the float32 reference ...")
        setup = {"model": self.spec.model, "dtype": "float32", "quantize": None, "attn": None, "compile": False}
        size = min(dq.DEFAULT_CHUNK, ref_lm.max_positions or dq.DEFAULT_CHUNK)
        ref = await asyncio.wrap_future(thread.submit(build_reference, ref_lm.model, ref_lm.tokenizer, default_text(),
                                                      ref_lm.device, setup, size))  # fmt: skip
        prompts = dq.default_prompts()
        for e in self.entries:
            if not e.setup.is_transformers:
                if not e.run.requests:
                    continue  # a setup whose engine failed: nothing to vouch for
                self.reporter.status(f"quality of {e.setup.label()} ...")
                spec = engine_spec(self.spec, e.setup)
                options = self.options.replaced(max_new_tokens=min(self.options.max_new_tokens, QUALITY_TOKENS))
                result = await asyncio.wrap_future(thread.submit(dq.evaluate_engine_spec, ref, ref_lm, spec, prompts,
                                                                 options))  # fmt: skip
                self._keep_quality(e, setup, ref.text_sha256, result)
                continue
            await e.backend.activate()
            # greedy continuations decode as the setup does (its cache, its compiled step)
            options = self.options.replaced(
                cache=e.setup.cache, compile=e.setup.compile,
                max_new_tokens=min(self.options.max_new_tokens, QUALITY_TOKENS))  # fmt: skip
            result = await asyncio.wrap_future(thread.submit(dq.evaluate, ref, ref_lm, e.backend.lm, prompts, options))
            self._keep_quality(e, setup, ref.text_sha256, result)

    def _keep_quality(self, e: SweepEntry, setup: dict, text_sha256: str, result: dict) -> None:
        """A setup's quality figures into its run JSON (saved again), with the --max-kld verdict."""
        e.run.quality = {"reference": setup, "text_sha256": text_sha256, **result}
        kld = result.get("kld_mean")
        if self.max_kld is not None and kld is None:
            e.run.warnings.append(f"no KL divergence (the engine exposes no logits) to hold against --max-kld "
                                  f"{self.max_kld:g}: not eligible as best")  # fmt: skip
        elif self.max_kld is not None and kld is not None and kld > self.max_kld:
            e.run.warnings.append(f"KL divergence {kld:.4g} above --max-kld {self.max_kld:g}: not eligible as best")
        save_run(e.run, e.path)

    # -- the record ---------------------------------------------------------------------------------------

    def record(self, prompts: PromptSet, complete: bool) -> dict[str, Any]:
        """What ``sweep.json`` holds: one row per setup, the best per metric and the Pareto front."""
        rows = []
        for e in self.entries:
            s, load = e.run.summary, e.run.load
            rows.append(
                {
                    **e.setup.as_dict(),
                    "label": e.setup.label(),
                    "requests": len(e.run.requests),
                    "ttft_ms_mean": s.ttft_ms.mean if s and s.ttft_ms else None,
                    "ttft_ms_p50": s.ttft_ms.p50 if s and s.ttft_ms else None,
                    "tpot_ms_mean": s.tpot_ms.mean if s and s.tpot_ms else None,
                    "tpot_ms_p50": s.tpot_ms.p50 if s and s.tpot_ms else None,
                    "tpot_efficiency": s.tpot_efficiency if s else None,
                    "tpot_bound_ms": s.tpot_bound_ms if s else None,
                    "decode_weight_bytes": load.decode_weight_bytes if load else None,
                    "load_s": load.seconds if load else None,
                    "quantize_s": load.quantize_s if load else None,
                    "compile_s": load.compile_s if load else None,
                    "convert_s": load.convert_s if load else None,
                    "precision_detail": e.run.config.precision,
                    "failed": not e.run.complete and bool(e.run.failed_requests),
                    "run_file": e.path.name,
                    "tokens_per_forward": s.tokens_per_forward if s else None,
                    "acceptance_rate": s.acceptance_rate if s else None,
                    "lossless_mismatches": s.lossless_mismatches if s else None,
                    "ttft_cold_ms": s.ttft_cold_ms.mean if s and s.ttft_cold_ms else None,
                    "ttft_warm_ms_mean": s.ttft_warm_ms.mean if s and s.ttft_warm_ms else None,
                    # a lever whose greedy output differs from the plain run's failed its quality check
                    "excluded_by_lossless": bool(s and s.lossless_mismatches),
                    **self._quality_fields(e.run.quality),
                }
            )
        # a setup whose engine failed measured part of its rounds (a crash leaves its fastest requests): never best
        eligible = [r for r in rows if not r.get("excluded_by_max_kld") and not r["excluded_by_lossless"]
                    and not r["failed"]]  # fmt: skip
        best = {m: best_of(eligible, f"{m}_{self.rank_by}") for m in ("ttft_ms", "tpot_ms")}
        return {
            "sweep_version": SWEEP_VERSION,
            "created_at": self.started_at,
            "finished_at": utc_now(),
            "complete": complete,
            "model": self.spec.model,
            "weights": self.spec.weights,
            "device": self.entries[0].run.config.device,
            "engines": sorted({e.setup.engine for e in self.entries}),
            "varied": self.varied(),
            "prompt_file": prompts.path,
            "prompt_sha256": prompts.sha256,
            "rounds": self.options.repeats,
            "rank_by": self.rank_by,
            "max_new_tokens": self.options.max_new_tokens,
            "results": rows,
            "best": {m: ({k: b[k] for k in (*SETUP_KEYS, "label")} if b else None) for m, b in best.items()},
            "best_margin": {m: self.margin(eligible, m) for m in ("ttft_ms", "tpot_ms")},
            "pareto": [r["label"] for r in pareto(eligible, self.rank_by)],
            "max_kld": self.max_kld,
            "excluded_by_max_kld": [r["label"] for r in rows if r.get("excluded_by_max_kld")],
            "excluded_by_lossless": [r["label"] for r in rows if r["excluded_by_lossless"]],
            "quality_notes": self.quality_notes(),
            "metrics": {
                "ttft_ms_mean": "mean over the setup's requests of first_token_stamp - request_start",
                "tpot_ms_mean": "mean over requests of (last - first token stamp) / (output_tokens - 1)",
                "tpot_efficiency": "tpot_bound_ms / tpot_ms_mean, tpot_bound_ms = decode_weight_bytes / "
                "mem_read_gbps of the probe on the setup's threads",
                "best": "the setup with the lowest ttft_ms_<rank_by> / tpot_ms_<rank_by>, of those that did not fail",
                "pareto": "setups no other setup beats on both ttft_ms_<rank_by> and tpot_ms_<rank_by>",
                "best_margin": "best vs runner-up: change of the runner-up's <rank_by> over the best's, with a "
                "paired bootstrap 95% interval over the same (prompt, round) requests",
                "kld_mean": "--quality: mean KL(P_float32 || P_setup) of next-token distributions on llmbench's text "
                "(see llmbench quality); top1_agreement: share of positions with the same argmax",
                "excluded_by_max_kld": "kld_mean above --max-kld (or unknown: an engine without logits): kept in the "
                "tables, not eligible for best or pareto",
                "greedy_identical_share": "--quality: share of prompts whose greedy continuation equals the float32 "
                "reference's for max_new_tokens (every engine, logits or not)",
                "excluded_by_lossless": "--speculative/--prefix-cache setups with a request whose greedy output "
                "differs from a plain uncached generate() of the same ids (lossless_mismatches): kept in the tables, "
                "not eligible for best or pareto",
                "tokens_per_forward": "all output tokens / all forward passes of the target (--speculative)",
                "acceptance_rate": "accepted / drafted tokens over the run (--speculative)",
            },
        }

    def quality_notes(self) -> list[str]:
        """What a reader of the KLD columns must know (random weights make them a smoke test)."""
        if not self.quality:
            return []
        from llmbench.drivers.quality import notes

        return notes(self.spec, same=False)

    def _quality_fields(self, quality: dict | None) -> dict[str, Any]:
        if not quality:
            return {}
        kld = quality.get("kld_mean")
        return {
            "kld_mean": kld,
            "kld_p99": quality.get("kld_p99"),
            "top1_agreement": quality.get("top1_agreement"),
            "greedy_identical_share": quality["greedy"]["identical_share"],
            "greedy_first_divergence_median": quality["greedy"]["first_divergence_median"],
            # an engine without logits can't be vouched for under a KL limit
            "excluded_by_max_kld": self.max_kld is not None and (kld is None or kld > self.max_kld),
        }

    def varied(self) -> list[str]:
        """The setup fields (compare's list, from the schema) that differ between the sweep's runs."""
        configs = [e.run.config.model_dump() for e in self.entries]
        return sorted({k for c in configs[1:] for k, _, _ in differences(configs[0], c, must_match(COMPARE))})

    def margin(self, rows: list[dict], metric: str) -> dict[str, Any] | None:
        """How far the runner-up is behind the best, with a paired 95% interval: is the best really best?"""
        from llmbench.analysis.compare import change_interval
        from llmbench.analysis.variance import too_few

        key = f"{metric}_{self.rank_by}"
        ranked = sorted((r for r in rows if r[key] is not None), key=lambda r: r[key])
        if len(ranked) < 2:
            return None
        by_label = {e.setup.label(): e.run for e in self.entries}
        a = {(r.prompt_index, r.repeat): getattr(r, metric) for r in by_label[ranked[0]["label"]].requests}
        b = {(r.prompt_index, r.repeat): getattr(r, metric) for r in by_label[ranked[1]["label"]].requests}
        keys = [k for k in a if k in b and a[k] is not None and b[k] is not None]
        if len(keys) < 2:
            return None
        change, low, high = change_interval(
            np.array([a[k] for k in keys]), np.array([b[k] for k in keys]), self.rank_by, paired=True
        )
        few = too_few(len(keys), self.rank_by)  # below it no interval holds 95%: none, and no "significant"
        return {
            "runner_up": ranked[1]["label"],
            "runner_up_slower_pct": round(change, 2),
            "ci95_low_pct": None if few else round(low, 2),
            "ci95_high_pct": None if few else round(high, 2),
            "significant": bool(few is None and low > 0),
            "too_few": few,
        }


def best_of(rows: list[dict], key: str) -> dict | None:
    """The row with the lowest ``key`` (ignoring rows without it)."""
    have = [r for r in rows if r.get(key) is not None]
    return min(have, key=lambda r: r[key]) if have else None


def pareto(rows: list[dict], stat: str = "mean") -> list[dict]:
    """Rows no other row beats on both TTFT and TPOT (lower or equal on both, lower on one)."""
    f, p = f"ttft_ms_{stat}", f"tpot_ms_{stat}"
    have = [r for r in rows if r.get(f) is not None and r.get(p) is not None]

    def beats(a: dict, b: dict) -> bool:
        return a[f] <= b[f] and a[p] <= b[p] and (a[f] < b[f] or a[p] < b[p])

    return sorted((r for r in have if not any(beats(o, r) for o in have)), key=lambda r: r[p])
