"""What to measure and how: the option types of the public API (no torch here).

:class:`RunOptions` say how each prompt is sent (both modes); :class:`ModelOptions` name a model to load in
this process; :class:`EndpointOptions` name a server to stream from instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmbench.core.errors import UserError
from llmbench.workloads import limits
from llmbench.workloads.limits import check_range

# bounds past which a run could never be made (a typo, not a wish): refused in one line instead of a hang
_MAX_TOKENS = 10_000_000
_MAX_COUNT = 1_000_000

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"


@dataclass
class RunOptions:
    """How each prompt is sent. Defaults follow the README."""

    max_new_tokens: int = 256
    ignore_eos: bool = False
    warmup: int = 1
    repeats: int = 1
    sample: bool = False
    seed: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    system_prompt: str | None = None
    chat_template: bool = True
    truncate: bool = False  # cut prompts longer than the context (keeping their end) instead of refusing
    cache: str = "dynamic"  # KV cache: dynamic (grows per token) or static (preallocated, compilable)
    compile: bool = False  # decode steps through torch.compile; needs the static cache
    turns: int = 1  # --turns: each prompt opens a conversation of this many turns (llmbench.workloads.sessions)
    think_time_s: float = 0.0  # --think-time: a session's pause after a reply before its next turn
    # --speculative (llmbench.core.speculative): none, prompt-lookup[:N[:MAX_NGRAM]] or draft:MODEL[:K]
    speculative: str | None = None
    # --prefix-cache: none (nothing reused between requests), or system (the prompts' shared leading tokens:
    # system prompt and template preamble, computed once per process and reused, accounted per request)
    prefix_cache: str = "none"

    def validate(self) -> None:
        """UserError for options no run can honour."""
        if self.cache not in ("dynamic", "static"):
            raise UserError(f"unknown --cache '{self.cache}'; expected dynamic or static")
        if self.compile and self.cache != "static":
            raise UserError("--compile needs --cache static: torch.compile can't trace a growing cache")
        if self.max_new_tokens < 1:
            raise UserError(f"--max-new-tokens must be at least 1, not {self.max_new_tokens}")
        if self.max_new_tokens > _MAX_TOKENS:
            raise UserError(f"--max-new-tokens {self.max_new_tokens}: more than any model writes (at most "
                            f"{_MAX_TOKENS:,})")  # fmt: skip
        if not 0 <= self.warmup <= _MAX_COUNT:
            raise UserError(f"--warmup must be 0 to {_MAX_COUNT:,}, not {self.warmup}")
        if not 1 <= self.repeats <= _MAX_COUNT:
            raise UserError(f"--repeats must be 1 to {_MAX_COUNT:,}, not {self.repeats}")
        from llmbench.workloads.sessions import MAX_TURNS

        if not 1 <= self.turns <= MAX_TURNS:
            raise UserError(f"--turns must be 1 to {MAX_TURNS:,}, not {self.turns}")
        check_range("--think-time", self.think_time_s, 0, limits.MAX_WAIT_S, unit=" s")
        check_range("--seed", self.seed, 0, limits.MAX_SEED)
        # checked with or without --sample: a NaN or a 1e300 is a typo either way (greedy only ignores them)
        check_range("--temperature", self.temperature, 0, 100.0)
        check_range("--top-p", self.top_p, 0, 1)
        if self.sample and not self.temperature > 0:
            raise UserError(f"--temperature must be above 0 when sampling, not {self.temperature}")
        if self.sample and not self.top_p > 0:
            raise UserError(f"--top-p must be in (0, 1], not {self.top_p}")
        self.check_levers()

    def check_levers(self) -> None:
        """UserError for a --speculative/--prefix-cache that can't be parsed or combined."""
        from llmbench.core.speculative import parse_prefix_cache, parse_speculative

        spec, prefix = parse_speculative(self.speculative), parse_prefix_cache(self.prefix_cache)
        if spec is not None and prefix != "none":
            # transformers' assisted loop feeds the whole prompt again on top of a given cache (silently wrong)
            raise UserError("--speculative and --prefix-cache system can't be combined: measure them apart")
        if (spec is not None or prefix != "none") and self.cache != "dynamic":
            raise UserError("--speculative and --prefix-cache need --cache dynamic (a static cache can't be cut back "
                            "to the accepted tokens, nor copied per request)")  # fmt: skip

    @property
    def lever(self) -> str | None:
        """The speculative method's label or 'prefix-cache', None for a plain run (sweep's setup names)."""
        from llmbench.core.speculative import parse_prefix_cache, parse_speculative

        spec = parse_speculative(self.speculative)
        if spec is not None:
            return spec.label
        return "prefix-cache" if parse_prefix_cache(self.prefix_cache) != "none" else None

    def request_seed(self, prompt_index: int, repeat: int) -> int:
        """The sampling seed of one (prompt, repeat): different per request, the same on a resumed run and in
        both modes."""
        return self.seed + prompt_index * 1_000_003 + repeat

    def config_fields(self, prompts: Any) -> dict[str, Any]:
        """The run config's fields that come from these options and the prompt set (every mode)."""
        from llmbench.results.schema import Sampling

        return {
            "max_new_tokens": self.max_new_tokens,
            "ignore_eos": self.ignore_eos,
            "warmup": self.warmup,
            "repeats": self.repeats,
            "prompt_file": prompts.path,
            "prompt_sha256": prompts.sha256,
            "prompt_count": len(prompts.prompts),
            "prompt_source": getattr(prompts, "source", None),
            "sampling": Sampling(
                do_sample=self.sample,
                temperature=self.temperature if self.sample else None,
                top_p=self.top_p if self.sample else None,
                seed=self.seed if self.sample else None,
            ),
            "system_prompt": self.system_prompt,
            **self.lever_fields(),
        }

    def lever_fields(self) -> dict[str, Any]:
        """config.speculative and config.prefix_cache (None for a plain run: what older runs read as)."""
        from llmbench.core.speculative import parse_prefix_cache, parse_speculative

        spec, prefix = parse_speculative(self.speculative), parse_prefix_cache(self.prefix_cache)
        return {"speculative": spec.record() if spec else None, "prefix_cache": None if prefix == "none" else prefix}


