"""The command line: parse options, call the core, render. Heavy modules are imported inside commands.

Every command translates flags into llmbench's option types (the public API's), calls a driver or an API
function, and renders the result; nothing is measured here.
"""

from __future__ import annotations

import errno
import os
import sys
from contextlib import contextmanager
from dataclasses import fields
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.core.errors import UserError
from llmbench.core.version import __version__
from llmbench.options import DEFAULT_MODEL

app = typer.Typer(
    help="Measure how long a language model makes a person wait: time to first token (TTFT) and time per "
    "output token (TPOT).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


class DType(str, Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Weights(str, Enum):
    pretrained = "pretrained"
    random = "random"


class Cache(str, Enum):
    dynamic = "dynamic"
    static = "static"


class Attn(str, Enum):
    eager = "eager"
    sdpa = "sdpa"
    flash_attention_2 = "flash_attention_2"
    flex_attention = "flex_attention"


class Quantize(str, Enum):
    none = "none"
    int8 = "int8"
    int8_dynamic = "int8-dynamic"


class CompareFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


class ExportFormat(str, Enum):
    csv = "csv"
    parquet = "parquet"


class Stat(str, Enum):
    mean = "mean"
    p50 = "p50"
    p90 = "p90"
    gaps = "gaps"  # TPOT from per-token gaps paired by position (TTFT, E2E: p50)


class RankBy(str, Enum):
    mean = "mean"
    p50 = "p50"


# Options that several commands share, declared once.
PromptsArg = Annotated[
    Path,
    typer.Argument(
        help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl). Blank lines and # comments '
        "are skipped."
    ),
]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help=f"Hub id, local folder or .gguf file (default: {DEFAULT_MODEL})."),
]
WeightsOpt = Annotated[
    Weights, typer.Option(help="random: the real architecture with random weights (no download; timings real).")
]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")]
DTypeOpt = Annotated[DType, typer.Option(help="auto = fastest on the device.")]
ThreadsOpt = Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: torch's choice).")]
MaxNewTokensOpt = Annotated[int, typer.Option(help="Tokens to generate per request at most.")]
IgnoreEosOpt = Annotated[
    Optional[bool],
    typer.Option("--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens. Default: on with random."),
]
WarmupOpt = Annotated[int, typer.Option(help="Unmeasured requests (per setup) before the measured ones.")]
SystemPromptOpt = Annotated[Optional[str], typer.Option(help="System message for every prompt.")]
NoChatTemplateOpt = Annotated[bool, typer.Option("--no-chat-template", help="Send the raw prompt text.")]
TrustRemoteCodeOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code.")]
AllowPickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow pickle (.bin) weights in a folder.")]
AllowOffloadOpt = Annotated[
    bool, typer.Option("--allow-offload", help="Run even when weights are offloaded to disk/CPU (recorded).")
]
DeviceMapOpt = Annotated[
    Optional[str],
    typer.Option(help="Let accelerate place the weights: auto, balanced, sequential or a JSON object (offloading "
                 "is still refused)."),
]  # fmt: skip
AttnOpt = Annotated[Optional[Attn], typer.Option(help="Attention kernel (default: the model's).")]
_QUANTIZE_HELP = (
    "int8: int8 weights per output channel, activations in --dtype; "
    "int8-dynamic: int8 weights and activations, float32 only (CPU)."
)
QuantizeOpt = Annotated[Quantize, typer.Option(help=_QUANTIZE_HELP)]
EndpointOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Measure an OpenAI-compatible server instead (vLLM, llama.cpp, Ollama, llmbench serve): its base URL, "
        "e.g. http://127.0.0.1:8000/v1. --model then names the model to send."
    ),
]
ReprobeOpt = Annotated[
    bool,
    typer.Option("--reprobe", help="--dtype auto: measure the dtypes again instead of this machine's cached choice."),
]
ArrivalOpt = Annotated[
    str, typer.Option(help="Open loop: gaps between arrivals: poisson, constant or gamma:CV (CV > 1 burstier).")
]
RequestsOpt = Annotated[Optional[int], typer.Option(help="Open loop: how many requests to send.")]
DurationOpt = Annotated[Optional[float], typer.Option(help="Open loop: send for this many seconds (default 30).")]
WorkersOpt = Annotated[int, typer.Option(help="Open loop: client processes sharing the schedule.")]
RayOpt = Annotated[
    Optional[str],
    typer.Option(help="Open loop: run the --workers as Ray tasks on this cluster (address, 'auto' or 'local'; "
                 "pip install 'llmbench\\[ray]')."),
]  # fmt: skip
EngineOpt = Annotated[
    str,
    typer.Option(help="The engine that generates, fed the same token ids: transformers, llama.cpp, openvino or "
                 "onnxruntime (pip install 'llmbench\\[llamacpp|openvino|onnxruntime]')."),
]  # fmt: skip
PrecisionOpt = Annotated[
    Optional[str],
    typer.Option(help="--engine's weight format, converted from a Hugging Face folder: llama.cpp f16, q8_0, q4_k_m, "
                 "...; openvino fp16, int8, int4; onnxruntime fp32, int8, int4 (default 8-bit; a .gguf runs as is)."),
]  # fmt: skip
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
SyntheticOpt = Annotated[
    Optional[str],
    typer.Option(
        help="TOKENSxCOUNT, e.g. 512x20: COUNT different prompts of exactly TOKENS tokens each (chat template "
        "included), cut from a text llmbench ships, reproducible from --seed."
    ),
]
PromptFormatOpt = Annotated[
    Optional[str],
    typer.Option(help="How to read PROMPTS: txt, jsonl, json, sharegpt, csv, parquet, arrow (a save_to_disk folder); "
                 "default: by its extension.", rich_help_panel="Datasets"),
]  # fmt: skip
PromptColumnOpt = Annotated[
    Optional[str], typer.Option(help="The dataset's column holding the prompt (default: prompt).",
                                rich_help_panel="Datasets"),
]  # fmt: skip
OutputLenColumnOpt = Annotated[
    Optional[str], typer.Option(help="The dataset's column of output lengths: each request asks for exactly its "
                                "own (EOS ignored).", rich_help_panel="Datasets"),
]  # fmt: skip
MinPromptTokensOpt = Annotated[
    Optional[int], typer.Option(help="Keep prompts of at least this many tokens, as the run counts them.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
MaxPromptTokensOpt = Annotated[
    Optional[int], typer.Option(help="Keep prompts of at most this many tokens, as the run counts them.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
NumPromptsOpt = Annotated[
    Optional[int], typer.Option(help="Sample this many entries (drawn from --seed) among those the filters keep.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
RateOpt = Annotated[
    Optional[float],
    typer.Option(help="With --endpoint: open loop, requests per second on a schedule drawn in advance."),
]
TraceOpt = Annotated[
    Optional[Path], typer.Option(help="With --endpoint: replay this trace: its times are the schedule, its rows "
                                 "the prompts (exact lengths, shared blocks).", rich_help_panel="Traces"),
]  # fmt: skip
TraceFormatOpt = Annotated[
    Optional[str], typer.Option(help="mooncake (JSONL, ms), burstgpt (CSV, s) or azure (CSV, date and time).",
                                rich_help_panel="Traces"),
]  # fmt: skip
TimeScaleOpt = Annotated[
    Optional[float], typer.Option(help="Multiply the trace's times (0.5: twice as fast). Default 1.",
                                  rich_help_panel="Traces"),
]  # fmt: skip
TraceStartOpt = Annotated[
    Optional[float], typer.Option(help="Replay from this second of the trace.", rich_help_panel="Traces")
]
TraceEndOpt = Annotated[
    Optional[float], typer.Option(help="Replay until this second of the trace.", rich_help_panel="Traces")
]
PrefixGroupsOpt = Annotated[
    Optional[int], typer.Option(help="Prompts in N groups sharing a prefix each (with --prefix-tokens, "
                                "--suffix-tokens, --num-prompts).", rich_help_panel="Shared prefixes"),
]  # fmt: skip
PrefixTokensOpt = Annotated[
    Optional[int], typer.Option(help="Tokens of each group's shared prefix.", rich_help_panel="Shared prefixes")
]
SuffixTokensOpt = Annotated[
    Optional[int], typer.Option(help="Tokens of each prompt's own suffix.", rich_help_panel="Shared prefixes")
]
GroupDistOpt = Annotated[
    str, typer.Option(help="How prompts fall into groups: uniform, zipf or zipf:A (from --seed).",
                      rich_help_panel="Shared prefixes"),
]  # fmt: skip
ApiKeyEnvOpt = Annotated[Optional[str], typer.Option(help="With --endpoint: the variable holding the API key.")]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", help="With --endpoint: a request that receives nothing for this long fails (a stalled "
                 "server), s."),
]  # fmt: skip
EndpointTokenizerOpt = Annotated[
    Optional[str], typer.Option(help="With --endpoint: hub id, folder or .gguf to count tokens without usage.")
]
RunSeedOpt = Annotated[
    int, typer.Option(help="Seed for --sample (each request derives its own), --synthetic, --rate's schedule, "
                      "--num-prompts and --prefix-groups.")
]  # fmt: skip
TurnsOpt = Annotated[
    int, typer.Option(help="Each prompt opens a conversation of this many turns, each sending the conversation so "
                      "far with the model's replies.", rich_help_panel="Sessions")
]  # fmt: skip
ThinkTimeOpt = Annotated[
    float, typer.Option(help="Seconds a session waits after a reply before its next turn.", rich_help_panel="Sessions")
]
RunOutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Run JSON (default: results/<UTC time>-<model>-<device>.json)."),
]
DataArg = Annotated[
    Path,
    typer.Argument(
        help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl); or a dataset: ShareGPT '
        ".json, .jsonl, .csv, .parquet, a save_to_disk folder (see Datasets)."
    ),
]
DataSeedOpt = Annotated[int, typer.Option(help="Seed of --num-prompts.", rich_help_panel="Datasets")]
DataTokenizerOpt = Annotated[
    Optional[str], typer.Option(help="Hub id, folder or .gguf that counts prompts for the dataset filters (and "
                                "ShareGPT replies' lengths).", rich_help_panel="Datasets"),
]  # fmt: skip
AbOutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Folder for base.json and head.json (default: results/ab-<UTC time>)."),
]
AbGateStatOpt = Annotated[
    Stat,
    typer.Option(
        help="Statistic the gates test: the median by default, robust to a pair a burst hit; "
        "gaps: TPOT from per-token gaps paired by position (TTFT, E2E: the median)."
    ),
]
HistoryOpt = Annotated[
    Optional[str],
    typer.Option(envvar="LLMBENCH_HISTORY", show_envvar=True,
                 help="Record the result in the history: a URL (sqlite:///FILE.db, postgresql://...), a .db file, or "
                 "nothing for the default file (~/.local/share/llmbench/history.db)."),
]  # fmt: skip
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output file.")]

# run's flags that belong to one mode only: refused in the other, in one line
IN_PROCESS_ONLY = (
    *("weights", "device", "dtype", "reprobe", "threads", "device_map", "allow_offload", "allow_pickle", "engine"),
    "precision",
    "trust_remote_code",
    *("compile_", "quantize", "attn", "cache", "truncate", "no_chat_template"),
)
ENDPOINT_ONLY = ("concurrency", "api_key_env", "tokenizer", "rate", "arrival", "requests", "duration", "workers", "ray",
                 "server_metrics", "metrics_url", "timeout_s")  # fmt: skip
_SERVER_METRICS_HELP = (
    "With --endpoint: scrape the server's Prometheus /metrics during the run (gauges' mean and max, counters' "
    "deltas, into the run JSON)."
)
ServerMetricsOpt = Annotated[bool, typer.Option("--server-metrics", help=_SERVER_METRICS_HELP)]
MetricsUrlOpt = Annotated[
    Optional[str],
    typer.Option(help="The metrics page to scrape (default: the endpoint's host, /metrics); implies --server-metrics."),
]


def _metrics_url(endpoint: str, server_metrics: bool, metrics_url: str | None) -> str | None:
    from llmbench.options import default_metrics_url

    return metrics_url if metrics_url is not None else default_metrics_url(endpoint) if server_metrics else None


def _version(value: bool) -> None:
    if value:
        typer.echo(f"llmbench {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
) -> None:
    """llmbench: TTFT and TPOT you can defend."""


@contextmanager
def _user_errors():
    """UserError -> one line on stderr, exit 2."""
    try:
        yield
    except UserError as e:
        _die(str(e), 2)


def _die(message: str, code: int) -> None:
    from llmbench.core.redact import scrub  # the last guard: no URL's credentials or query on the error line

    typer.echo(f"llmbench: error: {' '.join(scrub(message).split())}", err=True)
    raise typer.Exit(code)


def _option(ctx: typer.Context, name: str) -> str:
    """The option as the user spells it (``timeout_s`` is ``--timeout``), from the command's own declaration."""
    for param in ctx.command.params:
        if param.name == name and param.opts:
            return max(param.opts, key=len)
    return _flag(name)


def _flag(name: str) -> str:
    return "--" + name.rstrip("_").replace("_", "-")


def _refuse_given(ctx: typer.Context, names: tuple[str, ...], why: str) -> None:
    """UserError naming every flag of ``names`` the user gave (on the command line or in the environment)."""
    given = [
        _option(ctx, n)
        for n in names
        if getattr(ctx.get_parameter_source(n), "name", None) in ("COMMANDLINE", "ENVIRONMENT")
    ]
    if given:
        raise UserError(f"{', '.join(given)}: {why}")


def _pick(cls: Any, args: dict[str, Any], **overrides: Any) -> Any:
    """An options dataclass from the command's arguments of the same names (enums as their values)."""
    values = {f.name: args[f.name] for f in fields(cls) if f.name in args}
    values.update(overrides)
    return cls(**{k: v.value if isinstance(v, Enum) else v for k, v in values.items()})


def _interrupted(e: Any, resumable: bool) -> None:
    from llmbench.present import terminal as display

    done = sum(len(r.requests) for r in e.runs)
    where = f" saved in {e.path}" if e.path else ""
    resume = f" Resume with:\n  {_resume_command(e.path)}" if e.path and resumable else ""
    display.err.print(f"interrupted by {e.signal_name}: {done} requests{where} (complete: false).{resume}",
                      markup=False, soft_wrap=True)  # fmt: skip
    _said["interrupted"] = True
    raise typer.Exit(e.exit_code)


_said: dict[str, bool] = {}  # what main() need not say again


@app.command()
def run(
    ctx: typer.Context,
    prompts: Annotated[
        Optional[Path],
        typer.Argument(
            help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl); or a dataset: ShareGPT '
            ".json, .jsonl, .csv, .parquet, a save_to_disk folder (see Datasets). Or --synthetic instead."
        ),
    ] = None,
    synthetic: SyntheticOpt = None,
    prompt_format: PromptFormatOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_len_column: OutputLenColumnOpt = None,
    min_prompt_tokens: MinPromptTokensOpt = None,
    max_prompt_tokens: MaxPromptTokensOpt = None,
    num_prompts: NumPromptsOpt = None,
    prefix_groups: PrefixGroupsOpt = None,
    prefix_tokens: PrefixTokensOpt = None,
    suffix_tokens: SuffixTokensOpt = None,
    group_dist: GroupDistOpt = "uniform",
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    engine: EngineOpt = "transformers",
    precision: PrecisionOpt = None,
    endpoint: EndpointOpt = None,
    api_key_env: ApiKeyEnvOpt = None,
    timeout_s: TimeoutOpt = 600.0,
    concurrency: Annotated[int, typer.Option(help="With --endpoint: requests in flight at once.")] = 1,
    tokenizer: EndpointTokenizerOpt = None,
    rate: RateOpt = None,
    trace: TraceOpt = None,
    trace_format: TraceFormatOpt = None,
    time_scale: TimeScaleOpt = None,
    start: TraceStartOpt = None,
    end: TraceEndOpt = None,
    arrival: ArrivalOpt = "poisson",
    requests: RequestsOpt = None,
    duration: DurationOpt = None,
    workers: WorkersOpt = 1,
    ray: RayOpt = None,
    server_metrics: ServerMetricsOpt = False,
    metrics_url: MetricsUrlOpt = None,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    reprobe: ReprobeOpt = False,
    threads: ThreadsOpt = None,
    max_new_tokens: MaxNewTokensOpt = 256,
    ignore_eos: IgnoreEosOpt = None,
    warmup: WarmupOpt = 1,
    repeats: Annotated[int, typer.Option(help="Times to go round the whole prompt list.")] = 1,
    sample: Annotated[bool, typer.Option("--sample", help="Sample instead of greedy decoding.")] = False,
    seed: RunSeedOpt = 0,
    turns: TurnsOpt = 1,
    think_time: ThinkTimeOpt = 0.0,
    temperature: Annotated[float, typer.Option(help="Temperature for --sample.")] = 1.0,
    top_p: Annotated[float, typer.Option(help="Top-p for --sample.")] = 1.0,
    system_prompt: SystemPromptOpt = None,
    no_chat_template: NoChatTemplateOpt = False,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    output: RunOutputOpt = None,
    overwrite: OverwriteOpt = False,
    history: HistoryOpt = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue this incomplete run JSON (same setup).")] = None,
    truncate: Annotated[bool, typer.Option("--truncate", help="Cut prompts longer than the context.")] = False,
    attn: AttnOpt = None,
    cache: Annotated[Cache, typer.Option(help="KV cache: dynamic, or static (preallocated).")] = Cache.dynamic,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the decode step (static cache).")] = False,
    quantize: QuantizeOpt = Quantize.none,
    quiet: QuietOpt = False,
) -> None:
    """Stream every prompt through a model in this process (or a server: --endpoint), stamp every token, write a
    run JSON."""
    from llmbench.drivers.run import run as run_driver
    from llmbench.options import RunOptions

    args = locals()
    with _user_errors():
        from llmbench.workloads import sessions

        sessions.check(turns, think_time)  # before anything loads: --turns 10**20 would exhaust memory later
        args["trace_rows"] = _read_trace(args)
        target = _run_target(ctx, args)
        ignore = (weights is Weights.random) if ignore_eos is None else ignore_eos
        cache_kind = "static" if compile_ else cache.value
        options = _pick(RunOptions, args, ignore_eos=ignore, chat_template=not no_chat_template,
                        think_time_s=think_time, cache=cache_kind, compile=compile_)  # fmt: skip
        prompt_set = _prompt_source(prompts, synthetic, seed, args)
        from llmbench.history.recording import check_url

        check_url(history)
        with _measuring(quiet) as (stop, reporter):
            coro = run_driver(prompt_set, target, options, output=output, overwrite=overwrite, default_dir="results",
                              resume=resume, stop=stop, reporter=reporter)  # fmt: skip
            result, path = _run_async(coro, resumable=True)
    _show_run(result, path, history)


def _show_run(result: Any, path: Path | None, history: str | None) -> None:
    """What `run` prints once the run is written: the table, the cost and server lines, the history entry."""
    from llmbench.present import terminal as display

    display.out.print(display.summary_table(result))
    for line in (display.workload_line(result.config), display.open_loop_line(result)):
        if line is not None:
            display.out.print(line, markup=False, soft_wrap=True)
    for line in display.cost_lines(result) + display.cache_lines(result) + display.server_lines(result):
        display.out.print(line, markup=False, soft_wrap=True)
    if result.client:
        display.info(display.client_line(result.client))
    display.out.print(f"wrote {path}", markup=False)
    with _user_errors():
        from llmbench.history.records import run_result

        _history_line(history, [run_result(result, path)] if path else [], str(path))


def _run_target(ctx: typer.Context, args: dict[str, Any]) -> Any:
    """What `run` measures: a server (--endpoint) or a model here, each refusing the other's options."""
    from llmbench.options import EndpointOptions, ModelOptions

    if args["endpoint"] is not None:
        _refuse_given(ctx, IN_PROCESS_ONLY, "in-process run options only; with --endpoint the server decides them")
        metrics = _metrics_url(args["endpoint"], args["server_metrics"], args["metrics_url"])
        return _pick(EndpointOptions, args, url=args["endpoint"], open_loop=_open_loop(ctx, args), metrics_url=metrics)
    _refuse_given(ctx, ENDPOINT_ONLY, "options of --endpoint runs only")
    return _pick(ModelOptions, args, model=args["model"] or DEFAULT_MODEL, quantize=_none(args["quantize"]))


def _read_trace(args: dict[str, Any]) -> Any:
    """--trace's rows (read before anything loads: a bad row is one line), or None."""
    from llmbench.workloads import trace

    if args["trace"] is None:
        for name in ("trace_format", "time_scale", "start", "end"):
            if args[name] is not None:
                raise UserError(f"--{name.replace('_', '-')} goes with --trace")
        return None
    if args["endpoint"] is None:
        raise UserError("a trace is replayed against a server: give --endpoint URL (and --tokenizer, the server's)")
    if args["prompts"] is not None or args["synthetic"] is not None or args["rate"] is not None:
        raise UserError("--trace makes the prompts and the schedule: drop PROMPTS, --synthetic and --rate")
    # what would choose or make other prompts, or send them again: the trace's rows are sent once each, at their time
    ignored = [_flag(k) for k in (*DATASET_OPTIONS, "prefix_groups", "prefix_tokens", "suffix_tokens")
               if args.get(k) is not None]  # fmt: skip
    ignored += ["--group-dist"] if args.get("group_dist", "uniform") != "uniform" else []
    ignored += ["--repeats"] if args["repeats"] != 1 else []
    if ignored:
        raise UserError(f"{', '.join(ignored)}: not with --trace, whose rows are the prompts, each sent once at its "
                        "time")  # fmt: skip
    if args["trace_format"] is None:
        raise UserError(f"--trace needs --trace-format ({', '.join(trace.FORMATS)})")
    spec = trace.TraceSpec(str(args["trace"]), args["trace_format"], 1.0 if args["time_scale"] is None
                           else args["time_scale"], args["start"], args["end"])  # fmt: skip
    return trace.read(spec)


def _open_loop(ctx: typer.Context, args: dict[str, Any]) -> Any:
    """--rate's schedule (or --trace's), or None (a closed loop: then its companions are refused)."""
    from llmbench.options import OpenLoop

    if args.get("trace_rows") is not None:
        _refuse_given(ctx, ("arrival", "requests", "duration", "workers", "ray"), "options of --rate, not --trace")
        return OpenLoop(rate_rps=1.0, trace=args["trace_rows"])
    if args["rate"] is None:
        _refuse_given(ctx, ("arrival", "requests", "duration", "workers", "ray"), "options of an open loop (--rate)")
        return None
    duration = args["duration"] if args["duration"] is not None or args["requests"] is not None else 30.0
    return OpenLoop(rate_rps=args["rate"], arrival=args["arrival"], requests=args["requests"], duration_s=duration,
                    seed=args["seed"], workers=args["workers"], ray=args["ray"])  # fmt: skip


def _record_file(url: str | None, path: Path) -> None:
    """Record the records a written file gives (a sweep's setups, a scan's points, a load test's rates)."""
    with _user_errors():
        from llmbench.history.recording import check_url
        from llmbench.history.records import results_of_file

        if check_url(url) is not None:
            _history_line(url, results_of_file(path), str(path))


def _history_line(url: str | None, results: Any, where: str) -> None:
    """Record a command's result in the history (its files are written already) and say so."""
    from llmbench.history.recording import after_write
    from llmbench.present import terminal as display

    line = after_write(url, results, where)
    if line:  # on stderr: stdout may be a report (ab --format markdown/json)
        display.err.print(line, markup=False, soft_wrap=True)


DATASET_OPTIONS = ("prompt_format", "prompt_column", "output_len_column", "min_prompt_tokens", "max_prompt_tokens",
                   "num_prompts")  # fmt: skip


def _prompt_source(prompts: Path | None, synthetic: str | None, seed: int, args: dict[str, Any] | None = None) -> Any:
    """A prompt file's prompts, the spec of synthetic ones (made once the tokenizer is loaded), or a dataset's
    spec (read at once; chosen once the tokenizer is loaded where the filters need it)."""
    from llmbench.workloads import dataset
    from llmbench.workloads.prompts import load_prompts
    from llmbench.workloads.synthetic import SyntheticSpec

    if args and args.get("trace_rows") is not None:
        return args["trace_rows"]  # the trace's rows: prompts made once --tokenizer is loaded
    if args and args.get("prefix_groups") is not None:
        return _prefix_groups(prompts, synthetic, seed, args)
    for name in ("prefix_tokens", "suffix_tokens"):
        if args and args.get(name) is not None:
            raise UserError(f"--{name.replace('_', '-')} goes with --prefix-groups")
    if args and args.get("group_dist") not in (None, "uniform"):
        raise UserError("--group-dist goes with --prefix-groups")
    if (prompts is None) == (synthetic is None):
        raise UserError("give either a prompt file or --synthetic TOKENSxCOUNT (or --endpoint with --trace)")
    given = {k: args[k] for k in DATASET_OPTIONS if args and args.get(k) is not None}
    if synthetic is not None:
        if given:
            raise UserError(f"--{next(iter(given)).replace('_', '-')} is for a prompt file or dataset, not --synthetic")
        return SyntheticSpec.parse(synthetic, seed)
    assert prompts is not None
    fmt = given.pop("prompt_format", None)
    if not given and not dataset.is_dataset(prompts, fmt):
        return load_prompts(prompts, as_lines=fmt == "txt")  # a prompt list: .txt, or .jsonl with a "prompt" field
    return dataset.DatasetSpec(str(prompts), format=fmt, seed=seed, **given)


def _prefix_groups(prompts: Path | None, synthetic: str | None, seed: int, args: dict[str, Any]) -> Any:
    """--prefix-groups' spec (the prompts are made once the tokenizer is loaded)."""
    from llmbench.workloads.prefixes import PrefixSpec

    if prompts is not None or synthetic is not None:
        raise UserError("--prefix-groups makes the prompts: drop PROMPTS and --synthetic")
    missing = [f"--{k.replace('_', '-')}" for k in ("prefix_tokens", "suffix_tokens", "num_prompts") if args[k] is None]
    if missing:
        raise UserError(f"--prefix-groups needs {', '.join(missing)}")
    dataset_only = [_flag(k) for k in DATASET_OPTIONS if k != "num_prompts" and args.get(k) is not None]
    if dataset_only:
        raise UserError(f"{', '.join(dataset_only)}: options of a dataset; --prefix-groups makes its own prompts")
    spec = PrefixSpec(args["prefix_groups"], args["prefix_tokens"], args["suffix_tokens"], args["num_prompts"],
                      args["group_dist"], seed)  # fmt: skip
    spec.validate()
    return spec


def _prompt_list(prompts: Path, seed: int, args: dict[str, Any], options: Any, tokenizer: str | None) -> Any:
    """``load``/``ab``: a prompt file, or a dataset chosen here, counted by ``tokenizer`` where it must be (a
    dataset's output lengths change ``options``: see :func:`llmbench.workloads.dataset.apply_lengths`)."""
    from llmbench.workloads import dataset

    source = _prompt_source(prompts, None, seed, args)
    return dataset.with_tokenizer(source, options, tokenizer) if isinstance(source, dataset.DatasetSpec) else source


def _none(q: Quantize) -> str | None:
    return None if q is Quantize.none else q.value


@contextmanager
def _measuring(quiet: bool):
    """The process-wide effects a measuring command opts into: signal handlers, a frozen gc, the progress bar."""
    from llmbench.core.process import frozen_gc, stop_on_signals
    from llmbench.present import terminal as display

    with stop_on_signals() as stop, frozen_gc(), display.reporter(quiet) as reporter:
        yield stop, reporter


def _run_async(coro: Any, resumable: bool = False) -> Any:
    from llmbench.core.errors import RunInterrupted

    try:
        import asyncio  # not at import: --help and the readers start faster without it

        return asyncio.run(coro)
    except RunInterrupted as e:
        _interrupted(e, resumable)


@app.command()
def sweep(
    prompts: PromptsArg,
    dtype: Annotated[str, typer.Option(help="Comma-separated dtypes: float32,bfloat16,float16.")] = "float32,bfloat16",
    threads: Annotated[Optional[str], typer.Option(help="Comma-separated thread counts, e.g. 1,2.")] = None,
    attn: Annotated[Optional[str], typer.Option(help="Comma-separated attention kernels, e.g. eager,sdpa.")] = None,
    cache: Annotated[str, typer.Option(help="Comma-separated KV caches: dynamic,static.")] = "dynamic",
    compile_: Annotated[bool, typer.Option("--compile", help="Also sweep torch.compile'd decoding.")] = False,
    quantize: Annotated[str, typer.Option(help="Comma-separated: none,int8,int8-dynamic.")] = "none",
    engine: Annotated[
        str, typer.Option(help="Comma-separated engines: transformers,llama.cpp,openvino,onnxruntime.")
    ] = "transformers",
    precision: Annotated[
        Optional[list[str]],
        typer.Option(
            help="ENGINE=P1,P2 (repeatable), e.g. llama.cpp=q8_0,q4_k_m; a bare P1,P2 applies to every "
            "engine but transformers (default: each engine's 8-bit, a .gguf as is)."
        ),
    ] = None,
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    device: DeviceOpt = "auto",
    max_new_tokens: MaxNewTokensOpt = 64,
    ignore_eos: IgnoreEosOpt = None,
    warmup: WarmupOpt = 1,
    rounds: Annotated[int, typer.Option(help="Rounds; each runs every setup once over all prompts.")] = 3,
    rank_by: Annotated[RankBy, typer.Option(help="Statistic that picks the best (p50: robust).")] = RankBy.mean,
    quality: Annotated[
        bool, typer.Option("--quality", help="Also measure KL divergence and agreement against float32.")
    ] = False,
    max_kld: Annotated[
        Optional[float], typer.Option(help="Setups above this mean KL divergence can't be best (implies --quality).")
    ] = None,
    system_prompt: SystemPromptOpt = None,
    no_chat_template: NoChatTemplateOpt = False,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder (default: results/sweep-<time>).")
    ] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Find the fastest setup: every combination of engine, precision, dtype, threads, attention, cache, compile and
    quantization, measured in interleaved rounds; TTFT and TPOT ranked apart."""
    from llmbench.drivers import sweep as sw
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.present import terminal as display
    from llmbench.workloads.prompts import load_prompts

    args = locals()
    with _user_errors():
        prompt_set = load_prompts(prompts)
        ignore = (weights is Weights.random) if ignore_eos is None else ignore_eos
        options = _pick(RunOptions, args, ignore_eos=ignore, repeats=rounds, chat_template=not no_chat_template)
        spec = _pick(ModelOptions, args, model=model or DEFAULT_MODEL, dtype="auto", threads=None, attn=None,
                     quantize=None, engine="transformers", precision=None)  # fmt: skip
        setups, skipped = sw.plan(spec, options, dtype=dtype, threads=threads, attn=attn, cache=cache,
                                  compile_=compile_, quantize=quantize, engine=engine, precision=precision)  # fmt: skip
        sw.check_gates(setups, options, prompt_set, max_kld)  # before the folder is made and the models load
        for why in skipped:
            display.warn(f"left out {why}")
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "sweep")
        from llmbench.history.recording import check_url

        check_url(history)
        with _measuring(quiet) as (stop, reporter):
            reporter.status(f"{len(setups)} setups x {rounds} rounds x {len(prompt_set.prompts)} prompts -> {out_dir}")
            the_sweep = sw.Sweep(setups, spec, options, out_dir, reporter=reporter, rank_by=rank_by.value,
                                 quality=quality, max_kld=max_kld)  # fmt: skip
            record = _run_async(_load_and_sweep(the_sweep, prompt_set, stop))
    for t in display.sweep_tables(record):
        display.print_wide(t)  # setups don't wrap, even in a CI log
    for line in display.sweep_verdicts(record):
        display.out.print(line, soft_wrap=True, markup=False)
    display.out.print(f"wrote {out_dir / 'sweep.json'} and {len(setups)} run files", markup=False)
    _record_file(history, out_dir / "sweep.json")


async def _load_and_sweep(the_sweep: Any, prompts: Any, stop: Any) -> dict:
    await the_sweep.load(prompts)
    return await the_sweep.run(prompts, stop)


@app.command()
def scan(
    ctx: typer.Context,
    prompt_tokens: Annotated[
        str, typer.Option(help="Prompt lengths for the TTFT curve, template included (comma list; '' for none).")
    ] = "64,256,1024",
    depth: Annotated[str, typer.Option(help="Context depths for the TPOT curve (comma list).")] = "0,512,2048",
    batch: Annotated[str, typer.Option(help="Batch sizes for the throughput curve (comma list).")] = "1,2,4,8",
    rounds: Annotated[int, typer.Option(help="Rounds; each visits every point, the order rotating.")] = 3,
    max_new_tokens: MaxNewTokensOpt = 32,
    prompts_per_point: Annotated[int, typer.Option(help="Different prompts per length or depth point.")] = 3,
    batch_prompt_tokens: Annotated[int, typer.Option(help="Length of each prompt of a batch.")] = 128,
    seed: Annotated[int, typer.Option(help="Seed of the synthetic prompts.")] = 0,
    warmup: WarmupOpt = 1,
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    reprobe: ReprobeOpt = False,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    quantize: QuantizeOpt = Quantize.none,
    engine: EngineOpt = "transformers",
    precision: PrecisionOpt = None,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    system_prompt: SystemPromptOpt = None,
    no_chat_template: NoChatTemplateOpt = False,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder (default: results/scan-<time>).")
    ] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """TTFT against prompt length, TPOT against context depth, throughput against batch size: controlled prompts,
    interleaved rounds, fitted curves."""
    from llmbench import engines
    from llmbench.drivers import scan as sc
    from llmbench.engines.hf import models
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.present import terminal as display

    args = locals()
    with _user_errors():
        if engines.engine_info(engine).name != "transformers" and batch == "1,2,4,8":
            display.warn(f"--engine {engine}: no batch points (batched generate() is transformers'); the default "
                         "--batch is left out")  # fmt: skip
            batch = ""
        points = sc.grid(sc.parse_values(prompt_tokens, "--prompt-tokens"), sc.parse_values(depth, "--depth"),
                         sc.parse_values(batch, "--batch"))  # fmt: skip
        given = {n for n in ("batch_prompt_tokens", "max_new_tokens")
                 if getattr(ctx.get_parameter_source(n), "name", None) in ("COMMANDLINE", "ENVIRONMENT")}  # fmt: skip
        sc.check_plan(points, rounds, prompts_per_point, batch_prompt_tokens, given)
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=True, warmup=warmup, repeats=rounds,
                             system_prompt=system_prompt, chat_template=not no_chat_template)  # fmt: skip
        options.validate()
        spec = _pick(ModelOptions, args, model=model or DEFAULT_MODEL, quantize=_none(quantize))
        engines.validate(spec)
        sc.check_context(points, models.context_length(spec), max_new_tokens, batch_prompt_tokens)  # before loading
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "scan")
        from llmbench.history.recording import check_url

        check_url(history)
        with _measuring(quiet) as (stop, reporter):
            the_scan = sc.Scan(points, spec, options, out_dir, prompts_per_point=prompts_per_point,
                               batch_prompt_tokens=batch_prompt_tokens, seed=seed, reporter=reporter)  # fmt: skip
            record = _run_async(the_scan.run_all(stop))
    for line in display.scan_lines(record):
        display.out.print(line, markup=False, soft_wrap=True)
    display.out.print(f"wrote {out_dir / 'scan.json'} and {len(points)} run files", markup=False)
    _record_file(history, out_dir / "scan.json")


@app.command()
def load(
    prompts: DataArg,
    endpoint: Annotated[str, typer.Option(help="The server's base URL, e.g. http://127.0.0.1:8000/v1.")],
    rates: Annotated[
        str, typer.Option(help="Offered rates, requests/s (comma list), or auto: search for the saturation point.")
    ] = "auto",
    slo: Annotated[
        Optional[list[str]],
        typer.Option(help="METRIC:pNN=LIMIT, e.g. ttft_ms:p90=1000 (repeatable; metrics: ttft_ms, tpot_ms, e2e_ms)."),
    ] = None,
    duration: Annotated[float, typer.Option(help="Seconds of arrivals per rate (unless --requests).")] = 30.0,
    requests: RequestsOpt = None,
    arrival: ArrivalOpt = "poisson",
    seed: Annotated[int, typer.Option(help="Seed of the arrival schedule (and of --num-prompts).")] = 0,
    workers: WorkersOpt = 1,
    ray: RayOpt = None,
    min_attainment: Annotated[
        float, typer.Option(help="A rate holds when this share of requests meets every SLO.")
    ] = 0.9,
    one_token_passes: Annotated[
        bool, typer.Option("--one-token-passes", help="A one-token answer (no TPOT) passes a TPOT limit.")
    ] = False,
    auto_start: Annotated[float, typer.Option(help="auto: the first rate tried (then doubled or halved).")] = 1.0,
    auto_steps: Annotated[int, typer.Option(help="auto: bisections after the ramp.")] = 3,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="The model name to send.")] = None,
    api_key_env: Annotated[Optional[str], typer.Option(help="The variable holding the API key.")] = None,
    timeout_s: Annotated[
        float,
        typer.Option("--timeout", help="A request that receives nothing for this long fails (a stalled server), s."),
    ] = 600.0,
    tokenizer: Annotated[Optional[str], typer.Option(help="Hub id, folder or .gguf to count tokens.")] = None,
    prompt_format: PromptFormatOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_len_column: OutputLenColumnOpt = None,
    min_prompt_tokens: MinPromptTokensOpt = None,
    max_prompt_tokens: MaxPromptTokensOpt = None,
    num_prompts: NumPromptsOpt = None,
    server_metrics: ServerMetricsOpt = False,
    metrics_url: MetricsUrlOpt = None,
    max_new_tokens: MaxNewTokensOpt = 64,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Ask for exactly --max-new-tokens.")] = False,
    warmup: WarmupOpt = 1,
    system_prompt: SystemPromptOpt = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder (default: results/load-<time>).")
    ] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """A server under open-loop load, rate by rate: latency percentiles, 429s, goodput under SLOs, and the
    saturation point."""
    from llmbench.drivers import load as ld
    from llmbench.options import EndpointOptions, RunOptions
    from llmbench.present import terminal as display

    args = locals()
    with _user_errors():
        spec = ld.LoadSpec(
            rates=ld.parse_rates(rates), slos=[ld.Slo.parse(s) for s in slo or []], arrival=arrival,
            duration_s=None if requests is not None else duration, requests=requests, seed=seed, workers=workers,
            ray=ray, min_attainment=min_attainment, one_token_passes=one_token_passes, auto_start=auto_start,
            auto_steps=auto_steps,
        )  # fmt: skip
        spec.validate()
        target = EndpointOptions(url=endpoint, model=model, api_key_env=api_key_env, tokenizer=tokenizer,
                                 timeout_s=timeout_s,
                                 metrics_url=_metrics_url(endpoint, server_metrics, metrics_url))  # fmt: skip
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, warmup=warmup,
                             system_prompt=system_prompt)  # fmt: skip
        prompt_set = _prompt_list(prompts, seed, args, options, tokenizer)
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "load")
        from llmbench.history.recording import check_url

        check_url(history)
        with _measuring(quiet) as (stop, reporter):
            record, path = _run_async(ld.load(prompt_set, target, options, spec, out_dir, stop=stop,
                                              reporter=reporter))  # fmt: skip
    display.out.print(display.load_table(record))
    for line in display.load_lines(record):
        display.out.print(line, markup=False, soft_wrap=True)
    display.out.print(f"wrote {path} and {len(record['rates'])} run files", markup=False)
    _record_file(history, path)


@app.command()
def quality(
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    quantize: QuantizeOpt = Quantize.none,
    engine: EngineOpt = "transformers",
    precision: PrecisionOpt = None,
    compile_: Annotated[bool, typer.Option("--compile", help="The candidate decodes through torch.compile.")] = False,
    reference_dtype: Annotated[
        DType, typer.Option(help="The reference setup's dtype (no quantization).")
    ] = DType.float32,
    reference_model: Annotated[
        Optional[str], typer.Option(help="Another model as the reference (same tokenizer).")
    ] = None,
    text: Annotated[
        Optional[Path], typer.Option(help="Evaluation text (UTF-8); default: the one llmbench ships.")
    ] = None,
    prompts: Annotated[Optional[Path], typer.Option(help="Prompts for the greedy continuations.")] = None,
    max_new_tokens: MaxNewTokensOpt = 32,
    chunk_tokens: Annotated[int, typer.Option(help="Teacher-forced chunk length (capped by the context).")] = 512,
    reference_cache: Annotated[
        Optional[Path], typer.Option(help="Keep the reference's top-256 log-probs here, reuse them next time.")
    ] = None,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    output: Annotated[Path, typer.Option("--output", "-o", help="The quality JSON to write.")] = Path("quality.json"),
    overwrite: OverwriteOpt = False,
    history: HistoryOpt = None,
) -> None:
    """Faster, but still the same model? KL divergence, top-1 agreement and perplexity against a reference setup
    (teacher-forced on a text), and where greedy answers part."""
    from llmbench import engines
    from llmbench.drivers.quality import quality as quality_driver
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.present import terminal as display
    from llmbench.results.storage import prepare_output
    from llmbench.workloads.prompts import load_prompts

    args = locals()
    with _user_errors():
        spec = _pick(ModelOptions, args, model=model or DEFAULT_MODEL, quantize=_none(quantize))
        engines.validate(spec)
        options = RunOptions(max_new_tokens=max_new_tokens, cache="static" if compile_ else "dynamic", compile=compile_)
        options.validate()
        path = prepare_output(output, overwrite)
        from llmbench.history.recording import check_url

        check_url(history)
        prompt_set = load_prompts(prompts) if prompts is not None else None
        record = _run_async(quality_driver(
            spec, options, reference_dtype=reference_dtype.value, reference_model=reference_model, text=text,
            prompts=prompt_set, chunk_tokens=chunk_tokens, reference_cache=reference_cache, output=path,
        ))  # fmt: skip
    for line in display.quality_lines(record):
        display.out.print(line, markup=False, soft_wrap=True)
    display.out.print(f"wrote {path}", markup=False)
    _record_file(history, path)


@app.command()
def serve(
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    reprobe: ReprobeOpt = False,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    quantize: QuantizeOpt = Quantize.none,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
    host: Annotated[str, typer.Option(help="Address to listen on (loopback: no one else can reach it).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    max_queue: Annotated[int, typer.Option(help="Requests that may wait while one generates; more get 429.")] = 4,
    test_reasoning_tokens: Annotated[
        int, typer.Option(hidden=True, help="For tests: send each answer's first N tokens as reasoning.")
    ] = 0,
    max_tokens: Annotated[int, typer.Option(help="max_tokens when a request gives none.")] = 256,
) -> None:
    """Serve a model over an OpenAI-compatible SSE endpoint, with a page at / that shows tokens, TTFT and TPOT live."""
    from llmbench.core.errors import require
    from llmbench.core.process import frozen_gc
    from llmbench.engines.hf import models
    from llmbench.engines.hf.generation import generation_thread
    from llmbench.options import ModelOptions
    from llmbench.present import terminal as display

    args = locals()
    with _user_errors():
        require("llmbench serve", "serve", "fastapi", "uvicorn")
        from llmbench import serve as sv

        if max_queue < 0:
            raise UserError(f"--max-queue must be 0 or more, not {max_queue}")
        if max_tokens < 1:
            raise UserError(f"--max-tokens must be at least 1, not {max_tokens}")
        spec = _pick(ModelOptions, args, model=model or DEFAULT_MODEL, quantize=_none(quantize))
        models.validate(spec)
        sv.check_port(host, port)
        with display.err.status(f"loading {spec.model} ({spec.weights} weights) ..."):
            loaded = generation_thread().run(models.load_model, spec)  # on the thread that will generate
        for w in loaded.warnings:
            display.warn(w)
        app_ = sv.create_app(loaded, max_queue=max_queue, max_tokens=max_tokens,
                             reasoning_tokens=test_reasoning_tokens)  # fmt: skip
    url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
    display.info(
        f"serving {spec.model} on {loaded.device} ({loaded.dtype}, {loaded.threads} threads) at {url}\n"
        f"  page: {url}/   API: POST /v1/chat/completions (stream: true for SSE)   GET /health\n"
        f"  one request generates at a time, {max_queue} may wait, more get 429. Ctrl-C stops."
    )
    with frozen_gc():
        sv.run_server(app_, host, port)


FailOnRegressionOpt = Annotated[
    Optional[float],
    typer.Option(help="Exit 1 when TTFT, TPOT or E2E regresses significantly by more than PCT % (0: by anything)."),
]
FailOnOpt = Annotated[Optional[list[str]], typer.Option(help="METRIC=PCT, e.g. tpot_ms=5 (repeatable).")]
GateStatOpt = Annotated[
    Stat,
    typer.Option(
        help="Statistic the gates test (gaps: TPOT from per-token gaps paired by position, TTFT and E2E on the median)."
    ),
]
FormatOpt = Annotated[CompareFormat, typer.Option("--format", help="Output format.")]
RequireMdcOpt = Annotated[
    Optional[float],
    typer.Option(help="Exit 1 when the gated metrics' minimum detectable change is above PCT %: the run could not "
                 "have seen a regression that small."),
]  # fmt: skip


@app.command()
def compare(
    runs: Annotated[list[Path], typer.Argument(help="BASE.json NEW.json [MORE.json ...]: each NEW against BASE.")],
    fail_on_regression: FailOnRegressionOpt = None,
    fail_on: FailOnOpt = None,
    gate_stat: GateStatOpt = Stat.mean,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 2 when the setups differ.")] = False,
    require_mdc: RequireMdcOpt = None,
    fmt: FormatOpt = CompareFormat.table,
) -> None:
    """Tell a real change from machine noise: change, 95% CI and verdict per metric; CI gates."""
    from llmbench.analysis import compare as cmp
    from llmbench.results.storage import load_run, read_load

    with _user_errors():
        gates = cmp.gate_options(fail_on_regression, fail_on, require_mdc)  # before any file is read
        if len(runs) < 2:
            raise UserError("compare needs at least two run files: BASE.json NEW.json [MORE.json ...]")
        if (base_load := read_load(runs[0])) is not None:
            if gates or require_mdc is not None:  # refused, not ignored: a gate that can't fail is off
                raise UserError("--fail-on-regression, --fail-on and --require-mdc gate run files, not load.json: "
                                "compare two runs at one rate (BASE/rate-R.json NEW/rate-R.json)")  # fmt: skip
            _compare_loads(base_load, runs)
            return
        stamps = ("token_times_ms",) if gate_stat is Stat.gaps else ()  # read only when the statistic needs them
        loaded = [load_run(p, scalars_only=True, request_fields=stamps) for p in runs]
        comps = [cmp.compare_runs(loaded[0], new, base_name=str(runs[0]), new_name=str(path))
                 for new, path in zip(loaded[1:], runs[1:], strict=True)]  # fmt: skip
        checks = _checks(comps, fail_on_regression, fail_on, gate_stat)
        for c in comps if strict else []:
            if c.config_diffs:
                diffs = ", ".join(f"{k} {b} -> {n}" for k, b, n in c.config_diffs)
                raise UserError(f"--strict: {c.new} was run with a different setup than {c.base}: {diffs}")
    _render_comparisons(comps, checks, fmt, require_mdc, gate_stat.value)


def _compare_loads(base: dict, paths: list[Path]) -> None:
    """Two load.json at the offered rates both measured; each rate's runs can be compared as runs."""
    from llmbench.present import terminal as display
    from llmbench.results.storage import read_load

    if len(paths) != 2:
        raise UserError("compare takes two load.json files: BASE/load.json NEW/load.json")
    new = read_load(paths[1])
    if new is None:
        raise UserError(f"{paths[1]} is not a load.json; compare a load.json with another load.json")
    common = {r["offered_rate_rps"] for r in base["rates"]} & {r["offered_rate_rps"] for r in new["rates"]}
    if not common:
        raise UserError("the two load tests share no offered rate: run them with the same --rates")
    display.out.print(display.load_comparison(base, new))
    b, n = base["saturation"]["rate_rps"], new["saturation"]["rate_rps"]
    display.out.print(f"saturation: {b} -> {n} requests/s; SLOs {[s['text'] for s in base['slos']]} -> "
                      f"{[s['text'] for s in new['slos']]}", markup=False, soft_wrap=True)  # fmt: skip
    rate = min(common)
    runs = " ".join(f"{p.parent}/rate-{rate:g}.json" for p in paths)
    display.out.print(f"for intervals per rate, compare the runs: llmbench compare {runs}", markup=False,
                      soft_wrap=True)  # fmt: skip


def _checks(comps: list[Any], fail_on_regression: float | None, fail_on: list[str] | None, stat: Stat) -> list[Any]:
    from llmbench.analysis.compare import parse_fail_on

    thresholds = parse_fail_on(fail_on)
    return [c.checks(fail_on_regression, thresholds, stat.value) for c in comps]


def _render_comparisons(
    comps: list[Any], checks: list[Any], fmt: CompareFormat, require_mdc: float | None = None, stat: str = "mean"
) -> None:
    """compare's output in ``fmt``, then its exit code: 1 when a gate found a regression, or (``require_mdc``)
    when the run could not have seen a change of that size. A gate whose threshold is below what the run can
    detect is said loudly: its pass would otherwise be silent and blind."""
    import json

    from llmbench.analysis.compare import GATED_BY_DEFAULT
    from llmbench.present import terminal as display

    if fmt is CompareFormat.json:
        typer.echo(json.dumps([c.to_dict(k) for c, k in zip(comps, checks, strict=True)], indent=2, default=str))
    blind_lines: list[str] = []
    for c, k in zip(comps, checks, strict=True):
        if fmt is CompareFormat.table:
            display.print_comparison(c, k)
        elif fmt is CompareFormat.markdown:
            typer.echo(display.comparison_markdown(c, k))
        for metric, mdc, pct in c.blind_spots({x.metric: x.threshold_pct for x in k}, stat):
            shown = c.row(metric, stat).stat  # blind_spots found the row
            blind_lines.append(f"BLIND: this run could not have seen a {pct:g}% regression of {metric} {shown}: "
                               f"its minimum detectable change is {mdc:.1f}% (more pairs: --repeats, or more "
                               "processes: --processes)")  # fmt: skip
    for line in blind_lines:
        display.err.print(line, markup=False, soft_wrap=True)
        if fmt is CompareFormat.markdown:
            typer.echo(f"> **{line}**")
    if require_mdc is not None:
        wanted = {x.metric for k in checks for x in k} or set(GATED_BY_DEFAULT)
        short = [(m, c.row(m, stat).stat, mdc) for c in comps
                 for m, mdc, _ in c.blind_spots(dict.fromkeys(wanted, require_mdc), stat)]  # fmt: skip
        if short:
            shown = ", ".join(f"{m} {st} {mdc:.1f}%" for m, st, mdc in short)
            typer.echo(f"llmbench: error: --require-mdc {require_mdc:g}: this run could not have seen a change that "
                       f"small ({shown})", err=True)  # fmt: skip
            raise typer.Exit(1)
    raise typer.Exit(1 if any(x.regression for k in checks for x in k) else 0)


@app.command()
def ab(
    prompts: DataArg,
    base: Annotated[str, typer.Option(help="A server URL, or a command line starting `llmbench worker ...`.")],
    head: Annotated[str, typer.Option(help="The same, for the side under test.")],
    output: AbOutputOpt = None,
    prompt_format: PromptFormatOpt = None,
    prompt_column: PromptColumnOpt = None,
    output_len_column: OutputLenColumnOpt = None,
    min_prompt_tokens: MinPromptTokensOpt = None,
    max_prompt_tokens: MaxPromptTokensOpt = None,
    num_prompts: NumPromptsOpt = None,
    seed: DataSeedOpt = 0,
    tokenizer: DataTokenizerOpt = None,
    repeats: Annotated[int, typer.Option(help="Times to go round the prompt list (pairs per prompt).")] = 1,
    warmup: WarmupOpt = 1,
    max_new_tokens: MaxNewTokensOpt = 64,
    ignore_eos: Annotated[
        bool, typer.Option("--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens.")
    ] = True,
    system_prompt: SystemPromptOpt = None,
    fail_on_regression: FailOnRegressionOpt = None,
    fail_on: FailOnOpt = None,
    gate_stat: AbGateStatOpt = Stat.p50,
    fmt: FormatOpt = CompareFormat.table,
    resume: Annotated[bool, typer.Option("--resume", help="Continue the interrupted ab run in -o's folder.")] = False,
    processes: Annotated[
        int,
        typer.Option(
            help="Worker processes per side, used in turn: a difference only one process shows stays noise "
            "(the interval is taken over the processes' own changes)."
        ),
    ] = 1,
    require_mdc: RequireMdcOpt = None,
    history: HistoryOpt = None,
    anchor: Annotated[
        Optional[str],
        typer.Option(
            help="With --history: the base is this pinned ref's code (a tag or commit); the head is recorded "
            "relative to it, for trend --anchor."
        ),
    ] = None,
    head_ref: Annotated[
        Optional[str], typer.Option(help="With --history: the head's ref (default: this checkout's commit).")
    ] = None,
    move_anchor: Annotated[
        bool,
        typer.Option(
            "--move-anchor",
            help="This ab measures the new anchor (head) against --anchor: later results "
            "against it chain onto the old one's index.",
        ),
    ] = False,
    quiet: QuietOpt = False,
) -> None:
    """Base and head side by side, request by request (ABBA), so machine drift cancels; compare's verdict and
    gate on the pair."""
    from llmbench.analysis.compare import compare_runs
    from llmbench.drivers.ab import ab as ab_driver
    from llmbench.options import RunOptions

    args = locals()
    with _user_errors():
        from llmbench.analysis.compare import check_gaps_gate, gate_options
        from llmbench.history.recording import check_url

        # Everything that could refuse the options or the result is checked before a worker starts: the gates,
        # the history URL (here); the sides' commands, the output folder and a resume (the driver, before start).
        gates = gate_options(fail_on_regression, fail_on, require_mdc)
        recording = check_url(history) is not None
        if resume and output is None:
            raise UserError("--resume continues the ab run in a folder: give it with -o")
        if (anchor or head_ref or move_anchor) and not recording:
            raise UserError("--anchor, --head-ref and --move-anchor record into the history: give --history")
        if move_anchor and not (anchor and head_ref):
            raise UserError("--move-anchor needs --anchor OLD and --head-ref NEW (the new anchor's ref)")
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, warmup=warmup, repeats=repeats,
                             system_prompt=system_prompt)  # fmt: skip
        options.validate()
        prompt_set = _prompt_list(prompts, seed, args, options, tokenizer)
        check_gaps_gate(gate_stat.value, gates, max_new_tokens, len(prompt_set.prompts) * repeats)
        with _measuring(quiet) as (stop, reporter):
            coro = ab_driver(prompt_set, base, head, options, output, resume=resume, stop=stop, reporter=reporter,
                             processes=processes)  # fmt: skip
            base_run, head_run, folder = _run_async(coro)
        comp = compare_runs(base_run, head_run, base_name=str(folder / "base.json"), new_name=str(folder / "head.json"))
        checks = _checks([comp], fail_on_regression, fail_on, gate_stat)
        if recording:
            from llmbench.history.records import ab_result

            result = ab_result(base_run, head_run, folder, anchor=anchor, head_ref=head_ref, moves_anchor=move_anchor)
            _history_line(history, [result], str(folder))
    _render_comparisons([comp], checks, fmt, require_mdc, gate_stat.value)


