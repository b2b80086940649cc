"""The measuring loop: one request at a time, every token stamped, the run JSON rewritten after each request."""

from __future__ import annotations

import gc
import signal
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

import psutil
import torch
from transformers.generation.stopping_criteria import StoppingCriteria, StoppingCriteriaList

from llmbench import envinfo, machine
from llmbench.errors import RunInterrupted, UserError
from llmbench.models import LoadedModel
from llmbench.options import RunOptions
from llmbench.prompts import PromptSet
from llmbench.results import (
    MachineState,
    RequestResult,
    Run,
    RunConfig,
    RunWriter,
    Session,
    new_run_record,
    utc_now,
)
from llmbench.stats import summarize
from llmbench.timing import TokenStamper, request_result


class _StopFlag(StoppingCriteria):
    """Set by the first SIGINT/SIGTERM; generate() checks it after every token and stops.

    A second signal raises KeyboardInterrupt at once, for a user who won't wait for the token in flight.
    """

    def __init__(self) -> None:
        self.signal: str | None = None

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full((input_ids.shape[0],), self.signal is not None, dtype=torch.bool, device=input_ids.device)

    def _handle(self, signum, _frame) -> None:
        if self.signal is not None:
            raise KeyboardInterrupt
        self.signal = signal.Signals(signum).name

    @contextmanager
    def installed(self):
        """Our handlers for SIGINT and SIGTERM while the block runs (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        old = {sig: signal.signal(sig, self._handle) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield
        finally:
            for sig, handler in old.items():
                signal.signal(sig, handler)


def compiled_graphs() -> int:
    """torch.compile's count of graphs compiled so far in this process (0 when dynamo never ran)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def recompile_warning(graphs: int) -> str:
    """The warning for a run whose timed requests triggered compilation."""
    return f"torch.compile compiled {graphs} graph(s) during timed requests: those requests include compile time"


ProgressFn = Callable[[RequestResult, int, int], None]

# What must be equal for --resume to continue a run: anything that changes what a request measures.
RESUME_KEYS = (
    "mode",
    "model",
    "weights",
    "device",
    "dtype",
    "threads",
    "max_new_tokens",
    "ignore_eos",
    "repeats",
    "prompt_sha256",
    "sampling",
    "chat_template",
    "system_prompt",
    "truncate",
    "attn_implementation",
    "cache_implementation",
    "compile",
    "quantization",
)


def check_resumable(run: Run, path: Path, new_config: dict) -> None:
    """UserError unless ``run`` is incomplete and its setup equals ``new_config`` (a full or partial config
    dict) on every RESUME_KEYS key it has."""
    if run.complete:
        raise UserError(f"{path} is already complete: nothing to resume")
    have = run.config.model_dump()
    diffs = [
        f"{k} {have.get(k)!r} -> {new_config[k]!r}"
        for k in RESUME_KEYS
        if k in new_config and have.get(k) != new_config[k]
    ]
    if diffs:
        raise UserError(
            f"--resume {path}: this setup differs from the run's ({'; '.join(diffs)}); resume with "
            "the same options and prompt file"
        )


def load_resumable(path: Path, new_config: dict) -> Run:
    """The run at ``path`` (its journal merged), checked with :func:`check_resumable`."""
    from llmbench.results import load_run

    run = load_run(path)
    check_resumable(run, path, new_config)
    return run


def encode_messages(tokenizer, messages: list[dict], use_template: bool):
    """Chat messages -> ``{"input_ids", "attention_mask"}`` tensors: through the chat template (with the
    assistant's turn opened) when ``use_template``, else the contents joined by blank lines."""
    if use_template:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return tokenizer(text, return_tensors="pt", add_special_tokens=False)
    return tokenizer("\n\n".join(str(m.get("content", "")) for m in messages), return_tensors="pt")


