"""Every setting of a measurement, declared once: its type, bounds, default and help (pydantic models).

A command's options are generated from its spec (:mod:`llmbench.cli.specs`), :func:`llmbench.measure` takes a
:class:`RunSpec` (and keyword overrides by field name), a config file (``--config FILE.toml``) is read into one,
``--print-config`` writes one, the run JSON records the one it was measured with (``config.spec``), and
docs/config.md is generated from their JSON schema (:mod:`.reference`).

The spec is grouped in sections, each a TOML table of a config file (``[model]``, ``[requests]``, ...); a field's
name is the same in every section and command that has it (``max_new_tokens``), and its option is ``--max-new-tokens``
unless the field says otherwise (``think_time_s`` is ``--think-time``). A command that takes a section only in part,
or with other defaults (``ab`` asks 64 tokens, ``run`` 256), takes a :func:`view` of it: the same fields, bounds and
help, narrowed. The spec is what a user asks for; :func:`llmbench.options.run_options_of` and its siblings resolve
it into the option types the drivers run (``ignore_eos`` left unset is on with random weights, ``--compile``
implies the static cache, ...), in one place.

Why one module of 760-odd lines (over 600): the sections, and the one reading of a setting from every place it comes
from (an option, a comma list, a config file, a run's record: strict, paths from the file's folder; what was given,
and the rules applied when a spec is made), change together. The rules themselves (:mod:`.rules`), the commands'
views (:mod:`.commands`), the gate's section (:mod:`.gate`), the docs' reference (:mod:`.reference`) and synopses
(:mod:`.synopsis`) are modules of their own.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal, Optional

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticUndefined
from typing_extensions import Self

from llmbench.core.errors import UserError
from llmbench.results import reader
from llmbench.workloads import limits

DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
MAX_TOKENS = 10_000_000  # no model writes more in one answer: a bigger --max-new-tokens is a typo
MAX_COUNT = 1_000_000  # warmup requests, repeats of the prompt list
MAX_THREADS = 4096


def default_threads() -> int:
    """The one thread count a model generates with when ``--threads`` is not given, every engine alike (llama.cpp's
    own default is half the logical CPUs for decode, all for prefill; a comparison needs them the same):
    ``OMP_NUM_THREADS`` when set, else the physical cores, as torch's own default."""
    import os

    omp = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()  # "4,2": nested levels, the outer one
    if omp.isdigit() and 1 <= int(omp) <= MAX_THREADS:
        return int(omp)
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


DEFAULT_DURATION_S = 30.0  # an open loop given neither --duration nor --requests sends for this long
# one client process keeps up with this many streams, or this many events a second, before a second one helps
# (benchmarks/README.md, "the client that keeps up": 64 streams x 100 events/s on 2 cores with the server, stamps
# p99 7.5-15 ms behind the server's sends in one process, 2.4-2.9 ms in two; 32 streams: 1.4-2 ms in one)
STREAMS_PER_PROCESS = 32
EVENTS_PER_PROCESS_S = 3_200.0


def setting(default: Any, help: str, *, flag: str | None = None, short: str | None = None, panel: str | None = None,
            envvar: str | None = None, argument: bool = False, hidden: bool = False, comma: bool = False,
            **bounds: Any) -> Any:  # fmt: skip
    """A spec field: pydantic's Field with the command line's spelling kept in its JSON-schema extras (``flag``:
    the option's declaration when it is not ``--field-name``; ``argument``: positional; ``comma``: a list given
    as one comma-separated option on the command line, ``--threads 1,2``, and as a list in a config file)."""
    cli = {
        "flag": flag,
        "short": short,
        "panel": panel,
        "envvar": envvar,
        "argument": argument or None,
        "hidden": hidden or None,
        "comma": comma or None,
    }
    return Field(default, description=help, json_schema_extra={k: v for k, v in cli.items() if v is not None} or None,
                 **bounds)  # fmt: skip


class Section(BaseModel):
    """One table of a config file: typed, bounded, closed (an unknown key is an error, not a silent default)."""

    # defer_build: a schema is built on first use, not at import (--help reads the fields only)
    model_config = ConfigDict(extra="forbid", validate_assignment=False, defer_build=True)
    table: ClassVar[str] = ""
    # a table of lists, each field a comma list of a setting's values (sweep's grid): not the settings themselves,
    # so the cross-field rules (llmbench.spec.rules) read nothing of it
    lists: ClassVar[bool] = False


# ------------------------------------------------------------------------------------------------ the sections

Dtype = Literal["auto", "float32", "bfloat16", "float16"]
Weights = Literal["pretrained", "random"]
Attn = Literal["eager", "sdpa", "flash_attention_2", "flex_attention"]
Quantize = Literal["none", "int8", "int8-dynamic"]
Cache = Literal["dynamic", "static"]