@app.command()
def worker(
    model: ModelOpt = None,
    weights: WeightsOpt = Weights.pretrained,
    engine: EngineOpt = "transformers",
    precision: PrecisionOpt = None,
    device: DeviceOpt = "auto",
    dtype: DTypeOpt = DType.auto,
    reprobe: ReprobeOpt = False,
    threads: ThreadsOpt = None,
    attn: AttnOpt = None,
    cache: Annotated[Cache, typer.Option(help="KV cache: dynamic, or static (preallocated).")] = Cache.dynamic,
    compile_: Annotated[bool, typer.Option("--compile", help="torch.compile the decode step (static cache).")] = False,
    quantize: QuantizeOpt = Quantize.none,
    device_map: DeviceMapOpt = None,
    allow_offload: AllowOffloadOpt = False,
    allow_pickle: AllowPickleOpt = False,
    trust_remote_code: TrustRemoteCodeOpt = False,
) -> None:
    """A model in a process of its own, measuring on command over stdin/stdout (JSON lines): one side of
    `llmbench ab`. Not for typing at: ab starts it."""
    from llmbench import engines
    from llmbench.backends import worker_main as w
    from llmbench.options import ModelOptions

    args = locals()
    with _user_errors():
        spec = _pick(ModelOptions, args, model=model or DEFAULT_MODEL, quantize=_none(quantize))
        engines.validate(spec)
    raise typer.Exit(w.main(spec, "static" if compile_ else cache.value, compile_))


