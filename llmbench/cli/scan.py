"""``llmbench scan``: TTFT, TPOT and throughput curves over controlled prompts, with their fits."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import (
    check_history,
    given,
    measuring,
    model_options,
    print_lines,
    record_file,
    run_async,
    run_options,
    user_errors,
)
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import ScanSpec


@from_spec(ScanSpec)
def scan(ctx: typer.Context, quiet: QuietOpt = False, **s: Any) -> None:
    """TTFT against prompt length, TPOT against context depth, throughput against batch size: controlled prompts,
    interleaved rounds, fitted curves."""
    from llmbench import engines
    from llmbench.drivers import scan as sc
    from llmbench.engines.hf import models
    from llmbench.present import terminal as display

    asked = ctx.meta["spec"]
    engine, speculative, g = asked.model.engine, asked.levers.speculative, asked.scan
    prompt_tokens, depth, batch, rounds = g.prompt_tokens, g.depth, g.batch, g.rounds
    prompts_per_point, batch_prompt_tokens = g.prompts_per_point, g.batch_prompt_tokens
    max_new_tokens, seed = asked.requests.max_new_tokens, asked.requests.seed
    output, history = asked.outputs.output, asked.outputs.history
    default_batch = not given(ctx, "batch")
    with user_errors():
        if engines.engine_info(engine).name != "transformers" and default_batch:
            display.warn(f"--engine {engine}: no batch points (batched generate() is transformers'); the default "
                         "--batch is left out")  # fmt: skip
            batch = ""
        if speculative and default_batch:
            display.warn("--speculative: no batch points (speculative decoding generates one sequence a request); "
                         "the default --batch is left out")  # fmt: skip
            batch = ""
        points = sc.grid(sc.parse_values(prompt_tokens, "--prompt-tokens"), sc.parse_values(depth, "--depth"),
                         sc.parse_values(batch, "--batch"))  # fmt: skip
        sc.check_plan(points, rounds, prompts_per_point, batch_prompt_tokens,
                      {n for n in ("batch_prompt_tokens", "max_new_tokens") if given(ctx, n)})  # fmt: skip
        options = run_options(asked, ignore_eos=True, repeats=rounds)
        spec = model_options(asked)
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