class ModelName(Section):
    """The model: loaded in this process, or the name sent to a server (its own section's first field, apart so
    the endpoint's options take it alone)."""

    table: ClassVar[str] = "model"
    model: Optional[str] = setting(None, f"Hub id, local folder or .gguf file (default: {DEFAULT_MODEL}).",
                                   short="-m")  # fmt: skip


class ModelSection(ModelName):
    """The model generated in this process, and how it is loaded."""

    table: ClassVar[str] = "model"
    weights: Weights = setting(
        "pretrained", "random: the real architecture with random weights (no download; timings real)."
    )
    engine: str = setting(
        "transformers",
        "The engine that generates, fed the same token ids: transformers, llama.cpp, openvino or "
        "onnxruntime (pip install 'llmbench\\[llamacpp|openvino|onnxruntime]').",
    )
    precision: Optional[str] = setting(
        None,
        "--engine's weight format, converted from a Hugging Face folder: llama.cpp f16, q8_0, q4_k_m, ...; "
        "openvino fp16, int8, int4; onnxruntime fp32, int8, int4 (default 8-bit; a .gguf runs as is).",
    )
    device: str = setting("auto", "auto, cpu, cuda, cuda:N or mps.")
    dtype: Dtype = setting("auto", "auto = fastest on the device.")
    reprobe: bool = setting(False, "--dtype auto: measure the dtypes again instead of this machine's cached choice.")
    threads: Optional[int] = setting(None, "Threads the model computes with, every engine alike (default: "
                                     "OMP_NUM_THREADS, else the physical cores).", ge=1, le=MAX_THREADS)  # fmt: skip
    attn: Optional[Attn] = setting(None, "Attention kernel (default: the model's).")
    quantize: Quantize = setting(
        "none",
        "int8: int8 weights per output channel, activations in --dtype; int8-dynamic: int8 weights and "
        "activations, float32 only (CPU).",
    )
    device_map: Optional[str] = setting(None, "Let accelerate place the weights: auto, balanced, sequential or a JSON "
                                        "object (offloading is still refused).")  # fmt: skip
    allow_offload: bool = setting(False, "Run even when weights are offloaded to disk/CPU (recorded).")
    allow_pickle: bool = setting(False, "Allow pickle (.bin) weights in a folder.")
    trust_remote_code: bool = setting(False, "Run the model repo's own code.")

    @field_validator("device_map", mode="before")
    @classmethod
    def _map_text(cls, v: Any) -> Any:
        # the API may pass accelerate's dict: the setting is its JSON text (what a run records)
        import json

        return json.dumps(v, sort_keys=True) if isinstance(v, dict) else v

    @field_validator("quantize", mode="before")
    @classmethod
    def _no_quantization(cls, v: Any) -> Any:
        return "none" if v is None else v  # the API's None


class ServerSection(Section):
    """An OpenAI-compatible server measured instead of a model in this process."""

    table: ClassVar[str] = "server"
    endpoint: Optional[str] = setting(
        None,
        "Measure an OpenAI-compatible server instead (vLLM, llama.cpp, Ollama, llmbench serve): its base URL, "
        "e.g. http://127.0.0.1:8000/v1. --model then names the model to send.",
    )
    api_key_env: Optional[str] = setting(None, "With --endpoint: the variable holding the API key.")
    timeout_s: float = setting(600.0, "With --endpoint: a request that receives nothing for this long fails (a "
                               "stalled server), s.", flag="--timeout", gt=0, le=limits.MAX_TIMEOUT_S,
                               allow_inf_nan=False)  # fmt: skip
    concurrency: int = setting(1, "With --endpoint: requests in flight at once.", ge=1, le=limits.MAX_CONCURRENCY)
    tokenizer: Optional[str] = setting(None, "With --endpoint: hub id, folder or .gguf to count tokens without usage.")
    server_metrics: bool = setting(False, "With --endpoint: scrape the server's Prometheus /metrics during the run "
                                   "(gauges' mean and max, counters' deltas, into the run JSON).")  # fmt: skip
    metrics_url: Optional[str] = setting(None, "The metrics page to scrape (default: the endpoint's host, /metrics); "
                                         "implies --server-metrics.")  # fmt: skip
    server_command: Optional[str] = setting(
        None,
        "With --endpoint: start the server with this command line (split as a shell would, run without one), "
        "measure its cold start (exec to listening, to ready: GET /v1/models 200, to the first request's first "
        "token) and stop it at the end; its output goes to RUN.server.log.",
    )
    boot_timeout_s: float = setting(300.0, "With --server-command: a server not ready this long after its start "
                                    "is stopped and the run refused, s.", flag="--boot-timeout", gt=0,
                                    le=limits.MAX_TIMEOUT_S, allow_inf_nan=False)  # fmt: skip