@app.command()
def engines() -> None:
    """The engines --engine can use here: installed versions, what each reads, its converter, and whether
    llama.cpp's build runs on this CPU."""
    from llmbench import engines as eng
    from llmbench.present import terminal as display

    for line in display.engines_lines(eng.status()):
        display.out.print(line, markup=False, soft_wrap=True)


history_app = typer.Typer(help="The history database: results over time, per machine (see --history).",
                          no_args_is_help=True)  # fmt: skip
app.add_typer(history_app, name="history")
DbOpt = Annotated[
    Optional[str],
    typer.Option("--history", envvar="LLMBENCH_HISTORY", show_envvar=True,
                 help="The database (default: ~/.local/share/llmbench/history.db)."),
]  # fmt: skip
SinceOpt = Annotated[Optional[str], typer.Option(help="Only results measured since: 30d, 12h, 2w or a date.")]


def _since(text: str | None) -> str | None:
    """``30d``/``12h``/``2w`` -> an ISO time that long ago; a date (or ISO time) -> that time in UTC."""
    from llmbench.history.db import since_time

    return since_time(text)


@history_app.command("add")
def history_add(
    files: Annotated[
        list[Path], typer.Argument(help="Run JSONs, sweep/scan/load folders or files, quality.json, ab folders.")
    ],
    history: DbOpt = None,
) -> None:
    """Record results already on disk (idempotent: a run recorded before, by its bytes or its run id, is not
    recorded twice; a partial run is recorded as such and replaced when its complete file is added)."""
    from llmbench.history.recording import record_files

    with _user_errors():
        done = record_files(history if history is not None else "default", files)
    new = sum(1 for d in done if d.new)
    partial = sum(1 for d in done if d.new and d.partial)
    note = f"; {partial} of a partial run (replaced when its complete file is added)" if partial else ""
    typer.echo(f"{new} new, {len(done) - new} already recorded ({len(done)} results from {len(files)} paths){note}")


