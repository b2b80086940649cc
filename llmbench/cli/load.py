"""``llmbench load``: a server under open-loop load, rate by rate, against SLOs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import (
    check_history,
    measuring,
    print_lines,
    record_file,
    run_async,
    user_errors,
)
from llmbench.cli.params import (
    HistoryOpt,
    MaxNewTokensOpt,
    MetricsUrlOpt,
    QuietOpt,
    ServerMetricsOpt,
    SystemPromptOpt,
    WarmupOpt,
)
from llmbench.cli.params_workload import (
    ArrivalOpt,
    DataArg,
    RayOpt,
    RequestsOpt,
    WorkersOpt,
)
from llmbench.cli.shared import DATASET, takes
from llmbench.drivers import workload


@takes("prompts", "endpoint", "rates", "slo", "duration", "requests", "arrival", "seed", "workers", "ray",
       "min_attainment", "one_token_passes", "auto_start", "auto_steps", "model", "api_key_env", "timeout_s",
       "tokenizer", *DATASET, "server_metrics", "metrics_url", "max_new_tokens", "ignore_eos", "warmup",
       "system_prompt", "output", "history", "quiet")  # fmt: skip
def load(
    ctx: typer.Context,
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
    **shared: Any,
) -> None:
    """A server under open-loop load, rate by rate: latency percentiles, 429s, goodput under SLOs, and the
    saturation point."""
    from llmbench.drivers import load as ld
    from llmbench.options import RunOptions, endpoint_options_of
    from llmbench.present import terminal as display

    args = dict(ctx.params)
    with user_errors():
        spec = ld.LoadSpec(
            rates=ld.parse_rates(rates), slos=[ld.Slo.parse(s) for s in slo or []], arrival=arrival,
            duration_s=None if requests is not None else duration, requests=requests, seed=seed, workers=workers,
            ray=ray, min_attainment=min_attainment, one_token_passes=one_token_passes, auto_start=auto_start,
            auto_steps=auto_steps,
        )  # fmt: skip
        spec.validate()
        target = endpoint_options_of(args)
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=ignore_eos, warmup=warmup,
                             system_prompt=system_prompt)  # fmt: skip
        prompt_set = workload.prompt_list(workload.Workload.of(args), options, tokenizer)
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "load")
        check_history(history)
        with measuring(quiet) as (stop, reporter):
            record, path = run_async(ld.load(prompt_set, target, options, spec, out_dir, stop=stop,
                                             reporter=reporter))  # fmt: skip
    display.out.print(display.load_table(record))
    print_lines(display.load_lines(record))
    display.out.print(f"wrote {path} and {len(record['rates'])} run files", markup=False)
    record_file(history, path)