_DATASETS, _TRACES, _PREFIXES, _SESSIONS = "Datasets", "Traces", "Shared prefixes", "Sessions"
_READER = "The reader (shape of the wait)"
# the settings that choose among a dataset's rows (PromptsSection's "Datasets" panel)
DATASET = ("prompt_format", "prompt_column", "output_len_column", "min_prompt_tokens", "max_prompt_tokens",
           "num_prompts")  # fmt: skip


class PromptsSection(Section):
    """Where the prompts come from: a prompt file, a dataset, synthetic prompts, prefix groups or a trace."""

    table: ClassVar[str] = "prompts"
    prompts: Optional[Path] = setting(
        None,
        'Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl); or a dataset: ShareGPT '
        ".json, .jsonl, .csv, .parquet, a save_to_disk folder (see Datasets). Or --synthetic instead.",
        argument=True,
    )
    synthetic: Optional[str] = setting(
        None,
        "TOKENSxCOUNT, e.g. 512x20: COUNT different prompts of exactly TOKENS tokens each (chat template "
        "included), cut from a text llmbench ships, reproducible from --seed.",
    )
    prompt_format: Optional[str] = setting(
        None,
        "How to read PROMPTS: txt, jsonl, json, sharegpt, csv, parquet, arrow (a save_to_disk folder); default: "
        "by its extension.",
        panel=_DATASETS,
    )
    prompt_column: Optional[str] = setting(None, "The dataset's column holding the prompt (default: prompt).",
                                           panel=_DATASETS)  # fmt: skip
    output_len_column: Optional[str] = setting(
        None,
        "The dataset's column of output lengths: each request asks for exactly its own (EOS ignored).",
        panel=_DATASETS,
    )
    min_prompt_tokens: Optional[int] = setting(
        None,
        "Keep prompts of at least this many tokens, as the run counts them.",
        panel=_DATASETS,
        ge=0,
        le=limits.MAX_PROMPT_TOKENS,
    )
    max_prompt_tokens: Optional[int] = setting(
        None,
        "Keep prompts of at most this many tokens, as the run counts them.",
        panel=_DATASETS,
        ge=0,
        le=limits.MAX_PROMPT_TOKENS,
    )
    num_prompts: Optional[int] = setting(None, "Sample this many entries (drawn from --seed) among those the filters "
                                         "keep.", panel=_DATASETS, ge=1, le=limits.MAX_REQUESTS)  # fmt: skip
    prefix_groups: Optional[int] = setting(None, "Prompts in N groups sharing a prefix each (with --prefix-tokens, "
                                           "--suffix-tokens, --num-prompts).", panel=_PREFIXES, ge=1,
                                           le=limits.MAX_REQUESTS)  # fmt: skip
    prefix_tokens: Optional[int] = setting(None, "Tokens of each group's shared prefix.", panel=_PREFIXES, ge=0,
                                           le=limits.MAX_PROMPT_TOKENS)  # fmt: skip
    suffix_tokens: Optional[int] = setting(None, "Tokens of each prompt's own suffix.", panel=_PREFIXES, ge=0,
                                           le=limits.MAX_PROMPT_TOKENS)  # fmt: skip
    group_dist: str = setting("uniform", "How prompts fall into groups: uniform, zipf or zipf:A (from --seed).",
                              panel=_PREFIXES)  # fmt: skip
    trace: Optional[Path] = setting(None, "With --endpoint: replay this trace: its times are the schedule, its rows "
                                    "the prompts (exact lengths, shared blocks).", panel=_TRACES)  # fmt: skip
    trace_format: Optional[str] = setting(None, "mooncake (JSONL, ms), burstgpt (CSV, s) or azure (CSV, date and "
                                          "time).", panel=_TRACES)  # fmt: skip
    time_scale: Optional[float] = setting(None, "Multiply the trace's times (0.5: twice as fast). Default 1.",
                                          panel=_TRACES, gt=0, allow_inf_nan=False)  # fmt: skip
    start: Optional[float] = setting(None, "Replay from this second of the trace.", panel=_TRACES, ge=0,
                                     allow_inf_nan=False)  # fmt: skip
    end: Optional[float] = setting(None, "Replay until this second of the trace.", panel=_TRACES, ge=0,
                                   allow_inf_nan=False)  # fmt: skip


class Schedule(Section):
    """An open loop's schedule: the arrivals section's first fields, apart so the option types compose them."""

    table: ClassVar[str] = "arrivals"
    rate: Optional[float] = setting(None, "With --endpoint: open loop, requests per second on a schedule drawn in "
                                    "advance.", gt=0, le=limits.MAX_RATE_RPS, allow_inf_nan=False)  # fmt: skip
    arrival: str = setting("poisson", "Open loop: gaps between arrivals: poisson, constant or gamma:CV (CV > 1 "
                           "burstier).")  # fmt: skip
    requests: Optional[int] = setting(None, "Open loop: how many requests to send.", ge=1, le=limits.MAX_REQUESTS)
    duration_s: Optional[float] = setting(
        None,
        f"Open loop: send for this many seconds (default {DEFAULT_DURATION_S:g}).",
        flag="--duration",
        gt=0,
        le=limits.MAX_SCHEDULE_S,
        allow_inf_nan=False,
    )