@history_app.command("list")
def history_list(
    since: SinceOpt = None,
    machine: Annotated[Optional[str], typer.Option(help="A machine id (or its start).")] = None,
    config: Annotated[Optional[str], typer.Option(help="A setup hash (or its start).")] = None,
    commit: Annotated[Optional[str], typer.Option(help="A commit (or its start).")] = None,
    kind: Annotated[Optional[str], typer.Option(help="run, ab, sweep, scan, load or quality.")] = None,
    limit: Annotated[Optional[int], typer.Option(help="The newest N only.")] = None,
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """The recorded results, oldest first (by when they were measured)."""
    from llmbench.history.db import KINDS, dumps
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with _user_errors():
        if kind is not None and kind not in KINDS:  # refused before the database is opened
            raise UserError(f"--kind {kind}: expected one of {', '.join(KINDS)}")
        if limit is not None and limit < 1:
            raise UserError(f"--limit must be at least 1, not {limit}")
        after = _since(since)
        h = get_history(history)
        try:
            rows = h.list(since=after, machine=machine, config=config, commit=commit, kind=kind, limit=limit)
        finally:
            h.close()
    if fmt is CompareFormat.json:
        typer.echo(dumps(rows))
    else:
        display.print_wide(display.history_table(rows), 140)


@history_app.command("show")
def history_show(
    result_id: Annotated[int, typer.Argument(help="A result's id (history list).")],
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """One result: its code, machine, setup and metrics with intervals."""
    from llmbench.history.db import dumps
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with _user_errors():
        h = get_history(history)
        r = h.get(result_id)
        h.close()
        if r is None:
            raise UserError(f"no result {result_id} in the history")
    if fmt is CompareFormat.json:
        typer.echo(dumps(r))
    else:
        for line in display.history_result_lines(r):
            display.out.print(line, markup=False, soft_wrap=True)


@history_app.command("prune")
def history_prune(
    keep: Annotated[
        int, typer.Option(help="Results to keep per machine, setup, kind, label and anchor (the newest measured).")
    ],
    machine: Annotated[Optional[str], typer.Option(help="Prune this machine's results only (its id or start).")] = None,
    history: DbOpt = None,
) -> None:
    """Delete all but the newest results of each series (their JSON files are left alone; an ab record that moved
    an anchor is kept: trend --anchor chains through it)."""
    from llmbench.history.recording import get_history

    with _user_errors():
        if keep < 1:
            raise UserError(f"--keep must be at least 1, not {keep}")
        h = get_history(history)
        try:
            n = h.prune(keep, machine)
        finally:
            h.close()
    typer.echo(f"deleted {n} results")


@history_app.command("export")
def history_export(
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="File format.")] = ExportFormat.csv,
    overwrite: OverwriteOpt = False,
    history: DbOpt = None,
) -> None:
    """The history as a table: one row per (result, metric, statistic)."""
    from llmbench.core.errors import require
    from llmbench.history.recording import get_history
    from llmbench.results.storage import prepare_output

    with _user_errors():
        require("llmbench history export", "export", "pandas")
        from llmbench.present.export import export_history

        path = prepare_output(output, overwrite)
        h = get_history(history)
        rows = export_history(h, path, fmt.value)
        h.close()
    typer.echo(f"wrote {rows} rows to {path}")


