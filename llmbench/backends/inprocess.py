"""A transformers model in this process: every token stamped the moment generate() hands it over.

Everything torch does here runs on the process's generation thread
(:func:`llmbench.engines.hf.generation.generation_thread`):
loading, thread-count switches, the calibration probe and generate() itself, so there is one OpenMP team
and the event loop stays free.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import gc
import time
from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch

from llmbench.backends import Request
from llmbench.core.errors import UserError
from llmbench.core.process import Stop, cold_clock, freeze_now
from llmbench.core.speculative import parse_prefix_cache, parse_speculative
from llmbench.engines.chat import common_prefix_len, fit_context, messages_for, text_offsets
from llmbench.engines.hf import models
from llmbench.engines.hf.generation import (
    StopCriterion,
    TokenStamper,
    compiled_graphs,
    encode_messages,
    generate_kwargs,
    generation_thread,
    recompile_warning,
)
from llmbench.engines.hf.levers import (
    DraftCounter,
    PrefixCache,
    draft_record,
    load_draft,
    speculative_kwargs,
)
from llmbench.engines.hf.models import LoadedModel
from llmbench.machine import envinfo
from llmbench.machine import probe as machine
from llmbench.machine.telemetry import process_cpu_ms
from llmbench.options import ModelOptions, RunOptions
from llmbench.results.metrics import bundle_stamps, first_difference, ids_sha256, request_result
from llmbench.results.schema import Probe, RequestResult, Run, RunConfig, new_run_record
from llmbench.workloads.prompts import PromptSet


@dataclasses.dataclass
class RawStamps:
    """One request's raw clock readings (``perf_counter_ns``), kept for checking the stopwatch."""

    start_ns: int
    tokenized_ns: int
    stamps_ns: list[int]


