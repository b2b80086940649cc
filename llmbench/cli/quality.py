"""``llmbench quality``: is the faster setup still the same model? KL divergence, agreement, perplexity."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from llmbench.cli.common import check_history, model_options, print_lines, record_file, run_async, user_errors
from llmbench.cli.params import (
    DType,
    HistoryOpt,
    MaxNewTokensOpt,
    OverwriteOpt,
)
from llmbench.cli.shared import ENGINE, LOADING, MODEL, takes


@takes(*MODEL, "device", "dtype", "threads", "attn", "quantize", *ENGINE, "compile", "reference_dtype",
       "reference_model", "text", "prompts", "max_new_tokens", "chunk_tokens", "reference_cache", *LOADING,
       "output", "overwrite", "history")  # fmt: skip
def quality(
    ctx: typer.Context,
    compile: Annotated[bool, typer.Option("--compile", help="The candidate decodes through torch.compile.")] = False,
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
    output: Annotated[Path, typer.Option("--output", "-o", help="The quality JSON to write.")] = Path("quality.json"),
    overwrite: OverwriteOpt = False,
    history: HistoryOpt = None,
    **shared: Any,
) -> None:
    """Faster, but still the same model? KL divergence, top-1 agreement and perplexity against a reference setup
    (teacher-forced on a text), and where greedy answers part."""
    from llmbench import engines
    from llmbench.drivers.quality import quality as quality_driver
    from llmbench.options import RunOptions
    from llmbench.present import terminal as display
    from llmbench.results.storage import prepare_output
    from llmbench.workloads.prompts import load_prompts

    with user_errors():
        spec = model_options(ctx.params)
        engines.validate(spec)
        options = RunOptions(max_new_tokens=max_new_tokens, cache="static" if compile else "dynamic", compile=compile)
        options.validate()
        path = prepare_output(output, overwrite)
        check_history(history)
        prompt_set = load_prompts(prompts) if prompts is not None else None
        record = run_async(quality_driver(
            spec, options, reference_dtype=reference_dtype.value, reference_model=reference_model, text=text,
            prompts=prompt_set, chunk_tokens=chunk_tokens, reference_cache=reference_cache, output=path,
        ))  # fmt: skip
    print_lines(display.quality_lines(record))
    display.out.print(f"wrote {path}", markup=False)
    record_file(history, path)