@app.command()
def trend(
    metric: Annotated[str, typer.Argument(help="ttft_ms, tpot_ms, e2e_ms, decode_tokens_per_s, ...")],
    stat: Annotated[str, typer.Option(help="mean, p50, p90 or p99.")] = "p50",
    since: SinceOpt = None,
    machine: Annotated[Optional[str], typer.Option(help="A machine id (or its start).")] = None,
    config: Annotated[Optional[str], typer.Option(help="A setup hash (or its start).")] = None,
    anchor: Annotated[
        Optional[str], typer.Option(help="The series of ab results against this pinned ref (percent change).")
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="With --anchor: exit 1 when the series is significantly over --budget.")
    ] = False,
    budget: Annotated[
        Optional[float], typer.Option(help="--check: the allowed slowdown against the anchor, % (default 5).")
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="An HTML page of the series.")] = None,
    overwrite: OverwriteOpt = False,
    fmt: FormatOpt = CompareFormat.table,
    history: DbOpt = None,
) -> None:
    """A metric over time: the series with its intervals, commits on the axis, change points; against an anchor,
    the creep a change of runner can't hide."""
    import json

    from llmbench.history import trend as tr
    from llmbench.history.recording import get_history
    from llmbench.present import terminal as display

    with _user_errors():
        if stat not in ("mean", "p50", "p90", "p99"):
            raise UserError(f"--stat {stat}: expected mean, p50, p90 or p99")
        if check and anchor is None:
            raise UserError("--check compares against an anchor's budget: give --anchor REF")
        if budget is not None and (anchor is None or not (check or output)):
            raise UserError("--budget goes with --anchor REF and --check (or -o, whose page draws it)")
        budget = tr.valid_budget(5.0 if budget is None else budget)  # NaN, inf, < 0: refused before any work
        after = _since(since)
        path = None
        if output is not None:
            from llmbench.core.errors import require
            from llmbench.results.storage import prepare_output

            require("trend -o", "report", "matplotlib")
            path = prepare_output(output, overwrite)
        h = get_history(history)
        try:
            t = (tr.anchored(h, metric, stat, anchor, since=after, machine=machine, config=config) if anchor else
                 tr.series(h, metric, stat, since=after, machine=machine, config=config))  # fmt: skip
        finally:
            h.close()
        problems = tr.check(t, budget) if check else []
        if path is not None:
            from llmbench.present.html import build_trend_report
            from llmbench.results.storage import write_text

            write_text(path, build_trend_report(t, budget if anchor else None))
    if fmt is CompareFormat.json:
        typer.echo(json.dumps({**t.as_dict(), "check": {"budget": budget, "problems": problems} if check else None},
                              indent=2, default=str))  # fmt: skip
    else:
        display.out.print(display.trend_table(t))
        for line in display.trend_lines(t):
            display.out.print(line, markup=False, soft_wrap=True)
        if path is not None:
            display.out.print(f"wrote {path}", markup=False)
    if check:
        for p in problems:
            display.err.print(f"llmbench: over budget: {p}", markup=False, soft_wrap=True)
        if not problems:
            display.err.print(f"within the {budget:g}% budget against {anchor}", markup=False)
        raise typer.Exit(1 if problems else 0)


