"""``llmbench sweep``: every setup measured in interleaved rounds, TTFT and TPOT ranked apart."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

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
from llmbench.cli.params import (
    HistoryOpt,
    IgnoreEosOpt,
    MaxNewTokensOpt,
    PromptsArg,
    QuietOpt,
    RankBy,
    SystemPromptOpt,
    WarmupOpt,
)
from llmbench.cli.shared import LOADING, MODEL, takes

# the model options sweep takes as comma lists (each setup gets its own): the base spec keeps their defaults
SWEPT = ("dtype", "threads", "attn", "quantize", "engine", "precision")


@takes("prompts", "dtype", "threads", "attn", "cache", "compile", "quantize", "engine", "precision", "speculative",
       "prefix_cache", *MODEL,
       "device", "max_new_tokens", "ignore_eos", "warmup", "rounds", "rank_by", "quality", "max_kld",
       "system_prompt", "chat_template", *LOADING, "output", "history", "quiet")  # fmt: skip
def sweep(
    ctx: typer.Context,
    prompts: PromptsArg,
    dtype: Annotated[str, typer.Option(help="Comma-separated dtypes: float32,bfloat16,float16.")] = "float32,bfloat16",
    threads: Annotated[Optional[str], typer.Option(help="Comma-separated thread counts, e.g. 1,2.")] = None,
    attn: Annotated[Optional[str], typer.Option(help="Comma-separated attention kernels, e.g. eager,sdpa.")] = None,
    cache: Annotated[str, typer.Option(help="Comma-separated KV caches: dynamic,static.")] = "dynamic",
    compile: Annotated[bool, typer.Option("--compile", help="Also sweep torch.compile'd decoding.")] = False,
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
    speculative: Annotated[
        Optional[str],
        typer.Option(
            help="Comma-separated --speculative values, e.g. none,prompt-lookup:3 (crossed with every setup; "
            "a setup whose greedy output differs from the plain run's can't be best)."
        ),
    ] = None,
    prefix_cache: Annotated[
        Optional[str], typer.Option(help="Comma-separated --prefix-cache values: none,system.")
    ] = None,
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
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Folder (default: results/sweep-<time>).")
    ] = None,
    history: HistoryOpt = None,
    quiet: QuietOpt = False,
    **shared: Any,
) -> None:
    """Find the fastest setup: every combination of engine, precision, dtype, threads, attention, cache, compile,
    quantization, speculative decoding and prefix cache, measured in interleaved rounds; TTFT and TPOT ranked
    apart."""
    from llmbench.drivers import sweep as sw
    from llmbench.present import terminal as display
    from llmbench.workloads.prompts import load_prompts

    with user_errors():
        prompt_set = load_prompts(prompts)
        options = run_options(ctx.params, repeats=rounds, cache=cache, compile=False, speculative=None,
                              prefix_cache="none")  # fmt: skip
        spec = model_options(ctx.params, swept=SWEPT)
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
            the_sweep = sw.Sweep(setups, spec, options, out_dir, reporter=reporter, rank_by=rank_by.value,
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
