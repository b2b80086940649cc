"""``llmbench sweep``: every setup measured in interleaved rounds, TTFT and TPOT ranked apart."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import (
    check_history,
    measuring,
    model_options,
    record_file,
    run_async,
    run_options,
    user_errors,
)
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import SweepSpec

# the model options sweep takes as comma lists (each setup gets its own): the base spec keeps their defaults
SWEPT = ("dtype", "threads", "attn", "quantize", "engine", "precision")


@from_spec(SweepSpec)
def sweep(ctx: typer.Context, quiet: QuietOpt = False, **s: Any) -> None:
    """Find the fastest setup: every combination of engine, precision, dtype, threads, attention, cache, compile,
    quantization, speculative decoding and prefix cache, measured in interleaved rounds; TTFT and TPOT ranked
    apart."""
    from llmbench.drivers import sweep as sw
    from llmbench.present import terminal as display
    from llmbench.workloads.prompts import load_prompts

    asked = ctx.meta["spec"]
    g, plan = asked.grid, asked.sweep
    dtype, threads, attn, cache, compile, quantize = g.dtype, g.threads, g.attn, g.cache, g.compile, g.quantize
    engine, precision, speculative, prefix_cache = g.engine, g.precision, g.speculative, g.prefix_cache
    rounds, rank_by, quality, max_kld = plan.rounds, plan.rank_by, plan.quality, plan.max_kld
    output, history = asked.outputs.output, asked.outputs.history
    with user_errors():
        prompt_set = load_prompts(asked.prompts.prompts).text_only("sweep")
        # each setup's cache, compile and levers are its own (setup_options): the base keeps the spec's defaults
        options = run_options(asked, repeats=rounds)
        spec = model_options(asked)
        setups, skipped = sw.plan(spec, options, dtype=dtype, threads=threads, attn=attn, cache=cache,
                                  compile_=compile, quantize=quantize, engine=engine, precision=precision,
                                  speculative=speculative, prefix_cache=prefix_cache)  # fmt: skip
        sw.check_gates(setups, options, prompt_set, max_kld)  # before the folder is made and the models load
        for why in skipped:
            display.warn(f"left out {why}")
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "sweep")
        check_history(history)
        with measuring(quiet) as (stop, reporter):
            reporter.status(f"{len(setups)} setups x {rounds} rounds x {len(prompt_set.prompts)} prompts -> {out_dir}")
            the_sweep = sw.Sweep(setups, spec, options, out_dir, reporter=reporter, rank_by=rank_by,
                                 quality=quality, max_kld=max_kld)  # fmt: skip
            record = run_async(_load_and_sweep(the_sweep, prompt_set, stop))
    for t in display.sweep_tables(record):
        display.print_wide(t)  # setups don't wrap, even in a CI log
    for line in display.sweep_verdicts(record):
        display.out.print(line, soft_wrap=True, markup=False)
    display.out.print(f"wrote {out_dir / 'sweep.json'} and {len(setups)} run files", markup=False)
    record_file(history, out_dir / "sweep.json")


async def _load_and_sweep(the_sweep: Any, prompts: Any, stop: Any) -> dict:
    await the_sweep.load(prompts)
    return await the_sweep.run(prompts, stop)
