"""``llmbench scan``: TTFT, TPOT and throughput curves over controlled prompts, with their fits."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import (
    check_history,
    given,
    measuring,
    model_options,
    print_lines,
    record_file,
    run_async,
    user_errors,
)
from llmbench.cli.params import (
    HistoryOpt,
    MaxNewTokensOpt,
    QuietOpt,
    SystemPromptOpt,
    WarmupOpt,
)
from llmbench.cli.shared import DEVICE, ENGINE, LOADING, MODEL, takes


@takes("prompt_tokens", "depth", "batch", "rounds", "max_new_tokens", "prompts_per_point", "batch_prompt_tokens",
       "seed", "warmup", *MODEL, *DEVICE, "attn", "quantize", *ENGINE, "speculative", *LOADING, "system_prompt",
       "chat_template", "output", "history", "quiet")  # fmt: skip
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
    system_prompt: SystemPromptOpt = None,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder (default: results/scan-<time>).")
    ] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
    **shared: Any,
) -> None:
    """TTFT against prompt length, TPOT against context depth, throughput against batch size: controlled prompts,
    interleaved rounds, fitted curves."""
    from llmbench import engines
    from llmbench.drivers import scan as sc
    from llmbench.engines.hf import models
    from llmbench.options import RunOptions
    from llmbench.present import terminal as display

    engine, speculative = ctx.params["engine"], ctx.params.get("speculative")
    with user_errors():
        if engines.engine_info(engine).name != "transformers" and batch == "1,2,4,8":
            display.warn(f"--engine {engine}: no batch points (batched generate() is transformers'); the default "
                         "--batch is left out")  # fmt: skip
            batch = ""
        if speculative and batch == "1,2,4,8":
            display.warn("--speculative: no batch points (speculative decoding generates one sequence a request); "
                         "the default --batch is left out")  # fmt: skip
            batch = ""
        points = sc.grid(sc.parse_values(prompt_tokens, "--prompt-tokens"), sc.parse_values(depth, "--depth"),
                         sc.parse_values(batch, "--batch"))  # fmt: skip
        sc.check_plan(points, rounds, prompts_per_point, batch_prompt_tokens,
                      {n for n in ("batch_prompt_tokens", "max_new_tokens") if given(ctx, n)})  # fmt: skip
        options = RunOptions(max_new_tokens=max_new_tokens, ignore_eos=True, warmup=warmup, repeats=rounds,
                             system_prompt=system_prompt, chat_template=ctx.params["chat_template"],
                             speculative=speculative)  # fmt: skip
        options.validate()
        spec = model_options(ctx.params)
        engines.validate(spec)
        engines.check_levers(spec.engine, options)
        sc.check_context(points, models.context_length(spec), max_new_tokens, batch_prompt_tokens)  # before loading
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "scan")
        check_history(history)
        with measuring(quiet) as (stop, reporter):
            the_scan = sc.Scan(points, spec, options, out_dir, prompts_per_point=prompts_per_point,
                               batch_prompt_tokens=batch_prompt_tokens, seed=seed, reporter=reporter)  # fmt: skip
            record = run_async(the_scan.run_all(stop))
    print_lines(display.scan_lines(record))
    display.out.print(f"wrote {out_dir / 'scan.json'} and {len(points)} run files", markup=False)
    record_file(history, out_dir / "scan.json")