@app.command()
def show(run_file: Annotated[Path, typer.Argument(help="A run JSON, a scan.json or a load.json.")]) -> None:
    """The summary table of a saved run (or a scan's curves and fits, or a load test's rates)."""
    from llmbench.present import terminal as display
    from llmbench.results.storage import load_run, read_load, read_scan

    with _user_errors():
        scan_record = read_scan(run_file)
        if scan_record is not None:
            for line in display.scan_lines(scan_record):
                display.out.print(line, markup=False, soft_wrap=True)
            return
        load_record = read_load(run_file)
        if load_record is not None:
            display.out.print(display.load_table(load_record))
            for line in display.load_lines(load_record):
                display.out.print(line, markup=False, soft_wrap=True)
            return
        run = load_run(run_file, scalars_only=True)  # the summary table needs no token stamps
    for w in run.warnings:
        display.warn(w)
    display.out.print(display.summary_table(run))
    for open_line in (display.workload_line(run.config), display.open_loop_line(run)):
        if open_line is not None:
            display.out.print(open_line, markup=False, soft_wrap=True)
    lines = display.cost_lines(run) + display.cache_lines(run) + display.server_lines(run) + display.machine_lines(run)
    for line in lines:
        display.out.print(line, markup=False, soft_wrap=True)


@app.command()
def export(
    run_file: Annotated[Path, typer.Argument(help="A run JSON.")],
    output: Annotated[Path, typer.Option("--output", "-o", help="The file to write.")],
    fmt: Annotated[ExportFormat, typer.Option("--format", help="File format.")] = ExportFormat.csv,
    tokens: Annotated[bool, typer.Option("--tokens", help="One row per token instead of per request.")] = False,
    overwrite: OverwriteOpt = False,
) -> None:
    """A tidy table of a run (pandas): one row per request, or per token with --tokens."""
    from llmbench.results.storage import load_run, prepare_output

    with _user_errors():
        from llmbench.core.errors import require

        require("llmbench export", "export", "pandas")
        from llmbench.present import export as ex

        # the request table needs no token stamps: read without them (a 10,000 x 256 run 4x faster)
        run = load_run(run_file) if tokens else load_run(run_file, scalars_only=True, request_fields=ex.REQUEST_FIELDS)
        path = prepare_output(output, overwrite)
        rows = ex.export(run, path, fmt.value, tokens)
    typer.echo(f"wrote {rows} rows to {path}")


