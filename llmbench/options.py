"""What to measure and how: the option types of the public API (no torch here).

:class:`RunOptions` say how each prompt is sent (both modes); :class:`ModelOptions` name a model to load in
this process; :class:`EndpointOptions` name a server to stream from instead.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from pydantic import ConfigDict, Field, ValidationError, model_validator
from typing_extensions import Self

from llmbench.core.errors import UserError
from llmbench.spec import (
    DEFAULT_DURATION_S,
    DEFAULT_MODEL,
    EVENTS_PER_PROCESS_S,
    STREAMS_PER_PROCESS,
    ArrivalsSection,
    ClientProcesses,
    LeversSection,
    ModelName,
    ModelSection,
    ReaderSection,
    RequestsSection,
    Section,
    ServerSection,
    describe,
    rules,
    spec,
)
from llmbench.workloads import limits

__all__ = ["DEFAULT_MODEL", "EndpointOptions", "ModelOptions", "OpenLoop", "Options", "RunOptions"]


class Options(Section):
    """What the option types share: a value out of its setting's type or bounds is one UserError line naming the
    option, whenever one is made (a spec, the API, a driver's copy)."""

    # strict, as a spec is read: "8" is no max_new_tokens, 1.5 no count
    model_config = ConfigDict(extra="forbid", strict=True, arbitrary_types_allowed=True, defer_build=True)
    table: ClassVar[str] = "options"

    @model_validator(mode="wrap")
    @classmethod
    def _one_line(cls, data: Any, handler: Any) -> Any:
        try:
            return handler(data)
        except ValidationError as e:
            raise UserError(describe(e, spec("Checked", "", cls))) from None

    def replaced(self, **changes: Any) -> Self:
        """A copy with ``changes``, checked and resolved again (what ``dataclasses.replace`` did)."""
        return type(self)(**{**dict(self), **changes})

    def check(self) -> None:
        """UserError for a value changed out of bounds or against the rules since this was made (a dataset's
        output lengths set ``max_new_tokens`` on a copy)."""
        self.replaced()


class RunOptions(Options, RequestsSection, LeversSection, ReaderSection):
    """How each prompt is sent (both modes): the spec's requests, levers and reader sections, their rules
    resolved (:mod:`llmbench.spec.rules`). Defaults follow the README."""

    if TYPE_CHECKING:  # the type once resolved (below): no field of its own, the spec's is the one pydantic has
        ignore_eos: bool = False

    @model_validator(mode="after")
    def _resolved(self) -> Self:
        # what the spec's rules resolve (the static cache of --compile), for options built without a spec too
        values = self.model_dump()
        for name, value in rules.resolved(values).items():
            setattr(self, name, value)
            values[name] = value
        if self.ignore_eos is None:  # a command without --weights: unset stops at EOS, as a pretrained model does
            self.ignore_eos = values["ignore_eos"] = False
        rules.check(values)
        return self

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
            "reader": self.reader(),
            **self.lever_fields(),
        }

    def reader(self) -> dict[str, float] | None:
        """config.reader: the reader's pace, None at the default (the run's serializer writes the default's pace in
        full: :class:`llmbench.results.schema.RunConfig`)."""
        from llmbench.results.reader import pace_record

        return pace_record(self.reading_wpm, self.reading_cps)

    def lever_fields(self) -> dict[str, Any]:
        """config.speculative and config.prefix_cache (None for a plain run: what older runs read as)."""
        from llmbench.core.speculative import parse_prefix_cache, parse_speculative

        spec, prefix = parse_speculative(self.speculative), parse_prefix_cache(self.prefix_cache)
        return {"speculative": spec.record() if spec else None, "prefix_cache": None if prefix == "none" else prefix}


