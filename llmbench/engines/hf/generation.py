"""Generating with transformers, the one way both the in-process backend and ``serve`` do it.

Messages and chat template, generate() keyword arguments (greedy, sampling, fixed length, static cache,
compile), the stop criterion that a :class:`~llmbench.core.process.Stop` or a disconnect raises, the streamer that
stamps every token, and the single thread every model is loaded and run on.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from concurrent.futures import Executor, Future
from typing import Any

import torch
from transformers.generation.stopping_criteria import StoppingCriteria
from transformers.generation.streamers import BaseStreamer

from llmbench.engines.chat import chat_inputs


class TokenStamper(BaseStreamer):
    """The stopwatch: records ``time.perf_counter_ns()`` and the ids of each generated token.

    generate() calls ``put()`` first with the prompt (skipped here), then once per decoding step with the new
    token(s), already copied to the host (so on CUDA the token is materialised when stamped). ``put()`` runs on
    the generation thread between two forward passes, so it does O(1) work: one clock read, one append (and
    ``on_token``, when given, which must be as cheap: serve hands the token to its event loop). Decoding ids
    to text happens after the request, off the clock.
    """

    def __init__(
        self,
        clock: Callable[[], int] = time.perf_counter_ns,
        on_token: Callable[[int, Any], None] | None = None,
    ) -> None:
        self._clock = clock
        self._on_token = on_token
        self._prompt_seen = False
        self.times_ns: list[int] = []
        self.tokens: list = []  # tensors as handed over; turned into ints after the request
        self.end_ns: int | None = None

    def put(self, value) -> None:
        t = self._clock()
        if self._prompt_seen:
            self.times_ns.append(t)
            self.tokens.append(value)
            if self._on_token is not None:
                self._on_token(t, value)
        else:
            self._prompt_seen = True

    def end(self) -> None:
        self.end_ns = self._clock()

    def token_ids(self) -> list[int]:
        """The generated ids, in order (call after generate() returned)."""
        ids: list[int] = []
        for t in self.tokens:
            ids.extend(int(x) for x in t.reshape(-1).tolist())
        return ids

    def bundle_sizes(self) -> list[int]:
        """Tokens handed over per put(): 1 each in plain decoding; with --speculative, one bundle per forward
        pass of the target (the drafts it accepted and its own token)."""
        return [int(t.numel()) for t in self.tokens]

    def sequence_ids(self, b: int) -> list[int]:
        """Sequence ``b``'s ids in a batched generate(): each step hands over one token per sequence."""
        return [int(t.reshape(-1)[b]) for t in self.tokens]


class StopCriterion(StoppingCriteria):
    """Stops generate() after the current token once ``is_set()`` is true (a Stop was requested, a client left).

    generate() asks after every token: one attribute read.
    """

    def __init__(self, is_set: Callable[[], bool]) -> None:
        self.is_set = is_set

    def __call__(self, input_ids, scores, **kwargs) -> torch.BoolTensor:
        return torch.full(  # type: ignore[return-value]
            (input_ids.shape[0],), self.is_set(), dtype=torch.bool, device=input_ids.device
        )


def encode_messages(tokenizer, messages: list[dict], use_template: bool, tools: list[dict] | None = None):
    """Chat messages -> ``{"input_ids", "attention_mask"}`` tensors (see :func:`llmbench.engines.chat.chat_inputs`)."""
    text, special = chat_inputs(tokenizer, messages, use_template, tools)
    return tokenizer(text, return_tensors="pt", add_special_tokens=special)


def sampling_kwargs(sample: bool, temperature: float | None, top_p: float | None) -> dict[str, Any]:
    """Greedy unless ``sample``. A model's generation_config may carry sampling defaults (Qwen's does): greedy
    means none of them."""
    if sample:
        return {"do_sample": True, "temperature": temperature, "top_p": top_p if top_p else 1.0, "top_k": None}
    return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}


def generate_kwargs(
    max_new_tokens: int,
    *,
    ignore_eos: bool,
    sample: bool = False,
    temperature: float | None = None,
    top_p: float | None = None,
    cache: str = "dynamic",
    compile: bool = False,
    max_cache_len: int | None = None,
) -> dict[str, Any]:
    """generate()'s keyword arguments for one request."""
    kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, **sampling_kwargs(sample, temperature, top_p)}
    if ignore_eos:
        # generate exactly max_new_tokens: EOS stops nothing (as vLLM's ignore_eos). Masking EOS instead
        # (min_new_tokens) cost +1.4% TPOT here, a pass over the whole vocabulary per step
        # (benchmarks/side_costs.py eos)
        kw["eos_token_id"] = None
    if cache == "static":
        # one size for every request, so a compiled decode step is traced once, never per prompt length
        kw.update(cache_implementation="static", max_cache_len=max_cache_len)
        if compile:
            from transformers import CompileConfig

            cc = CompileConfig()
            cc._compile_all_devices = True  # type: ignore[assignment]  # transformers compiles on GPUs unless told
            kw["compile_config"] = cc
        else:
            kw["disable_compile"] = True  # on CUDA a static cache would otherwise be compiled silently
    return kw


def compiled_graphs() -> int:
    """torch.compile's count of graphs compiled so far in this process (0 when dynamo never ran)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])


def recompile_warning(graphs: int) -> str:
    """The warning for a run whose timed requests triggered compilation."""
    return f"torch.compile compiled {graphs} graph(s) during timed requests: those requests include compile time"


class GenerationThread(Executor):
    """One daemon thread that runs submitted calls in order: every model is loaded and run on it.

    torch's OpenMP keeps one thread team (and one thread count) per calling thread: a model loaded on one
    thread and run on another ran 20% slower per token here (two teams on two cores: TPOT 102 ms against
    85 ms, random Qwen2.5-0.5B, bfloat16, 2 threads), and ``torch.set_num_threads`` on the main thread does
    not reach a worker. So loading, thread switches, probes and generate() all go through this one thread.
    A daemon: a second Ctrl-C ends the process without waiting for the forward pass in flight.
    """

    def __init__(self, name: str = "llmbench-generate") -> None:
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def _work(self) -> None:
        while True:
            fut, fn, args, kwargs = self._queue.get()
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                fut.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the caller through the future
                fut.set_exception(e)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        self._queue.put((fut, fn, args, kwargs))
        return fut

    def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Call ``fn`` on the generation thread and wait for its result (directly when already on it)."""
        if threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        return self.submit(fn, *args, **kwargs).result()


_thread: GenerationThread | None = None
_thread_lock = threading.Lock()


def generation_thread() -> GenerationThread:
    """The process's generation thread (made on first use)."""
    global _thread
    with _thread_lock:
        if _thread is None:
            _thread = GenerationThread()
        return _thread


def forget_after_fork() -> None:
    """In a forked child: the parent's generation thread did not survive the fork (only the forking thread
    does), so the next :func:`generation_thread` makes a new one."""
    global _thread, _thread_lock
    _thread, _thread_lock = None, threading.Lock()  # the lock too: another thread may have held it at the fork
