"""``llmbench run``: every prompt through a model in this process or a server, every token stamped."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import (
    check_history,
    history_line,
    measuring,
    metrics_url_of,
    model_options,
    refuse_given,
    run_async,
    run_options,
    user_errors,
)
from llmbench.cli.params import (
    ApiKeyEnvOpt,
    EndpointOpt,
    EndpointTokenizerOpt,
    HistoryOpt,
    IgnoreEosOpt,
    MaxNewTokensOpt,
    MetricsUrlOpt,
    NoChatTemplateOpt,
    OverwriteOpt,
    QuietOpt,
    RunOutputOpt,
    RunSeedOpt,
    ServerMetricsOpt,
    SystemPromptOpt,
    TimeoutOpt,
    WarmupOpt,
)
from llmbench.cli.params_workload import (
    ArrivalOpt,
    DurationOpt,
    GroupDistOpt,
    PrefixGroupsOpt,
    PrefixTokensOpt,
    RateOpt,
    RayOpt,
    RequestsOpt,
    SuffixTokensOpt,
    SyntheticOpt,
    ThinkTimeOpt,
    TimeScaleOpt,
    TraceEndOpt,
    TraceFormatOpt,
    TraceOpt,
    TraceStartOpt,
    TurnsOpt,
    WorkersOpt,
)
from llmbench.cli.shared import DATASET, DEVICE, ENGINE, LEVERS, LOADING, MODEL, takes
from llmbench.cli.workload import _open_loop
from llmbench.drivers import workload

# run's flags that belong to one mode only: refused in the other, in one line
IN_PROCESS_ONLY = (
    *("weights", "device", "dtype", "reprobe", "threads", "device_map", "allow_offload", "allow_pickle", "engine"),
    "precision",
    "trust_remote_code",
    *("compile_", "quantize", "attn", "cache", "truncate", "no_chat_template", "speculative", "prefix_cache"),
)
ENDPOINT_ONLY = ("concurrency", "api_key_env", "tokenizer", "rate", "arrival", "requests", "duration", "workers", "ray",
                 "server_metrics", "metrics_url", "timeout_s")  # fmt: skip


@takes("prompts", "synthetic", *DATASET, "prefix_groups", "prefix_tokens", "suffix_tokens", "group_dist", *MODEL,
       *ENGINE, "endpoint", "api_key_env", "timeout_s", "concurrency", "tokenizer", "rate", "trace",
       "trace_format", "time_scale", "start", "end", "arrival", "requests", "duration", "workers", "ray",
       "server_metrics", "metrics_url", *DEVICE, "max_new_tokens", "ignore_eos", "warmup", "repeats", "sample",
       "seed", "turns", "think_time", "temperature", "top_p", "system_prompt", "no_chat_template", *LOADING,
       "output", "overwrite", "history", "resume", "truncate", "attn", "cache", "compile_", "quantize",
       *LEVERS, "quiet")  # fmt: skip
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
    prefix_groups: PrefixGroupsOpt = None,
    prefix_tokens: PrefixTokensOpt = None,
    suffix_tokens: SuffixTokensOpt = None,
    group_dist: GroupDistOpt = "uniform",
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
    output: RunOutputOpt = None,
    overwrite: OverwriteOpt = False,
    history: HistoryOpt = None,
    resume: Annotated[Optional[Path], typer.Option(help="Continue this incomplete run JSON (same setup).")] = None,
    truncate: Annotated[bool, typer.Option("--truncate", help="Cut prompts longer than the context.")] = False,
    quiet: QuietOpt = False,
    **shared: Any,
) -> None:
    """Stream every prompt through a model in this process (or a server: --endpoint), stamp every token, write a
    run JSON."""
    from llmbench.drivers.run import run as run_driver
    from llmbench.workloads import sessions

    args = dict(ctx.params)
    with user_errors():
        sessions.check(turns, think_time)  # before anything loads: --turns 10**20 would exhaust memory later
        args["trace_rows"] = workload.read_trace(workload.Workload.of(args))
        target = _run_target(ctx, args)
        options = run_options(args)
        prompt_set = workload.source(workload.Workload.of(args), args["trace_rows"])
        check_history(history)
        with measuring(quiet) as (stop, reporter):
            coro = run_driver(prompt_set, target, options, output=output, overwrite=overwrite, default_dir="results",
                              resume=resume, stop=stop, reporter=reporter)  # fmt: skip
            result, path = run_async(coro, resumable=True)
    _show_run(result, path, history)


def _show_run(result: Any, path: Path | None, history: str | None) -> None:
    """What `run` prints once the run is written: the summary, the client's line, the history entry."""
    from llmbench.present import terminal as display
    from llmbench.present.summary import print_summary

    print_summary(result)
    if result.client:
        display.info(display.client_line(result.client))
    display.out.print(f"wrote {path}", markup=False)
    with user_errors():
        from llmbench.history.records import run_result

        history_line(history, [run_result(result, path)] if path else [], str(path))


def _run_target(ctx: typer.Context, args: dict[str, Any]) -> Any:
    """What `run` measures: a server (--endpoint) or a model here, each refusing the other's options."""
    from llmbench.api import endpoint_options

    if args["endpoint"] is not None:
        refuse_given(ctx, IN_PROCESS_ONLY, "in-process run options only; with --endpoint the server decides them")
        return endpoint_options(
            args["endpoint"], model=args["model"], api_key_env=args["api_key_env"], concurrency=args["concurrency"],
            timeout_s=args["timeout_s"], tokenizer=args["tokenizer"], open_loop=_open_loop(ctx, args),
            metrics_url=metrics_url_of(args["endpoint"], args["server_metrics"], args["metrics_url"]),
        )  # fmt: skip
    refuse_given(ctx, ENDPOINT_ONLY, "options of --endpoint runs only")
    return model_options(args)