class ModelOptions(Options, ModelSection):
    """A model to load in this process, and how: the spec's model section (no model is the default one), and
    ``isolate``, which only the API sets. Checked further by llmbench.engines.hf.models.validate (it needs torch
    to know the devices)."""

    # an engine other than transformers runs in a worker process of its own (None: so it does), so a crash of
    # the engine (SIGILL, SIGSEGV) ends as a recorded failure with a clear line; False: in this process
    isolate: Optional[bool] = None
    if TYPE_CHECKING:  # the type once resolved (below): no field of its own, the spec's is the one pydantic has
        model: str = DEFAULT_MODEL

    @model_validator(mode="after")
    def _default_model(self) -> Self:
        if self.model is None:  # the spec's "none given"
            self.model = DEFAULT_MODEL
        return self

    @property
    def quantization(self) -> str | None:
        """The quantization applied, None for none (what the run records)."""
        return None if self.quantize == "none" else self.quantize

    @property
    def is_transformers(self) -> bool:
        """True when transformers generates (the default engine)."""
        from llmbench.core.engine_registry import engine_info

        return engine_info(self.engine).name == "transformers"


class OpenLoop(Options, ArrivalsSection):
    """Open-loop arrivals (``--rate``): requests sent on a schedule drawn in advance, whatever the server does: the
    spec's arrivals section, its rate given (the requests' ``seed`` draws it). ``replay``: a trace's rows
    (:class:`llmbench.workloads.trace.Trace`) whose times are the schedule instead. See
    :mod:`llmbench.workloads.arrivals`."""

    replay: Any = None

    @model_validator(mode="after")
    def _schedule(self) -> Self:
        """UserError for a schedule that can't be drawn (checked again, with the rest, when it is)."""
        from llmbench.workloads.arrivals import check_schedule, parse_arrival

        if self.replay is not None:
            if (self.workers or 1) > 1 or self.ray:
                raise UserError("--trace replays from one client process: drop --workers/--ray")
            return self
        if self.rate is None:
            raise UserError("an open loop needs --rate (requests per second)")
        check_schedule(self.rate, self.requests, self.duration_s)
        parse_arrival(self.arrival)
        return self


class EndpointOptions(Options, ServerSection, ModelName, ClientProcesses):
    """An OpenAI-compatible server to stream from, instead of a model in this process: the spec's server section,
    the model's name to send (None: ask GET /v1/models) and the client processes of a closed loop (an open loop's
    are its ``open_loop.workers``; None: auto, :func:`client_processes`). ``url=`` is taken for ``endpoint``."""

    open_loop: Optional[OpenLoop] = None  # None: closed loop, ``concurrency`` requests in flight
    # the scrape's period (not a setting: the tests shorten it)
    metrics_interval_s: float = Field(default=1.0, gt=0, le=limits.MAX_TIMEOUT_S, allow_inf_nan=False)
    if TYPE_CHECKING:  # the type once checked (below): no field of its own, the spec's is the one pydantic has
        endpoint: str = ""

    @model_validator(mode="before")
    @classmethod
    def _url(cls, data: Any) -> Any:
        if isinstance(data, dict) and "url" in data and "endpoint" not in data:  # the keyword before 0.4
            data = {("endpoint" if k == "url" else k): v for k, v in data.items()}
        return data

    @model_validator(mode="after")
    def _resolved(self) -> Self:
        if not self.endpoint:
            raise UserError("no endpoint URL given")
        if self.metrics_url is None and self.server_metrics:
            self.metrics_url = default_metrics_url(self.endpoint)
        ol = self.open_loop
        if ol is not None:  # an open loop's client processes are its own
            self.workers = None
        if self.server_command is not None:
            self.server_argv()
        rules.check({"server_command": self.server_command, "metrics_url": self.metrics_url,
                     "concurrency": self.concurrency, "rate": ol.rate if ol is not None and ol.replay is None
                     else None, "trace": ol.replay if ol is not None else None})  # fmt: skip
        return self

    @property
    def processes(self) -> int:
        """The client processes this run's requests are dealt to (1 until :func:`client_processes` resolved it)."""
        return (self.open_loop.workers if self.open_loop is not None else self.workers) or 1

    def server_argv(self) -> list[str]:
        """``--server-command`` as the words it runs (shlex, no shell); UserError for one that has none or whose
        quotes do not close. Its words are never shown: they may hold a secret (``--api-key X``)."""
        import shlex

        try:
            argv = shlex.split(self.server_command or "")
        except ValueError as e:  # "No closing quotation"
            raise UserError(f"--server-command: {str(e).lower()}") from None
        if not argv:
            raise UserError("--server-command is empty: give the command line that starts the server")
        return argv