class ClientProcesses(Section):
    """The client processes a server's requests are dealt to (a closed loop's and an open loop's)."""

    table: ClassVar[str] = "arrivals"
    workers: Optional[int] = setting(
        None,
        "With --endpoint: client processes sharing the requests, a closed loop's --concurrency streams split among "
        f"them, an open loop's schedule dealt out (default: one per {STREAMS_PER_PROCESS} streams or "
        f"{EVENTS_PER_PROCESS_S:,.0f} expected events a second, at most the CPUs it may run on; 1 where a run can't "
        "be shared).",
        ge=1, le=limits.MAX_CLIENTS,
    )  # fmt: skip


class ArrivalsSection(ClientProcesses, Schedule):  # fields in order: the schedule's, workers, ray
    """When requests are sent to a server: an open loop's schedule (``--rate``)."""

    table: ClassVar[str] = "arrivals"
    ray: Optional[str] = setting(None, "Open loop: run the --workers as Ray tasks on this cluster (address, 'auto' or "
                                 "'local'; pip install 'llmbench\\[ray]').")  # fmt: skip


class RequestsSection(Section):
    """How each prompt is sent: its length, sampling, template and sessions."""

    table: ClassVar[str] = "requests"
    max_new_tokens: int = setting(256, "Tokens to generate per request at most.", ge=1, le=MAX_TOKENS)
    ignore_eos: Optional[bool] = setting(None, "Generate exactly --max-new-tokens. Default: on with random.",
                                         flag="--ignore-eos/--stop-at-eos")  # fmt: skip
    warmup: int = setting(1, "Unmeasured requests (per setup) before the measured ones.", ge=0, le=MAX_COUNT)
    repeats: int = setting(1, "Times to go round the whole prompt list.", ge=1, le=MAX_COUNT)
    sample: bool = setting(False, "Sample instead of greedy decoding.")
    seed: int = setting(0, "Seed for --sample (each request derives its own), --synthetic, --rate's schedule, "
                        "--num-prompts and --prefix-groups.", ge=0, le=limits.MAX_SEED)  # fmt: skip
    temperature: float = setting(1.0, "Temperature for --sample.", ge=0, le=100, allow_inf_nan=False)
    top_p: float = setting(1.0, "Top-p for --sample.", ge=0, le=1, allow_inf_nan=False)
    system_prompt: Optional[str] = setting(None, "System message for every prompt.")
    chat_template: bool = setting(True, "Send the prompt through the model's chat template (--no-chat-template: the "
                                  "raw prompt text).", flag="--chat-template/--no-chat-template")  # fmt: skip
    truncate: bool = setting(False, "Cut prompts longer than the context.")
    turns: int = setting(1, "Each prompt opens a conversation of this many turns, each sending the conversation so far "
                         "with the model's replies.", panel=_SESSIONS, ge=1, le=limits.MAX_TURNS)  # fmt: skip
    think_time_s: float = setting(0.0, "Seconds a session waits after a reply before its next turn.",
                                  flag="--think-time", panel=_SESSIONS, ge=0, le=limits.MAX_WAIT_S,
                                  allow_inf_nan=False)  # fmt: skip


class ReaderSection(Section):
    """The reader the shape of the wait is measured against (llmbench.results.reader; docs/metrics.md)."""

    table: ClassVar[str] = "reader"
    reading_wpm: float = setting(
        238.0,  # Brysbaert (2019); a run records the pace it used (reader.WORDS_PER_MINUTE: a run that recorded none)
        "A reader's pace, words a minute (Brysbaert 2019: adults read non-fiction silently at 238): the stalls, "
        "Andes' QoE and Etalon's fluidity of every answer are measured against it.",
        panel=_READER, ge=reader.MIN_WPM, le=reader.MAX_WPM, allow_inf_nan=False,
    )  # fmt: skip
    reading_cps: Optional[float] = setting(None, "The pace in characters a second instead (any script; overrides "
                                           "--reading-wpm).", panel=_READER, gt=0, le=reader.MAX_CPS,
                                           allow_inf_nan=False)  # fmt: skip