@app.command()
def report(
    runs: Annotated[
        list[Path], typer.Argument(help="RUN.json [MORE.json ...]; the first is the base. Or a scan.json.")
    ],
    output: Annotated[Path, typer.Option("--output", "-o", help="The HTML file to write.")] = Path("report.html"),
    overwrite: OverwriteOpt = False,
) -> None:
    """One self-contained HTML file: tables, token timelines, ITL histogram, TTFT vs prompt length, compare; for a
    scan.json, its curves with their fits."""
    from llmbench.results.storage import load_run, prepare_output, read_load, read_scan, write_text

    with _user_errors():
        from llmbench.core.errors import require

        require("llmbench report", "report", "matplotlib")
        from llmbench.present.html import build_load_report, build_report, build_scan_report

        scan_record = read_scan(runs[0]) if len(runs) == 1 else None
        load_records = [r for p in runs if (r := read_load(p)) is not None]
        if scan_record is not None or load_records:
            if load_records and len(load_records) != len(runs):
                raise UserError("report draws load.json files alone, or run files alone: not both at once")
            path = prepare_output(output, overwrite)
            page = build_scan_report(scan_record) if scan_record is not None else build_load_report(
                [(_short_name(p, runs), r) for p, r in zip(runs, load_records, strict=True)])  # fmt: skip
            write_text(path, page)
            typer.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")
            return
        loaded = [(_short_name(p, runs), load_run(p)) for p in runs]
        for name, run in loaded:
            if not run.requests:
                raise UserError(f"{name} has no finished requests: nothing to report")
        path = prepare_output(output, overwrite)
        write_text(path, build_report(loaded))
    typer.echo(f"wrote {path} ({path.stat().st_size / 1024:.0f} KiB)")