def default_metrics_url(endpoint_url: str) -> str:
    """The Prometheus page of the server at ``endpoint_url``: its root's ``/metrics`` (vLLM, SGLang, llama.cpp's
    server, llmbench serve; TGI serves it on another port: give --metrics-url). It keeps the endpoint's
    credentials, to be *used*: what is recorded or shown goes through :func:`llmbench.core.redact.redact_url`."""
    from urllib.parse import urlsplit, urlunsplit

    u = urlsplit(endpoint_url)
    return urlunsplit((u.scheme, u.netloc, "/metrics", "", ""))


# ------------------------------------------------------------------------------- a spec, resolved (one place)


def _held(cls: type[Options], sections: Iterable[Any]) -> dict[str, Any]:
    """The fields of the option type ``cls`` that ``sections`` (a spec's, typed and validated) declare, with the
    values they hold: a setting has one name in every section and option type, so none is spelled here."""
    return {k: v for sec in sections for k, v in sec if k in cls.model_fields}


def run_options_of(*sections: Any, **fixed: Any) -> RunOptions:
    """How each prompt is sent, from a spec's sections (its requests, levers and reader; a setting they lack keeps
    the spec's default); ``fixed``: what a command sets itself (sweep's rounds as repeats). The spec resolved its
    rules already (``ignore_eos`` with random weights, ``--compile``'s static cache: :mod:`llmbench.spec.rules`)."""
    return RunOptions(**(_held(RunOptions, sections) | fixed))


def model_options_of(*sections: Any, **fixed: Any) -> ModelOptions:
    """The model to load, from a spec's model section: no model is the default one, quantize "none" is None;
    ``fixed``: what only the API passes (a ``device_map`` dict, ``isolate``)."""
    return ModelOptions(**(_held(ModelOptions, sections) | fixed))


def endpoint_options_of(server: Any, *sections: Any, open_loop: OpenLoop | None = None) -> EndpointOptions:
    """The server to stream from, from a spec's server section (``endpoint``: its URL; ``server_metrics`` or
    ``metrics_url``: the page scraped) and its other sections (the model's name to send, the client processes);
    ``open_loop``: its schedule (None: a closed loop)."""
    return EndpointOptions(open_loop=open_loop, **_held(EndpointOptions, (server, *sections)))


def client_processes(asked: int | None, *, streams: int | None, events_per_s: float | None,
                     unshared: str | None) -> int:  # fmt: skip
    """How many client processes a run's requests are dealt to. ``asked``: ``--workers`` (None: auto: one per
    :data:`~llmbench.spec.STREAMS_PER_PROCESS` streams of a closed loop, or per
    :data:`~llmbench.spec.EVENTS_PER_PROCESS_S` events a second an
    open loop expects, at most the machine's CPUs); ``unshared``: why this run can't be dealt out (then auto is 1,
    and more asked is refused in one line)."""
    import os

    if asked is not None:
        if asked > 1 and unshared:
            raise UserError(f"--workers {asked}: {unshared}")
        if streams is not None and asked > streams:
            raise UserError(f"--workers {asked} with --concurrency {streams}: each client process needs a stream")
        return asked
    if unshared:
        return 1
    need = math.ceil(streams / STREAMS_PER_PROCESS) if streams is not None else math.ceil(
        (events_per_s or 0.0) / EVENTS_PER_PROCESS_S)  # fmt: skip
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, min(need, cpus, limits.MAX_CLIENTS))  # the CPUs this process may run on (taskset, a cgroup)


def open_loop_of(arrivals: ArrivalsSection, trace: Any = None) -> OpenLoop | None:
    """``--rate``'s schedule from a spec's arrivals (or ``trace``'s rows), None for a closed loop (the requests'
    seed draws the schedule)."""
    if trace is not None:
        return OpenLoop(replay=trace)
    if arrivals.rate is None:
        return None
    given = arrivals.duration_s is not None or arrivals.requests is not None
    return OpenLoop(**(dict(arrivals) | ({} if given else {"duration_s": DEFAULT_DURATION_S})))