class LeversSection(Section):
    """What makes decoding faster: the KV cache, torch.compile, speculative decoding, prefix caching."""

    table: ClassVar[str] = "levers"
    cache: Cache = setting("dynamic", "KV cache: dynamic, or static (preallocated).")
    compile: bool = setting(False, "torch.compile the decode step (static cache).")
    speculative: Optional[str] = setting(
        None,
        "Speculative decoding: none, prompt-lookup[:N[:MAX_NGRAM]] (n-gram drafts from the prompt, default "
        "10:2) or draft:MODEL[:K] (a draft model with the target's vocabulary, K drafts a step, default 5). Tokens of "
        "one forward pass share one stamp; greedy output is checked against a plain run's (lossless).",
    )
    prefix_cache: str = setting(
        "none",
        "system: the prompts' shared leading tokens (system prompt, template preamble) computed once per "
        "process by the first measured request (cold) and reused by the others (warm); none: nothing reused between "
        "requests.",
    )


class OutputsSection(Section):
    """Where the result goes (not part of the setup: two runs written to different files measured the same)."""

    table: ClassVar[str] = "outputs"
    output: Optional[Path] = setting(None, "Run JSON (default: results/<UTC time>-<model>-<device>.json).",
                                     short="-o")  # fmt: skip
    overwrite: bool = setting(False, "Replace an existing output file.")
    history: Optional[str] = setting(
        None,
        "Record the result in the history: a URL (sqlite:///FILE.db, postgresql://...), a .db file, or nothing "
        "for the default file (~/.local/share/llmbench/history.db).",
        envvar="LLMBENCH_HISTORY",
    )
    resume: Optional[Path] = setting(None, "Continue this incomplete run JSON (same setup).")


# ------------------------------------------------------------------------------------------------ specs


class Spec(BaseModel):
    """A command's whole spec: its sections, each a table of a config file."""

    model_config = ConfigDict(extra="forbid", defer_build=True)
    command: ClassVar[str] = "run"
    # the command's own config options: --config and --print-config (config_file), --config-from RUN.json
    config_file: ClassVar[bool] = True
    config_from: ClassVar[bool] = False
    # sections left out of the recorded spec and of --print-config's setup (where the result goes)
    not_setup: ClassVar[tuple[str, ...]] = ("outputs",)

    @classmethod
    def sections(cls) -> dict[str, type[Section]]:
        """Each section's table name -> its model, in order."""
        return {name: f.annotation for name, f in cls.model_fields.items()}  # type: ignore[misc]

    @classmethod
    def fields(cls) -> dict[str, tuple[str, Any]]:
        """Each setting's name -> (its section's table, its FieldInfo), in the command's order."""
        return {name: (table, fi) for table, sec in cls.sections().items() for name, fi in sec.model_fields.items()}

    @classmethod
    def of(cls, flat: dict[str, Any], *, where: str = "") -> Self:
        """The spec from settings by name (a command's parsed options, ``measure``'s keywords); a name no section
        has, or a value out of bounds, is one UserError line naming the option (or ``where``'s key)."""
        owners = cls.fields()
        unknown = [k for k in flat if k not in owners]
        if unknown:
            raise UserError(f"{where or 'spec'}: no setting named {', '.join(map(repr, unknown))}"
                            f"{_close(unknown[0], owners)}")  # fmt: skip
        tables: dict[str, dict[str, Any]] = {t: {} for t in cls.sections()}
        for k, v in flat.items():
            tables[owners[k][0]][k] = _located(k, owners[k][1], v, None)
        return cls.validated(tables, where=where)

    @classmethod
    def validated(cls, tables: dict[str, Any], *, where: str = "") -> Self:
        """The spec from its tables (a config file's), strictly (nothing coerced: ``True`` is no ``max_new_tokens``),
        every error one line naming its key or option."""
        try:
            return cls.model_validate(tables, strict=True)
        except ValidationError as e:
            raise UserError(describe(e, cls, where)) from None

    @classmethod
    def checked(cls, tables: dict[str, Any], *, where: str, base: Path | None = None) -> dict[str, dict[str, Any]]:
        """A config file's tables checked key by key (only the keys it sets: a required setting may come from the
        command line), strictly: a value must be of its field's type already (``true`` is no integer, ``"5"`` no
        number, ``"yes"`` no boolean; an integer is taken where a number is asked). Every error is one line naming
        the file, the key and the type expected. ``base``: the folder a relative path in the file is read from (the
        config file's own; None: the working folder)."""
        sections, out = cls.sections(), {}  # type: dict[str, type[Section]], dict[str, dict[str, Any]]
        for table, values in tables.items():
            if not isinstance(values, dict):
                raise UserError(f"{where}: '{table}' is outside a table; settings go in tables ({', '.join(sections)})")
            if table not in sections:
                raise UserError(f"{where}: [{table}]: no such table{_close(table, sections)}")
            fields = sections[table].model_fields
            for key, value in values.items():
                if key not in fields:
                    raise UserError(f"{where}: [{table}] {key}: no such key{_close(key, fields)}")
                try:
                    located = _located(key, fields[key], value, base, label=f"{where}: [{table}] {key}")
                    kept: Any = _adapter(fields[key]).validate_python(located, strict=True)
                except ValidationError as e:
                    raise UserError(describe(e, cls, where, loc=(table, key))) from None
                if kept == [] and is_comma(fields[key]):  # no option spells it
                    raise UserError(f"{where}: [{table}] {key}: an empty list; leave the key out for the default")
                out.setdefault(table, {})[key] = kept
        return out

    @model_validator(mode="after")
    def _rules(self) -> Self:
        """The settings' cross-field rules (:mod:`llmbench.spec.rules`): what they resolve is set (``--compile``'s
        static cache), what they refuse is one UserError line, for every way a spec is made."""
        from llmbench.spec import rules

        owners = self.fields()
        kept = [t for t, sec in self.sections().items() if not sec.lists]  # a grid's lists are not the settings
        values = {k: v for t in kept for k, v in getattr(self, t).model_dump().items()}
        given = {n: option_of(n, owners[n][1]) for n in self.given() if n in values}
        for name, value in rules.resolved(values).items():
            setattr(getattr(self, owners[name][0]), name, value)
            values[name] = value
        rules.check(values, given)
        return self

    @classmethod
    def defaults(cls) -> Self:
        """The spec at its declared defaults, unvalidated, a required setting left out: what a command's keywords
        in the API default to (``llmbench.measure_load``'s ``arrival`` is load's ``[arrivals] arrival``)."""
        sections: dict[str, Any] = {t: sec.model_construct() for t, sec in cls.sections().items()}
        return cls.model_construct(**sections)

    def given(self) -> frozenset[str]:
        """The settings given when this spec was made (an option, a file's key, a keyword) and not to their
        default: a printed config lists every setting, its defaults too."""
        sections = [getattr(self, t) for t in self.sections()]
        return frozenset(n for sec in sections for n in sec.model_fields_set
                         if getattr(sec, n) != type(sec).model_fields[n].default)  # fmt: skip

    def flat(self) -> dict[str, Any]:
        """Every setting by name (the command line's namespace)."""
        return {k: v for sec in self.sections() for k, v in getattr(self, sec).model_dump().items()}

    def setup(self) -> dict[str, Any]:
        """The recorded spec: the tables that make the setup, None values left out (TOML has no null), URLs and
        command lines without their secrets (a run JSON and a printed config are shared)."""
        return {t: {k: _plain(k, v) for k, v in getattr(self, t).model_dump().items() if v is not None}
                for t in self.sections() if t not in self.not_setup}  # fmt: skip