@dataclass
class ModelOptions:
    """A model to load in this process, and how."""

    model: str = DEFAULT_MODEL  # a hub id, a local folder or a .gguf file
    weights: str = "pretrained"  # "pretrained" | "random"
    device: str = "auto"
    dtype: str = "auto"
    threads: int | None = None
    device_map: str | dict[str, Any] | None = None
    allow_offload: bool = False
    allow_pickle: bool = False
    trust_remote_code: bool = False
    attn: str | None = None  # attention kernel: eager, sdpa, ... (None: transformers' default)
    quantize: str | None = None  # "int8" (weight-only) or "int8-dynamic": see llmbench.engines.hf.quantize
    reprobe: bool = False  # --dtype auto: measure again instead of reusing this machine's cached choice
    # the engine that generates: transformers (this process, torch), or llama.cpp, openvino, onnxruntime
    # (llmbench.engines), each fed the same token ids
    engine: str = "transformers"
    precision: str | None = None  # an engine's weight format (llama.cpp q8_0, openvino int4, ...): see engines
    # an engine other than transformers runs in a worker process of its own (None: so it does), so a crash of
    # the engine (SIGILL, SIGSEGV) ends as a recorded failure with a clear line; False: in this process
    isolate: bool | None = None
    # checked by llmbench.engines.hf.models.validate (it needs torch to know the devices)

    @property
    def is_transformers(self) -> bool:
        """True when transformers generates (the default engine)."""
        from llmbench.core.engine_registry import engine_info

        return engine_info(self.engine).name == "transformers"


@dataclass
class OpenLoop:
    """Open-loop arrivals (``--rate``): requests sent on a schedule drawn in advance, whatever the server does.
    See :mod:`llmbench.workloads.arrivals`."""

    rate_rps: float
    arrival: str = "poisson"  # poisson | constant | gamma:CV
    requests: int | None = None  # how many to send ...
    duration_s: float | None = None  # ... or for how long
    seed: int = 0
    workers: int = 1  # client processes sharing the schedule (local), or Ray tasks with ``ray``
    ray: str | None = None  # a Ray cluster's address ("auto", "ray://host:port"): workers run there
    trace: Any = (
        None  # --trace: a llmbench.workloads.trace.Trace whose rows' times are the schedule (rate_rps: their mean)
    )

    def validate(self) -> None:
        """UserError for a schedule that can't be drawn (checked again, with the rest, when it is)."""
        from llmbench.workloads.arrivals import plan_arrivals

        if self.trace is not None:
            if self.workers > 1 or self.ray:
                raise UserError("--trace replays from one client process: drop --workers/--ray")
            return

        if not 1 <= self.workers <= limits.MAX_CLIENTS:
            raise UserError(f"--workers must be 1 to {limits.MAX_CLIENTS:,}, not {self.workers}")
        plan_arrivals(self.rate_rps, self.arrival, requests=self.requests, duration_s=self.duration_s, seed=self.seed)


@dataclass
class EndpointOptions:
    """An OpenAI-compatible server to stream from, instead of a model in this process."""

    url: str
    model: str | None = None  # the name sent as "model"; None: ask GET /v1/models
    api_key_env: str | None = None  # the environment variable holding the API key (never written anywhere)
    concurrency: int = 1
    timeout_s: float = 600.0
    tokenizer: str | None = None  # hub id, folder or .gguf, to count tokens when the server sends no usage
    open_loop: OpenLoop | None = None  # None: closed loop, ``concurrency`` requests in flight
    # --server-metrics: the server's Prometheus page, scraped during the measured window (None: not scraped)
    metrics_url: str | None = None
    metrics_interval_s: float = 1.0

    def validate(self) -> None:
        """UserError for what no server can be asked."""
        if not 1 <= self.concurrency <= limits.MAX_CONCURRENCY:
            raise UserError(f"--concurrency must be 1 to {limits.MAX_CONCURRENCY:,}, not {self.concurrency}")
        check_range("--timeout", self.timeout_s, 0, limits.MAX_TIMEOUT_S, unit=" s", above=True)  # NaN fails too
        if self.metrics_url is not None and not self.metrics_url.lower().startswith(("http://", "https://")):
            from llmbench.core.redact import redact_url

            raise UserError(f"--metrics-url must be an http(s) URL, not '{redact_url(self.metrics_url)}'")
        if not 0 < self.metrics_interval_s <= limits.MAX_TIMEOUT_S:  # NaN fails this too
            raise UserError(f"the metrics scrape interval must be above 0 s, not {self.metrics_interval_s}")
        if self.open_loop is not None:
            if self.concurrency != 1:
                raise UserError("--concurrency is a closed loop's; an open-loop run (--rate) has no limit in flight")
            self.open_loop.validate()


def default_metrics_url(endpoint_url: str) -> str:
    """The Prometheus page of the server at ``endpoint_url``: its root's ``/metrics`` (vLLM, SGLang, llama.cpp's
    server, llmbench serve; TGI serves it on another port: give --metrics-url). It keeps the endpoint's
    credentials, to be *used*: what is recorded or shown goes through :func:`llmbench.core.redact.redact_url`."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(endpoint_url)
    return urlunsplit((u.scheme, u.netloc, "/metrics", "", ""))