class InProcessBackend:
    """Loads ``spec`` (or takes a model already loaded) and measures requests on it.

    ``threads`` and ``attn`` set when several backends share one model (a sweep) are applied by
    :meth:`activate` before each of this backend's turns.
    """

    cancel_on_stop = False  # a forward pass can't be cut: the first stop ends the run after the token in flight

    def __init__(
        self,
        spec: ModelOptions | None,
        options: RunOptions,
        *,
        loaded: LoadedModel | None = None,
        label: str = "",
        keep_raw: bool = False,
        batch: int = 1,
    ) -> None:
        options.check()
        if spec is None and loaded is None:
            raise ValueError("InProcessBackend needs a ModelOptions or a loaded model")
        if batch < 1:
            raise UserError(f"a batch of {batch}: must be at least 1")
        self.batch = batch  # > 1: every request generates this many sequences in one generate() call
        self.spec = spec
        self.options = options
        self.loaded = loaded
        self.label = label
        self.keep_raw = keep_raw
        self.raw: dict[tuple[int, int], RawStamps] = {}
        self.max_cache_len: int | None = None  # static cache size: longest prompt + max_new_tokens (check_prompts)
        self.graphs_in_requests = 0  # graphs torch.compile built inside this backend's measured requests
        self.thread = generation_thread()
        self.speculative = parse_speculative(options.speculative)
        self.prefix: PrefixCache | None = None  # --prefix-cache system: made by check_prompts
        self.draft: LoadedModel | None = None  # --speculative draft:MODEL
        self._plain: dict[str, list[int]] = {}  # the lossless check's plain output, per input ids and length
        if batch > 1 and options.lever is not None:
            raise UserError("--speculative and --prefix-cache generate one sequence a request, not a batch")

    # -- lifecycle ------------------------------------------------------------------------------------------

    def early_config(self, prompts: PromptSet) -> dict[str, Any]:
        o, s = self.options, self.spec
        model, weights, device = (
            (s.model, s.weights, models.validate(s)) if s else (self.lm.name, self.lm.weights, self.lm.device)
        )
        return {
            "model": model,
            "weights": weights,
            "device": device,
            "max_new_tokens": o.max_new_tokens,
            "ignore_eos": o.ignore_eos,
            "repeats": o.repeats,
            "prompt_sha256": prompts.sha256,
            "system_prompt": o.system_prompt,
            "truncate": o.truncate,
        }

    async def start(self, prompts: PromptSet) -> None:
        """Load (on the generation thread), check every prompt fits the context, compile when asked."""
        await asyncio.wrap_future(self.thread.submit(self.start_now, prompts))

    def start_now(self, prompts: PromptSet) -> None:
        """:meth:`start`, on the calling thread (which must be the generation thread)."""
        self._load()
        self.apply_setup()
        self.check_prompts(prompts)
        self.compile_now(prompts)
        if self.lm.load.startup_s is None:  # a worker counts its own (up to its ready message)
            self.lm.load.startup_s = cold_clock(ready=True)  # the process's start to ready: the cold start

    def _load(self) -> None:
        if self.loaded is None:
            assert self.spec is not None
            self.loaded = models.load_model(self.spec)
            freeze_now()  # inside llmbench.frozen_gc(): the model's objects leave the collector's sight
        if self.speculative is not None and self.speculative.method == "draft" and self.draft is None:
            self.draft = load_draft(self.speculative, self.lm, self.spec)
            freeze_now()

    async def counting(self, what: str = "") -> tuple[Callable[[str], int], Any]:
        """How this run counts a prompt's tokens, and its tokenizer (loads the model first)."""
        await asyncio.wrap_future(self.thread.submit(self._load))
        return self.count_prompt_tokens, self.lm.tokenizer

    def count_prompt_tokens(self, prompt: str) -> int:
        """The ``prompt_tokens`` a request of ``prompt`` will have (template and system prompt included)."""
        return int(self._encode(prompt)["input_ids"].shape[-1])

    @property
    def gpu_device(self) -> str | None:
        """The CUDA device this backend generates on (the loop reads that card), or None."""
        return self.loaded.device if self.loaded is not None and self.loaded.device.startswith("cuda") else None

    def torch_memory_peaks(self) -> dict[str, int | None]:
        """torch's peak CUDA memory since the model loaded (allocated by tensors, reserved by its caching
        allocator): the loop puts them in ``machine.gpu``. Empty off CUDA."""
        device = self.gpu_device
        if device is None:
            return {}
        import torch

        return {"allocated": int(torch.cuda.max_memory_allocated(device)),
                "reserved": int(torch.cuda.max_memory_reserved(device))}  # fmt: skip

    @property
    def lm(self) -> LoadedModel:
        if self.loaded is None:
            raise RuntimeError("the backend is not started")
        return self.loaded

    def new_run(self, prompts: PromptSet) -> Run:
        """The run record before any request: config, environment and load facts."""
        o, lm = self.options, self.lm
        config = RunConfig(
            model=lm.name,
            model_source=lm.source,
            weights=lm.weights,
            device=lm.device,
            dtype=lm.dtype,
            dtype_reason=lm.dtype_reason,
            threads=lm.threads,
            chat_template=self.uses_template,
            **o.config_fields(prompts),
            device_map=self.spec.device_map if self.spec else None,  # JSON text (the API's dict too)
            truncate=o.truncate,
            attn_implementation=getattr(lm.model.config, "_attn_implementation", None),
            cache_implementation=o.cache,
            compile=o.compile,
            quantization=lm.quantization,
            auto=models.automatic_choices(self.spec) if self.spec else list(lm.auto),
        )
        load = lm.load
        if self.draft is not None:
            load = lm.load.model_copy(update={"draft": draft_record(self.draft)})
        return new_run_record(config, envinfo.collect(lm.device), load=load, warnings=list(lm.warnings))

    async def activate(self) -> None:
        """This backend's threads and attention kernel, before its turn (models shared by a sweep)."""
        await asyncio.wrap_future(self.thread.submit(self.apply_setup))

    def apply_setup(self) -> None:
        """On the generation thread: set this backend's thread count and attention kernel, and wake the thread
        team. After a switch of torch's thread count the first request paid for resizing OpenMP's team (TTFT
        +3.4% [+1.2, +5.7] here, benchmarks/side_costs.py threads); one small parallel product pays it now."""
        if torch.get_num_threads() != self.lm.threads:
            torch.set_num_threads(self.lm.threads)
            a = torch.ones(256, 256)
            torch.mm(a, a)
        if self.spec is not None and self.spec.attn is not None:
            models.set_attention(self.lm.model, self.spec.attn)

    async def measure(
        self, request: Request, stop: Stop, started_s: float
    ) -> RequestResult | list[RequestResult] | None:
        return await asyncio.wrap_future(self.thread.submit(self.measure_now, request, stop, started_s))

    def probe_key(self) -> Hashable:
        return ("torch", self.lm.device, self.lm.threads)

    async def probe(self) -> Probe:
        return await asyncio.wrap_future(self.thread.submit(machine.probe, self.lm.threads, self.lm.device))

    def finish(self, run: Run) -> list[str]:
        return self.warnings()

    def warnings(self) -> list[str]:
        """What this backend saw while measuring: graphs torch.compile compiled inside timed requests."""
        return [recompile_warning(self.graphs_in_requests)] if self.graphs_in_requests else []

    async def close(self) -> None:
        pass  # the model is freed with the backend; the generation thread is the process's

    # -- one request, on the generation thread --------------------------------------------------------------

    @property
    def uses_template(self) -> bool:
        return self.options.chat_template and bool(getattr(self.lm.tokenizer, "chat_template", None))

    def _encode(self, prompt: str, history: Sequence[dict[str, str]] = ()):
        messages = messages_for(prompt, self.options.system_prompt, history)
        return encode_messages(self.lm.tokenizer, messages, self.uses_template)

    def _generate_kwargs(self) -> dict[str, Any]:
        o = self.options
        return generate_kwargs(
            o.max_new_tokens,
            ignore_eos=o.ignore_eos,
            sample=o.sample,
            temperature=o.temperature,
            top_p=o.top_p,
            cache=o.cache,
            compile=o.compile,
            max_cache_len=self.max_cache_len,
        )

    def measure_now(
        self, request: Request, stop: Stop | None = None, started_s: float = 0.0
    ) -> RequestResult | list[RequestResult] | None:
        """Send one prompt on this thread; its stamped result. The clock starts before templating and
        tokenizing. None when ``stop`` was raised mid-request (a partial request is not a measurement). With
        ``batch`` > 1 the request's prompts (or its prompt, repeated) generate together: one result each.

        Graphs torch.compile builds inside a measured request are counted for this backend alone (the
        counter is process-wide: a sweep's other setups compile too, and must not be blamed here)."""
        graphs = compiled_graphs()
        try:
            return self._measure_one(request, stop, started_s)
        finally:
            if request.repeat >= 0:
                self.graphs_in_requests += compiled_graphs() - graphs

    def _measure_one(
        self, request: Request, stop: Stop | None, started_s: float
    ) -> RequestResult | list[RequestResult] | None:
        if self.batch > 1:
            return self._measure_batch(request, stop, started_s)
        model, device, o = self.lm.model, self.lm.device, self.options
        kw = self._generate_kwargs()
        if request.max_new_tokens is not None:  # a dataset's own output length (EOS is ignored then)
            kw["max_new_tokens"] = request.max_new_tokens
        if stop is not None:
            kw["stopping_criteria"] = [StopCriterion(lambda: stop.requested)]
        if o.sample:
            torch.manual_seed(o.request_seed(request.prompt_index, request.repeat))  # same draw when resumed
        if self.speculative is not None:
            kw.update(speculative_kwargs(self.speculative, self.draft.model if self.draft else None))
        gc.collect()  # garbage of the previous request is swept now, not inside this one's timing
        stamper = TokenStamper()
        counter = DraftCounter(model) if self.speculative is not None else contextlib.nullcontext(None)
        cpu0 = process_cpu_ms()

        start = time.perf_counter_ns()
        enc = self._encode(request.prompt, request.messages)
        input_ids, attention_mask = enc["input_ids"], enc.get("attention_mask")
        cut = self._fit(int(input_ids.shape[-1]), f"prompt {request.prompt_index + 1}")
        if cut:
            input_ids = input_ids[:, cut:]
            attention_mask = attention_mask[:, cut:] if attention_mask is not None else None
        input_ids = input_ids.to(device)
        attention_mask = attention_mask.to(device) if attention_mask is not None else None
        tokenized = time.perf_counter_ns()
        reuse: dict[str, Any] = {}
        cold, cached = None, 0
        if self.prefix is not None and request.repeat >= 0:  # warm-ups prefill in full: the first measured
            reuse, cold, cached = self.prefix.for_request(model, input_ids)  # request is the one that computes it
        with torch.inference_mode(), _collector_paused(), counter as counts:
            model.generate(input_ids=input_ids, attention_mask=attention_mask, streamer=stamper, **kw, **reuse)
        cpu_ms = process_cpu_ms() - cpu0

        if self.keep_raw:
            self.raw[(request.prompt_index, request.repeat)] = RawStamps(start, tokenized, stamper.times_ns)
        if stop is not None and stop.requested:
            return None
        ids = stamper.token_ids()
        extra = self._lever_fields(request, input_ids, attention_mask, ids, stamper, counts, cold, cached)
        extra.setdefault("text_offsets", text_offsets(lambda x: self.lm.tokenizer.decode(x, skip_special_tokens=True),
                                                      ids))  # fmt: skip
        return request_result(
            prompt_index=request.prompt_index,
            repeat=request.repeat,
            start_ns=start,
            tokenized_ns=tokenized,
            stamps_ns=extra.pop("stamps_ns", stamper.times_ns),
            prompt_tokens=int(input_ids.shape[-1]),
            output_sha256=ids_sha256(ids),
            output_text=self.lm.tokenizer.decode(ids, skip_special_tokens=True),
            started_s=started_s,
            truncated_tokens=cut,
            prompt_token_ids_sha256=ids_sha256(input_ids[0].tolist()),
            cpu_ms=round(cpu_ms, 3),
            **extra,
        )

    def _lever_fields(
        self,
        request: Request,
        input_ids: Any,
        mask: Any,
        ids: list[int],
        stamper: TokenStamper,
        counts: Any,
        cold: bool | None,
        cached: int,
    ) -> dict[str, Any]:
        """A speculative or prefix-cached request's own fields (after its timing): one stamp per token from one
        per bundle, forwards, drafts, the cache's share, and the lossless check against a plain generate()."""
        out: dict[str, Any] = {}
        if self.speculative is not None:
            sizes = stamper.bundle_sizes()
            out.update(stamps_ns=bundle_stamps(stamper.times_ns, sizes), forwards=len(sizes),
                       drafted_tokens=counts.drafted, accepted_tokens=counts.accepted,
                       draft_ms=round(counts.draft_s * 1000, 3))  # fmt: skip
        if self.prefix is not None and request.repeat >= 0:
            out.update(cold=cold, cached_tokens=cached, prompt_tokens_computed=int(input_ids.shape[-1]) - cached)
        if request.repeat >= 0 and not self.options.sample and (self.speculative or self.prefix):
            plain = self._plain_output(input_ids, mask, request)
            diff = first_difference(ids, plain)
            out.update(lossless=diff is None, first_difference=diff)
        return out

    def _plain_output(self, input_ids: Any, mask: Any, request: Request) -> list[int]:
        """The output ids of a plain, uncached greedy generate() of ``input_ids`` (untimed; once per input)."""
        kw = self._generate_kwargs()
        if request.max_new_tokens is not None:
            kw["max_new_tokens"] = request.max_new_tokens
        key = f"{ids_sha256(input_ids[0].tolist())}:{kw['max_new_tokens']}"  # a one-token request is its own
        if key not in self._plain:
            with torch.inference_mode():
                out = self.lm.model.generate(input_ids=input_ids, attention_mask=mask, **kw)
            self._plain[key] = out[0, input_ids.shape[-1] :].tolist()
        return self._plain[key]

    def _measure_batch(self, request: Request, stop: Stop | None, started_s: float) -> list[RequestResult] | None:
        """B prompts in one generate() call (left-padded): each step hands over B tokens at once, so every
        sequence's token is stamped at the same moment, the moment it exists. TTFT is the batch's first token."""
        texts = request.batch or (request.prompt,) * self.batch
        kw = self._generate_kwargs()
        if stop is not None:
            kw["stopping_criteria"] = [StopCriterion(lambda: stop.requested)]
        gc.collect()
        stamper = TokenStamper()
        start = time.perf_counter_ns()
        encoded = [self._encode(t)["input_ids"][0] for t in texts]
        for i, ids in enumerate(encoded):
            self._fit(len(ids), f"batch prompt {i + 1}")
        width = max(len(ids) for ids in encoded)
        pad = self.lm.model.generation_config.pad_token_id or 0
        input_ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        mask = torch.zeros((len(encoded), width), dtype=torch.long)
        for b, ids in enumerate(encoded):  # decoder-only models continue from the right: pad on the left
            input_ids[b, width - len(ids) :], mask[b, width - len(ids) :] = ids, 1
        input_ids, mask = input_ids.to(self.lm.device), mask.to(self.lm.device)
        tokenized = time.perf_counter_ns()
        with torch.inference_mode(), _collector_paused():
            self.lm.model.generate(input_ids=input_ids, attention_mask=mask, streamer=stamper, **kw)
        if stop is not None and stop.requested:
            return None
        eos = self.lm.model.generation_config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [] if eos is None else [eos])
        results = []
        for b, ids in enumerate(encoded):
            seq = stamper.sequence_ids(b)
            if not self.options.ignore_eos:  # a sequence that ended early is padded after its EOS
                seq = seq[: next((k + 1 for k, t in enumerate(seq) if t in eos_ids), len(seq))]
            results.append(request_result(
                prompt_index=b, repeat=request.repeat, start_ns=start, tokenized_ns=tokenized,
                stamps_ns=stamper.times_ns[: len(seq)], prompt_tokens=len(ids), output_sha256=ids_sha256(seq),
                output_text=self.lm.tokenizer.decode(seq, skip_special_tokens=True), started_s=started_s,
            ))  # fmt: skip
        return results

    def _room(self) -> int:
        limit = self.lm.max_positions
        return max(1, limit - self.options.max_new_tokens) if limit else 1 << 30

    def _fit(self, prompt_tokens: int, where: str) -> int:
        """How many tokens to cut from the prompt's start so it fits the context; UserError if not allowed."""
        return fit_context(prompt_tokens, self.lm.max_positions, self.options.max_new_tokens, self.options.truncate,
                           where)  # fmt: skip

    def check_prompts(self, prompts: PromptSet) -> None:
        """Tokenize every prompt once, before anything is written: a too-long prompt fails the run up front."""
        longest = 0
        for i, prompt in enumerate(prompts.prompts):
            n = int(self._encode(prompt)["input_ids"].shape[-1])
            longest = max(longest, n - self._fit(n, prompts.where(i)))
        self.max_cache_len = longest + self.options.max_new_tokens
        if parse_prefix_cache(self.options.prefix_cache) == "system" and self.prefix is None:
            heads = [self._encode(p)["input_ids"][0].tolist() for p in prompts.prompts]
            if any(self._fit(len(h), prompts.where(i)) for i, h in enumerate(heads)):
                raise UserError("--prefix-cache system with --truncate: a cut prompt loses the shared prefix")
            self.prefix = PrefixCache(common_prefix_len(heads))

    def compile_now(self, prompts: PromptSet) -> float | None:
        """With --compile: one untimed 2-token generate() that triggers torch.compile; its wall time in seconds.

        Compiling takes seconds to minutes; done here, it is reported on its own (``load.compile_s``) and
        never lands in the first request's TTFT.
        """
        if not self.options.compile:
            return None
        enc = self._encode(prompts.prompts[0])
        kw = self._generate_kwargs()
        kw.update(max_new_tokens=2, eos_token_id=None)  # the first decode step compiles; more would only run
        t = time.perf_counter()
        with torch.inference_mode():
            self.lm.model.generate(input_ids=enc["input_ids"][:, -self._room() :].to(self.lm.device), **kw)
        seconds = round(time.perf_counter() - t, 3)
        self.lm.load.compile_s = seconds
        return seconds


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """No automatic garbage collection inside a timed request (as ``timeit`` times): a full collection with a
    model loaded scans ~10^6 objects (~180 ms) and would land in some request's TPOT. The previous request's
    garbage was collected just before; the collector's state is restored after. (Without this, a model in this
    process decoded 3.5% [2.7, 4.4] slower than the same model in a worker that froze its objects.)"""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