_URLS = ("endpoint", "metrics_url", "ray")
_COMMANDS = ("base", "head", "worker", "build", "server_command")  # ab's sides, bisect's worker options and build
# command, run's --server-command


def _adapter(fi: Any) -> TypeAdapter[Any]:
    """One field's type with its bounds, to check a single value (a config file's key) against."""
    return TypeAdapter(Annotated[fi.annotation, fi])


# string settings that may name a local file or folder (else a hub id): read from a config file's folder when there
PATH_LIKE = ("model", "tokenizer")


def _is_path(annotation: Any) -> bool:
    return annotation is Path or Path in getattr(annotation, "__args__", ())


def _located(name: str, fi: Any, value: Any, base: Path | None, label: str | None = None) -> Any:
    """A config file's value as its field takes it: a path (a TOML string) as a Path, relative to ``base``; a comma
    list's text (``--threads 1,2``) as its items (``label``: what an error names, the option by default)."""
    if is_comma(fi) and isinstance(value, str):
        return comma_items(label or option_of(name, fi), fi, value)
    if _is_path(fi.annotation) and isinstance(value, str):
        path = Path(value).expanduser()
        return base / path if base is not None and not path.is_absolute() else path
    if name in PATH_LIKE and base is not None and isinstance(value, str) and "://" not in value:
        path = Path(value).expanduser()
        if not path.is_absolute() and (base / path).exists():  # a folder beside the file; else a hub id as given
            return str(base / path)
    return value


def is_comma(fi: Any) -> bool:
    """True for a list setting given as one comma-separated option (``setting(..., comma=True)``)."""
    return bool((fi.json_schema_extra or {}).get("comma"))


def comma_list(text: str, option: str) -> list[str]:
    """``"a, b"`` -> ``["a", "b"]``; an empty item or one listed twice is one UserError line naming ``option``."""
    items = [t.strip() for t in text.split(",")]
    if any(not t for t in items):
        raise UserError(f"{option} '{text}' has an empty item; give a comma-separated list such as a,b")
    if len(set(items)) != len(items):
        raise UserError(f"{option} '{text}' lists a value twice")
    return items


