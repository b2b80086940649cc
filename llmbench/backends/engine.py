"""An engine other than transformers (llama.cpp, OpenVINO GenAI, ONNX Runtime GenAI) in this process, fed the
token ids the model's Hugging Face tokenizer makes, each token stamped when the engine hands its id over.

It runs on the process's generation thread (as the in-process backend does), so the event loop stays free. By
default the CLI and the API run it inside a worker process (``llmbench worker --engine ...``): an engine that
crashes its process then ends as a recorded failure, not a lost run.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from llmbench.backends import Request
from llmbench.core.errors import UserError
from llmbench.core.process import Stop, cold_clock, freeze_now
from llmbench.core.speculative import NO_SHARED_PREFIX, parse_prefix_cache, parse_speculative
from llmbench.engines.base import EngineModel
from llmbench.engines.chat import common_prefix_len, encode_ids, fit_context, messages_for, text_offsets
from llmbench.engines.hf.generation import generation_thread
from llmbench.machine import envinfo
from llmbench.machine import probe as machine
from llmbench.machine.telemetry import process_cpu_ms
from llmbench.options import ModelOptions, RunOptions
from llmbench.results.metrics import bundle_stamps, first_difference, ids_sha256, request_result
from llmbench.results.schema import Probe, RequestResult, Run, RunConfig, new_run_record
from llmbench.workloads.prompts import PromptSet

# The engine's own TPOT and llmbench's are two stopwatches of the same steps; beyond this they disagree and the
# run says so. llama.cpp's own excludes sampling and its Python loop, OpenVINO's includes its streamer call.
TPOT_TOLERANCE_PCT = 5.0


class EngineBackend:
    """Loads ``spec`` on its engine (or takes one loaded) and measures requests on it."""

    cancel_on_stop = False  # the token in flight finishes

    def __init__(
        self,
        spec: ModelOptions,
        options: RunOptions,
        *,
        loaded: EngineModel | None = None,
        label: str = "",
        on_status: Any = None,
    ) -> None:
        options.check()
        from llmbench.engines import check_run_options

        check_run_options(spec.engine, options)
        self.spec, self.options, self.loaded, self.label = spec, options, loaded, label
        self.on_status = on_status
        self.thread = generation_thread()
        self._ids: dict[str, list[int]] = {}
        self.mismatched = 0
        self.speculative = parse_speculative(options.speculative)
        self.prefix_cache = parse_prefix_cache(options.prefix_cache) != "none"
        self._plain: dict[str, list[int]] = {}  # the lossless check's plain output, per input ids and length

    # -- lifecycle ------------------------------------------------------------------------------------------

    @property
    def em(self) -> EngineModel:
        if self.loaded is None:
            raise RuntimeError("the backend is not started")
        return self.loaded

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        o, s = self.options, self.spec
        return {"model": s.model, "weights": s.weights, "device": "cpu", "max_new_tokens": o.max_new_tokens,
                "ignore_eos": o.ignore_eos, "repeats": o.repeats, "prompt_sha256": prompts.sha256,
                "system_prompt": o.system_prompt, "truncate": o.truncate}  # fmt: skip

    def load_now(self) -> None:
        """Load the engine's model (converting it first when needed), on the calling thread."""
        if self.loaded is None:
            from llmbench.engines.base import load

            self.loaded = load(self.spec, self.on_status)
            freeze_now()

    async def start(self, prompts: PromptSet) -> None:
        await asyncio.wrap_future(self.thread.submit(self.start_now, prompts))

    def start_now(self, prompts: PromptSet) -> None:
        """Load, then check every prompt: it fits the context, and the engine reads its ids as the tokenizer
        wrote them (the same vocabulary)."""
        self.load_now()
        self.check_prompts(prompts)
        if self.em.load.startup_s is None:  # a worker counts its own (up to its ready message)
            self.em.load.startup_s = cold_clock(ready=True)  # the process's start to ready: the cold start

    async def counting(self, what: str = "") -> tuple[Callable[[str], int], Any]:
        """How this run counts a prompt's tokens, and its tokenizer (loads the model first)."""
        await asyncio.wrap_future(self.thread.submit(self.load_now))
        return self.count_prompt_tokens, self.em.tokenizer

    def count_prompt_tokens(self, prompt: str) -> int:
        return len(self._encode(prompt))

    @property
    def uses_template(self) -> bool:
        return self.options.chat_template and bool(getattr(self.em.tokenizer, "chat_template", None))

    def _encode(self, prompt: str, history: Sequence[dict[str, str]] = ()) -> list[int]:
        messages = messages_for(prompt, self.options.system_prompt, history)
        return encode_ids(self.em.tokenizer, messages, self.uses_template)

    def _fit(self, n: int, where: str) -> int:
        return fit_context(n, self.em.max_positions, self.options.max_new_tokens, self.options.truncate, where)

    def check_prompts(self, prompts: PromptSet) -> None:
        """Every prompt's ids, made once: they fit, they are in the engine's vocabulary, and the engine decodes
        them to the tokenizer's text. UserError otherwise, before anything is measured."""
        runner, tok = self.em.runner, self.em.tokenizer
        vocab = runner.vocab_size()
        longest = 0
        for i, prompt in enumerate(prompts.prompts):
            ids = self._encode(prompt)
            ids = ids[self._fit(len(ids), prompts.where(i)) :]
            longest = max(longest, len(ids))
            if max(ids) >= vocab:
                raise UserError(
                    f"{prompts.where(i)}: token id {max(ids)} is beyond {self.em.engine}'s vocabulary of {vocab}: the "
                    f"engine's model has another vocabulary than {self.em.name}'s tokenizer"
                )
            theirs = runner.detokenize(ids)
            ours = tok.decode(ids, skip_special_tokens=True, clean_up_tokenization_spaces=False)
            if theirs.strip() != ours.strip():
                pairs = zip(theirs, ours, strict=False)
                at = next((k for k, (a, b) in enumerate(pairs) if a != b), min(len(theirs), len(ours)))
                raise UserError(
                    f"{prompts.where(i)}: {self.em.engine} decodes the tokenizer's ids to other text (from character "
                    f"{at}: {theirs[at : at + 20]!r} vs {ours[at : at + 20]!r}): its vocabulary differs from "
                    f"{self.em.name}'s tokenizer, so the engines would not get the same input"
                )
        reserve = getattr(runner, "reserve", None)
        if reserve is not None:
            reserve(longest + self.options.max_new_tokens)
        prefix = None
        if self.prefix_cache:
            heads = [self._encode(p) for p in prompts.prompts]
            prefix = heads[0][: common_prefix_len(heads)]
            if not prefix:
                raise UserError(NO_SHARED_PREFIX)
        set_levers = getattr(runner, "set_levers", None)
        if set_levers is not None:  # always: a runner shared with an earlier backend must not keep its levers
            set_levers(self.speculative, prefix)

    def new_run(self, prompts: PromptSet) -> Run:
        o, em = self.options, self.em
        config = RunConfig(
            model=em.name,
            model_source=em.source,
            weights=em.weights,
            device="cpu",
            dtype=em.dtype,
            dtype_reason=f"{em.engine}: {em.runner.precision().get('format')} weights",
            threads=em.threads,
            chat_template=self.uses_template,
            **o.config_fields(prompts),
            truncate=o.truncate,
            engine=em.engine,
            precision=em.runner.precision(),
            engine_settings=em.runner.facts(),
            auto=list(em.auto),
        )
        env = envinfo.collect("cpu")
        env.engine = em.version
        run = new_run_record(config, env, load=em.load.model_copy(deep=True), warnings=list(em.warnings))
        from llmbench.results.schema import ENGINE_METRIC_FORMULAS

        run.metrics = dict(ENGINE_METRIC_FORMULAS)
        return run

    async def activate(self) -> None:
        pass  # the engine's threads are fixed when it loads

    async def measure(self, request: Request, stop: Stop, started_s: float) -> RequestResult | None:
        return await asyncio.wrap_future(self.thread.submit(self.measure_now, request, stop, started_s))

    def measure_now(self, request: Request, stop: Stop | None = None, started_s: float = 0.0) -> RequestResult | None:
        """One prompt on this thread; None when ``stop`` cut it short. The clock starts before templating and
        tokenizing; each stamp is one clock read and two appends, in the engine's own per-token callback."""
        if request.batch:
            raise UserError(f"--engine {self.em.engine}: batched requests are transformers' (generate() of B prompts)")
        em, o = self.em, self.options
        eos = None if o.ignore_eos else self._eos()
        gc.collect()  # the previous request's garbage goes now, not inside this one's timing
        stamps: list[int] = []
        tokens: list[int] = []
        clock = time.perf_counter_ns

        def on_token(token: int) -> bool:
            stamps.append(clock())
            tokens.append(token)
            return stop is None or not stop.requested

        cpu0 = process_cpu_ms()
        start = clock()
        ids = self._encode(request.prompt, request.messages)
        cut = self._fit(len(ids), f"prompt {request.prompt_index + 1}")
        ids = ids[cut:]
        tokenized = clock()
        levers = {"reuse_prefix": request.repeat >= 0} if self.prefix_cache else {}  # warm-ups prefill in full
        n_new = request.max_new_tokens or o.max_new_tokens
        was_enabled = gc.isenabled()
        gc.disable()  # no collection inside a timed request (see backends.inprocess)
        try:
            timers = em.runner.generate(ids, n_new, eos, on_token, **levers)
        finally:
            if was_enabled:
                gc.enable()
        if stop is not None and stop.requested:
            return None
        cpu_ms = round(process_cpu_ms() - cpu0, 3)  # before the lossless check's untimed generation
        extra = self._lever_fields(request, ids, tokens, timers, n_new, eos)
        if timers.bundles is not None:  # the tokens of one forward pass became visible together
            firsts = [stamps[k] for k in itertools.accumulate([0, *timers.bundles[:-1]])]
            stamps = bundle_stamps(firsts, timers.bundles)
        decode = em.tokenizer.decode
        extra.setdefault("text_offsets", text_offsets(lambda x: decode(x, skip_special_tokens=True), tokens))
        return request_result(
            prompt_index=request.prompt_index, repeat=request.repeat, start_ns=start, tokenized_ns=tokenized,
            stamps_ns=stamps, prompt_tokens=len(ids), output_sha256=ids_sha256(tokens),
            output_text=em.tokenizer.decode(tokens, skip_special_tokens=True), started_s=started_s,
            truncated_tokens=cut, prompt_token_ids_sha256=ids_sha256(ids), engine_ttft_ms=timers.ttft_ms,
            engine_tpot_ms=timers.tpot_ms, engine_prompt_tokens_evaluated=timers.prompt_tokens_evaluated,
            cpu_ms=cpu_ms, **extra,
        )  # fmt: skip

    def _lever_fields(self, request: Request, ids: list[int], tokens: list[int], timers: Any, n_new: int,
                      eos: frozenset[int] | None) -> dict[str, Any]:  # fmt: skip
        """A speculative or prefix-cached request's own fields, and the lossless check (after its timing)."""
        out: dict[str, Any] = {}
        if timers.bundles is not None:
            out.update(forwards=len(timers.bundles), drafted_tokens=timers.drafted, accepted_tokens=timers.accepted,
                       draft_ms=timers.draft_ms)  # fmt: skip
        if timers.cold is not None and request.repeat >= 0:
            out.update(cold=timers.cold, cached_tokens=timers.cached_tokens,
                       prompt_tokens_computed=len(ids) - (timers.cached_tokens or 0))  # fmt: skip
        if request.repeat >= 0 and (self.speculative is not None or self.prefix_cache):
            key = f"{ids_sha256(ids)}:{n_new}"  # a one-token request (ab's TTFT-only pairs) is its own
            if key not in self._plain:
                plain: list[int] = []

                def keep(token: int) -> bool:
                    plain.append(token)
                    return True

                self.em.runner.generate(ids, n_new, eos, keep, plain=True)  # type: ignore[call-arg]
                self._plain[key] = plain
            diff = first_difference(tokens, self._plain[key])
            out.update(lossless=diff is None, first_difference=diff)
        return out

    def _eos(self) -> frozenset[int]:
        ids: set[int] = set()
        for v in (getattr(self.em.hf_config, "eos_token_id", None), self.em.tokenizer.eos_token_id):
            ids.update(v if isinstance(v, list) else [] if v is None else [v])
        return frozenset(ids)

    def probe_key(self) -> Hashable:
        return ("torch", "cpu", self.em.threads)

    async def probe(self) -> Probe:
        return await asyncio.wrap_future(self.thread.submit(machine.probe, self.em.threads, "cpu"))

    def finish(self, run: Run) -> list[str]:
        return engine_warnings(run)

    def warnings(self) -> list[str]:
        return []

    async def close(self) -> None:
        pass


def engine_warnings(run: Run) -> list[str]:
    """What an engine run must say: requests that evaluated fewer prompt tokens than their prompt (a prefix
    reused from an earlier request), and llmbench's stopwatch disagreeing with the engine's beyond tolerance."""
    out: list[str] = []
    s = run.summary
    if s is None:
        return out
    if s.prompt_reuse_requests:
        out.append(f"PREFIX REUSED: {s.prompt_reuse_requests} of {s.requests} requests evaluated fewer prompt tokens "
                   "than their prompt (engine_prompt_tokens_evaluated): their TTFT is not a full prefill")  # fmt: skip
    if s.tpot_vs_engine_pct is not None and abs(s.tpot_vs_engine_pct) > TPOT_TOLERANCE_PCT:
        out.append(f"llmbench's TPOT and {run.config.engine}'s own timer disagree by {s.tpot_vs_engine_pct:+.1f}% "
                   f"(median per request; tolerance {TPOT_TOLERANCE_PCT:g}%): see tpot_vs_engine_pct")  # fmt: skip
    return out