def _short_name(path: Path, others: list[Path]) -> str:
    """How a report names a file in its legends and headings: the run's file stem, or for a file every result
    folder has (load.json, base.json, ...) its folder's name too; never the full (temporary) path. Two files
    that would get the same name keep more of their path."""
    generic = path.name in ("load.json", "scan.json", "sweep.json", "base.json", "head.json", "run.json")
    name = f"{path.parent.name}/{path.stem}" if generic else path.stem
    clash = [
        o for o in others if o != path and (o.stem == path.stem and (not generic or o.parent.name == path.parent.name))
    ]
    return str(path) if clash else name


def _resume_command(path: Path) -> str:
    """This invocation's command line with --resume PATH instead of -o/--overwrite/--resume."""
    import shlex

    args, skip = [], False
    for a in sys.argv[1:]:
        if skip:
            skip = False
            continue
        if a in ("-o", "--output", "--resume"):
            skip = True
            continue
        if a == "--overwrite" or a.startswith(("--output=", "--resume=")):
            continue
        args.append(a)
    from llmbench.core.redact import scrub  # printed: a --history or --endpoint URL loses its credentials

    return scrub(shlex.join(["llmbench", *args, "--resume", str(path)]))


def _bare_history(argv: list[str]) -> list[str]:
    """``--history`` given without a value means the default database: click needs one, so "default" is put in
    (unless what follows is a URL or a .db file)."""
    out: list[str] = []
    for i, a in enumerate(argv):
        out.append(a)
        if a == "--history":
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            # a value with credentials (u:pw@host/db) is the option's, refused by it, never echoed as an argument
            if nxt is None or nxt.startswith("-") or not ("://" in nxt or "@" in nxt or nxt == "default" or
                                                          nxt.endswith((".db", ".sqlite", ".sqlite3"))):  # fmt: skip
                out.append("default")
    return out


_MACHINE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO}


class _Terminated(SystemExit):
    """SIGTERM in a command without a stop flag of its own: unwinds (a database transaction rolls back), then
    exits 143 with one line."""


def _on_sigterm(_signum: int, _frame: object) -> None:
    raise _Terminated(143)


def main() -> None:
    """Console entry point: click's usage errors become one line too (exit 2)."""
    import signal

    signal.signal(signal.SIGTERM, _on_sigterm)  # the measuring commands replace it with their stop flag
    try:
        code = app(args=_bare_history(sys.argv[1:]), standalone_mode=False)
    except _Terminated:
        typer.echo("llmbench: terminated by SIGTERM (nothing unfinished was written)", err=True)
        sys.exit(143)
    except typer.Abort:
        typer.echo("llmbench: aborted", err=True)
        sys.exit(130)
    except typer.TyperException as e:  # click's usage errors (typer vendors click): bad option, bad value
        ctx = getattr(e, "ctx", None)
        command = f"llmbench {ctx.info_name} --help" if ctx is not None and ctx.parent else "llmbench --help"
        message = e.format_message() if hasattr(e, "format_message") else str(e)
        typer.echo(f"llmbench: error: {' '.join(message.split())} (see {command})", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    except KeyboardInterrupt:
        typer.echo("llmbench: interrupted", err=True)
        sys.exit(130)
    except Exception as e:  # a bug, not a user error: one line, traceback on request
        if os.environ.get("LLMBENCH_DEBUG"):
            raise
        if isinstance(e, OSError) and e.errno in _MACHINE_ERRNOS:
            # the machine's state, not a bug: a full disk, a read-only folder (every finished request is on disk)
            where = f" {e.filename}" if e.filename else ""
            typer.echo(f"llmbench: error: cannot write{where}: {e.strerror or e}", err=True)
            sys.exit(2)
        from llmbench.core.redact import scrub  # a library's message may hold the URL as given

        typer.echo(
            f"llmbench: internal error: {type(e).__name__}: {scrub(str(e))} (set LLMBENCH_DEBUG=1 for the traceback)",
            err=True,
        )
        sys.exit(1)
    # the work is done and written: a signal while the interpreter shuts down (handlers back to default) must not
    # turn a finished command into a kill (-15, -2)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if code == 130 and not _said.get("interrupted"):
        # Typer turns a Ctrl-C in a command without a stop flag (quality, history) into a silent exit 130
        typer.echo("llmbench: interrupted (nothing unfinished was written)", err=True)
    sys.exit(code if isinstance(code, int) else 0)