def comma_items(option: str, fi: Any, text: str) -> list[Any]:
    """``"1,2"`` as the list field ``fi``'s items, each of its item type (``[1, 2]``; bounds are the field's to
    check); an empty item, a value listed twice or one not of the type is one UserError line naming ``option``."""
    import typing

    items = comma_list(text, option)
    ann = fi.annotation
    listed = ann if typing.get_origin(ann) is list else next(a for a in typing.get_args(ann)
                                                             if typing.get_origin(a) is list)  # fmt: skip
    item = typing.get_args(listed)[0]
    if typing.get_origin(item) is Annotated:  # a bounded item: its type here, the field checks the bounds
        item = typing.get_args(item)[0]
    try:
        return [TypeAdapter(item).validate_python(t) for t in items]
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        said = _EXPECTED.get(err["type"]) or err["msg"].lower()
        where = f" (in '{text}')" if len(items) > 1 else ""
        raise UserError(f"{option}: {said}, not {err.get('input')!r}{where}") from None


def _plain(name: str, v: Any) -> Any:
    """A value as a run JSON or a printed config may show it: a URL without credentials or query, a command line
    without the values of its secret options (``--token X``, ``HF_TOKEN=...``), a local path made absolute."""
    from llmbench.core.redact import redact_command, redact_url, scrub

    if name in _URLS and isinstance(v, str):
        return redact_url(v)
    if name in _COMMANDS and isinstance(v, str):
        import shlex

        try:
            return redact_command(shlex.split(v))
        except ValueError:  # unbalanced quotes: its URLs go at least
            return scrub(v)
    if isinstance(v, Path) or (name in PATH_LIKE and isinstance(v, str) and "://" not in v):
        return _absolute(str(v))
    return v


def _absolute(given: str) -> str:
    """A local file or folder as an absolute path, so that a printed config or a run's record reads the same from
    any folder; anything else (a shipped prompt set's name, a hub id) as given."""
    path = Path(given).expanduser()
    try:
        return str(path.resolve()) if not path.is_absolute() and path.exists() else given
    except OSError:  # a name too long for a path, a loop of links: not a local file
        return given


def _close(name: str, names: Any) -> str:
    import difflib

    match = difflib.get_close_matches(name, list(names), n=1)
    return f" (did you mean '{match[0]}'?)" if match else ""


def option_of(name: str, fi: Any) -> str:
    """The option a field is on the command line: ``--think-time`` for ``think_time_s``."""
    extra = fi.json_schema_extra or {}
    if extra.get("argument"):
        return name.upper()
    flag = extra.get("flag")
    return flag.split("/")[0] if flag else "--" + name.replace("_", "-")


def describe(e: ValidationError, spec: type[Spec], where: str = "", loc: tuple[str, ...] = ()) -> str:
    """A pydantic error as one line: the option (``--max-new-tokens``) or, from a file, ``FILE: [table] key``
    (``loc``: where the value was, when the error does not say)."""
    fields = spec.fields()
    err = e.errors(include_url=False)[0]
    at = [str(p) for p in (*loc, *err["loc"]) if not isinstance(p, int)]  # a list's item: its field
    key = at[-1] if at else ""
    if where:
        name = f"{where}: [{at[0]}] {'.'.join(at[1:])}" if len(at) > 1 else f"{where}: [{key}]"
    else:
        name = option_of(key, fields[key][1]) if key in fields else key
    if err["type"] == "extra_forbidden":
        table = at[0] if len(at) > 1 else ""
        known = spec.sections()[table].model_fields if table in spec.sections() else spec.sections()
        return f"{name}: no such key{_close(key, known)}"
    got = err.get("input")
    shown = "" if isinstance(got, dict) else f", not {got!r}"
    bounds = _bounds(fields[key][1]) if key in fields and not where else ""
    text = bounds if bounds and err["type"] in _BOUND_ERRORS else _bound_text(err) or _EXPECTED.get(err["type"]) \
        or err["msg"].lower()  # fmt: skip
    return f"{name}{'' if bounds or (_bound_text(err) and not where) else ':'} {text}{shown}"


# a value of the wrong type (strict: nothing is coerced), said as the type expected
_EXPECTED = {
    "int_type": "expected an integer",
    "int_from_float": "expected an integer",
    "int_parsing": "expected an integer",
    "float_type": "expected a number",
    "bool_type": "expected true or false",
    "string_type": "expected a string",
    "list_type": "expected a list",
    "is_instance_of": "expected a path (a string)",
}
_BOUND_ERRORS = ("greater_than_equal", "greater_than", "less_than_equal", "less_than", "finite_number")