class Benchmark:
    """Sends prompts to a loaded model and records one :class:`RequestResult` per (prompt, repeat)."""

    def __init__(self, loaded: LoadedModel, options: RunOptions) -> None:
        options.validate()
        self.loaded = loaded
        self.options = options
        self.uses_template = options.chat_template and bool(getattr(loaded.tokenizer, "chat_template", None))
        self.last_raw: tuple[int, int, TokenStamper] | None = None
        self.max_cache_len: int | None = None  # static cache size: longest prompt + max_new_tokens (check_prompts)
        # Everything alive now (model, tokenizer, torch, transformers: ~10^6 objects) moves to the permanent
        # generation: a full collection then scans only new objects. Measured: gc.collect() 180 ms -> 0.01 ms,
        # so neither the per-request sweep nor an automatic collection inside a timed request scans the model.
        gc.collect()
        gc.freeze()

    # -- one request --------------------------------------------------------------------------------------

    def _encode(self, prompt: str):
        messages = []
        if self.options.system_prompt:
            messages.append({"role": "system", "content": self.options.system_prompt})
        messages.append({"role": "user", "content": prompt})
        return encode_messages(self.loaded.tokenizer, messages, self.uses_template)

    def _generate_kwargs(self) -> dict:
        o = self.options
        kw: dict = {"max_new_tokens": o.max_new_tokens, "do_sample": o.sample}
        if o.ignore_eos:
            kw["min_new_tokens"] = o.max_new_tokens  # EOS is masked until the length is reached: fixed length
        if o.sample:
            kw.update(temperature=o.temperature, top_p=o.top_p, top_k=None)
        else:
            # A model's generation_config may carry sampling defaults (Qwen's does): greedy means none of them.
            kw.update(temperature=None, top_p=None, top_k=None)
        if o.cache == "static":
            # one size for every request, so a compiled decode step is traced once, never per prompt length
            kw.update(cache_implementation="static", max_cache_len=self.max_cache_len)
            if o.compile:
                from transformers import CompileConfig

                cc = CompileConfig()
                cc._compile_all_devices = True  # transformers compiles on GPUs only unless told (CPU too here)
                kw["compile_config"] = cc
            else:
                kw["disable_compile"] = True  # on CUDA a static cache would otherwise be compiled silently
        return kw

    def compile_now(self, prompts: PromptSet) -> float | None:
        """With --compile: one untimed 2-token generate() that triggers torch.compile; its wall time in seconds.

        Compiling takes seconds to minutes; done here, it is reported on its own (``load.compile_s``) and
        never lands in the first request's TTFT.
        """
        if not self.options.compile:
            return None
        if self.max_cache_len is None:
            self.check_prompts(prompts)
        enc = self._encode(prompts.prompts[0])
        kw = self._generate_kwargs()
        kw.update(max_new_tokens=2, min_new_tokens=2)  # the first decode step compiles; more would only run
        t = time.perf_counter()
        with torch.inference_mode():
            self.loaded.model.generate(input_ids=enc["input_ids"][:, -self._room() :].to(self.loaded.device), **kw)
        seconds = round(time.perf_counter() - t, 3)
        self.loaded.load.compile_s = seconds
        return seconds

    def _room(self) -> int:
        limit = self.loaded.max_positions
        return max(1, limit - self.options.max_new_tokens) if limit else 1 << 30

    def measure(
        self, prompt: str, prompt_index: int, repeat: int, started_s: float = 0.0, stop: _StopFlag | None = None
    ) -> RequestResult | None:
        """Send one prompt; return its stamped result. The clock starts before templating and tokenizing.

        Returns None when ``stop`` was raised mid-request (the partial request is not a measurement).
        """
        model, device = self.loaded.model, self.loaded.device
        gen_kwargs = self._generate_kwargs()
        if stop is not None:
            gen_kwargs["stopping_criteria"] = StoppingCriteriaList([stop])
        if self.options.sample:
            torch.manual_seed(self.options.seed + prompt_index * 1_000_003 + repeat)  # same draw on a resumed run
        gc.collect()  # garbage of the previous request is swept now, not inside this one's timing
        stamper = TokenStamper()

        start = time.perf_counter_ns()
        enc = self._encode(prompt)
        input_ids, attention_mask = enc["input_ids"], enc.get("attention_mask")
        cut = self._fit(int(input_ids.shape[-1]), prompt_index)
        if cut:
            input_ids = input_ids[:, cut:]
            attention_mask = attention_mask[:, cut:] if attention_mask is not None else None
        input_ids = input_ids.to(device)
        attention_mask = attention_mask.to(device) if attention_mask is not None else None
        tokenized = time.perf_counter_ns()
        with torch.inference_mode():
            model.generate(input_ids=input_ids, attention_mask=attention_mask, streamer=stamper, **gen_kwargs)

        self.last_raw = (start, tokenized, stamper)  # raw clock readings, for checking the stopwatch
        if stop is not None and stop.signal is not None:
            return None
        ids = stamper.token_ids()
        text = self.loaded.tokenizer.decode(ids, skip_special_tokens=True)
        result = request_result(
            prompt_index=prompt_index,
            repeat=repeat,
            start_ns=start,
            tokenized_ns=tokenized,
            stamps_ns=stamper.times_ns,
            prompt_tokens=int(input_ids.shape[-1]),
            token_ids=ids,
            output_text=text,
            started_s=started_s,
        )
        result.truncated_tokens = cut
        return result

    def _fit(self, prompt_tokens: int, prompt_index: int, where: str | None = None) -> int:
        """How many tokens to cut from the prompt's start so it fits the context; UserError if not allowed."""
        limit = self.loaded.max_positions
        room = (limit - self.options.max_new_tokens) if limit else None
        if room is None or prompt_tokens <= room:
            return 0
        if room < 1:
            raise UserError(
                f"--max-new-tokens {self.options.max_new_tokens} leaves no room in the model's context "
                f"of {limit} tokens"
            )
        if self.options.truncate:
            return prompt_tokens - room
        raise UserError(
            f"{where or f'prompt {prompt_index + 1}'}: the prompt has {prompt_tokens} tokens; with "
            f"--max-new-tokens {self.options.max_new_tokens} that exceeds the model's context of "
            f"{limit} tokens (--truncate cuts it to fit)"
        )

    def check_prompts(self, prompts: PromptSet) -> None:
        """Tokenize every prompt once, before anything is written: a too-long prompt fails the run up front."""
        longest = 0
        for i, (prompt, line) in enumerate(zip(prompts.prompts, prompts.line_numbers, strict=True)):
            n = int(self._encode(prompt)["input_ids"].shape[-1])
            longest = max(longest, n - self._fit(n, i, where=f"{prompts.path}:{line}"))
        self.max_cache_len = longest + self.options.max_new_tokens

    # -- a whole run --------------------------------------------------------------------------------------

    def new_run(self, prompts: PromptSet) -> Run:
        """The run record before any request: config, environment and load facts."""
        o, lm = self.options, self.loaded
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
            truncate=o.truncate,
            attn_implementation=getattr(lm.model.config, "_attn_implementation", None),
            cache_implementation=o.cache,
            compile=o.compile,
            quantization=lm.quantization,
        )
        return new_run_record(
            config,
            envinfo.collect(lm.device),
            load=lm.load,
            warnings=list(lm.warnings),
        )

    def run(
        self,
        prompts: PromptSet,
        output: Path,
        *,
        resume: Run | None = None,
        on_request: ProgressFn | None = None,
        on_warmup: Callable[[int, int], None] | None = None,
    ) -> Run:
        """Warm up, then measure every (repeat, prompt) not yet in ``resume``; save after each request.

        Repeats go round the whole prompt list (not one prompt N times), so slow drift of the machine
        hits every prompt alike. SIGINT/SIGTERM stop after the current token: the partial request is
        dropped, everything finished is saved with ``complete: false``, and :class:`RunInterrupted` is
        raised. Saving goes through :class:`RunWriter` (journal + geometric snapshots: O(n) in all).
        """
        self.check_prompts(prompts)
        fresh = self.new_run(prompts)
        if resume is not None:
            check_resumable(resume, output, fresh.config.model_dump())
        run = resume if resume is not None else fresh
        session = len(run.sessions)
        run.sessions.append(Session(started_at=utc_now(), environment=fresh.environment, load=self.loaded.load))
        done = {(r.prompt_index, r.repeat) for r in run.requests}
        todo = [
            (i, rep) for rep in range(self.options.repeats) for i in range(len(prompts.prompts)) if (i, rep) not in done
        ]
        total = len(prompts.prompts) * self.options.repeats
        writer = RunWriter(output, run)
        sampler = machine.Sampler()
        stop = _StopFlag()
        dwb = self.loaded.load.decode_weight_bytes
        probe_before = None
        try:
            with stop.installed():
                self.compile_now(prompts)  # sets self.loaded.load.compile_s: run.load is that object
                n = len(prompts.prompts)
                for w in range(self.options.warmup):
                    warm = None if stop.signal else self.measure(prompts.prompts[w % n], w % n, -1 - w // n, stop=stop)
                    if warm is None:
                        break
                    run.warmup_requests.append(warm)
                    if on_warmup:
                        on_warmup(w + 1, self.options.warmup)
                probe_before = machine.probe(self.loaded.threads, self.loaded.device)
                swap0 = psutil.swap_memory()
                sampler.start()
                t0 = time.perf_counter()
                graphs0 = compiled_graphs()

                def refresh() -> None:
                    run.summary = summarize(run.requests, dwb, probe_before.mem_read_gbps)
                    run.machine = _machine_state(swap0, probe_before, sampler)

                for i, rep in todo:
                    if stop.signal:
                        break
                    result = self.measure(prompts.prompts[i], i, rep, started_s=time.perf_counter() - t0, stop=stop)
                    if result is None:
                        break
                    result.session = session
                    run.requests.append(result)
                    writer.add(run, result, summarize=refresh)
                    if on_request:
                        on_request(result, len(run.requests), total)
                sampler.stop()
                refresh()
                if compiled_graphs() != graphs0:
                    run.warnings.append(recompile_warning(compiled_graphs() - graphs0))
                if not stop.signal:
                    run.machine.probe_after = after = machine.probe(self.loaded.threads, self.loaded.device)
                    # the roofline uses the better reading: the bandwidth the machine can reach
                    run.summary = summarize(run.requests, dwb, max(probe_before.mem_read_gbps, after.mem_read_gbps))
        except KeyboardInterrupt:  # a second Ctrl-C, or one while the handlers weren't ours
            stop.signal = stop.signal or "SIGINT"
        finally:
            sampler.stop()
        if stop.signal:
            run.sessions[session].interrupted_by = stop.signal
            if probe_before is not None and run.requests:
                run.summary = summarize(run.requests, dwb, probe_before.mem_read_gbps)
            writer.close(run)
            raise RunInterrupted(run, output, stop.signal)
        run.complete = len({(r.prompt_index, r.repeat) for r in run.requests}) == total
        m = run.machine
        if m and (m.swap_in_bytes or m.swap_out_bytes or m.process_swap_bytes):
            run.warnings.append(
                f"the machine swapped during the run (in {m.swap_in_bytes} B, out {m.swap_out_bytes} B; this "
                f"process has {m.process_swap_bytes} B in swap): timings include waiting on disk"
            )
        writer.close(run)
        return run


def _machine_state(swap0, probe_before, sampler: machine.Sampler) -> MachineState:
    s = psutil.swap_memory()
    return MachineState(
        swap_in_bytes=max(0, s.sin - swap0.sin),
        swap_out_bytes=max(0, s.sout - swap0.sout),
        process_swap_bytes=_process_swap_bytes(),
        probe_before=probe_before,
        summary=sampler.summary(),
        samples=list(sampler.samples),
    )


def _process_swap_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmSwap:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0