def _bounds(fi: Any) -> str:
    """'must be 1 to 4,096' (or 'above 0 up to ...') for a field bounded on both sides, else ''."""
    low = next((m for m in fi.metadata if hasattr(m, "ge") or hasattr(m, "gt")), None)
    high = next((m for m in fi.metadata if hasattr(m, "le")), None)
    if low is None or high is None:
        return ""
    if hasattr(low, "gt"):
        return f"must be above {low.gt:,} up to {high.le:,}"
    return f"must be {low.ge:,} to {high.le:,}"


def _bound_text(err: Any) -> str:
    ctx = err.get("ctx") or {}
    words = {"greater_than_equal": "at least", "greater_than": "above", "less_than_equal": "at most",
             "less_than": "below"}  # fmt: skip
    for kind, word in words.items():
        if err["type"] == kind:
            bound = next(iter(ctx.values()))
            return f"must be {word} {bound:,}" if isinstance(bound, int | float) else ""
    if err["type"] == "finite_number":
        return "must be a finite number"
    return ""


def view(section: type[Section], *keep: str, **changes: Any) -> type[Section]:
    """``section`` narrowed to the fields ``keep`` (all when none), in that order, with other defaults or help:
    ``changes`` maps a field to its new default, or to ``{"default": ..., "help": ...}``. Types and bounds stay."""
    names = keep or tuple(section.model_fields)
    fields: dict[str, Any] = {}
    for name in names:
        fi = copy.copy(section.model_fields[name])
        change = changes.get(name, {})
        change = change if isinstance(change, dict) else {"default": change}
        if "default" in change:
            fi.default = change["default"]
        if change.get("required"):
            fi.default = PydanticUndefined
        if "help" in change:
            fi.description = change["help"]
        fields[name] = (fi.annotation, fi)
    model = create_model(f"{section.__name__}View", __base__=Section, __doc__=section.__doc__, **fields)
    model.table = section.table
    return model


def combine(table: str, *parts: type[Section], doc: str | None = None) -> type[Section]:
    """One table of several sections' fields (views of shared sections and a command's own), in order."""
    fields = {n: (fi.annotation, copy.copy(fi)) for part in parts for n, fi in part.model_fields.items()}
    model = create_model(f"{table.title().replace('_', '')}Section", __base__=Section,  # type: ignore[call-overload]
                         __doc__=doc or parts[0].__doc__, **fields)  # fmt: skip
    model.table = table
    return model


def spec(name: str, command: str, *sections: type[Section], doc: str = "") -> type[Spec]:
    """A command's spec class from its sections (each a table: two views of one section can't share a spec)."""
    fields = {s.table: (s, Field(default_factory=s)) for s in sections}
    made = create_model(name, __base__=Spec, __doc__=doc, **fields)  # type: ignore[call-overload]
    made.command = command
    return made


class RunSpec(Spec):
    """``llmbench run`` and :func:`llmbench.measure`: everything one run is measured with."""

    config_from: ClassVar[bool] = True

    prompts: PromptsSection = Field(default_factory=PromptsSection)
    model: ModelSection = Field(default_factory=ModelSection)
    server: ServerSection = Field(default_factory=ServerSection)
    arrivals: ArrivalsSection = Field(default_factory=ArrivalsSection)
    requests: RequestsSection = Field(default_factory=RequestsSection)
    levers: LeversSection = Field(default_factory=LeversSection)
    reader: ReaderSection = Field(default_factory=ReaderSection)
    outputs: OutputsSection = Field(default_factory=OutputsSection)


def read_toml(path: Path, option: str = "--config") -> dict[str, Any]:
    """A config file's tables (``tomllib``); UserError in one line for a missing file or one that is not TOML."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10: the same parser, as the tomli package
        import tomli as tomllib  # type: ignore[no-redef,unused-ignore]

    try:
        return tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise UserError(f"{option} {path}: {e.strerror or e}") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise UserError(f"{option} {path}: not TOML ({e})") from None


def check_fields(section: type[Section], values: Any) -> None:
    """UserError in one line, naming the option, when a field of ``values`` (an object with ``section``'s field
    names as attributes, e.g. RunOptions) is out of ``section``'s bounds or of the wrong type."""
    got = {k: getattr(values, k) for k in section.model_fields if hasattr(values, k)}
    try:
        section.model_validate(got)
    except ValidationError as e:
        raise UserError(describe(e, spec("Checked", "", section))) from None


def check_value(section: type[Section], name: str, value: Any) -> None:
    """UserError in one line naming the option when ``value`` is not of ``section``'s field ``name``'s type or
    bounds (a resolved option type's value checked where no spec made it: a sweep's setup, the API's)."""
    try:
        _adapter(section.model_fields[name]).validate_python(value)
    except ValidationError as e:
        raise UserError(describe(e, spec("Checked", "", section), loc=(name,))) from None


def default(section: type[Section], name: str) -> Any:
    """A field's declared default (what the option types' own defaults read)."""
    return section.model_fields[name].default
