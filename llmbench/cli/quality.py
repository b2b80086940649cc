"""``llmbench quality``: is the faster setup still the same model? KL divergence, agreement, perplexity."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import (
    check_history,
    model_options,
    print_lines,
    record_file,
    run_async,
    run_options,
    user_errors,
)
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import QualitySpec


@from_spec(QualitySpec)
def quality(ctx: typer.Context, **s: Any) -> None:
    """Faster, but still the same model? KL divergence, top-1 agreement and perplexity against a reference setup
    (teacher-forced on a text), and where greedy answers part."""
    from llmbench import engines
    from llmbench.drivers.quality import quality as quality_driver
    from llmbench.present import terminal as display
    from llmbench.results.storage import prepare_output
    from llmbench.workloads.prompts import load_prompts

    asked = ctx.meta["spec"]
    ref, out = asked.reference, asked.outputs
    history = out.history
    with user_errors():
        spec = model_options(asked)
        engines.validate(spec)
        options = run_options(asked)
        path = prepare_output(out.output, out.overwrite)
        check_history(history)
        prompt_set = load_prompts(ref.prompts).text_only("quality") if ref.prompts is not None else None
        record = run_async(quality_driver(
            spec, options, reference_dtype=ref.reference_dtype, reference_model=ref.reference_model, text=ref.text,
            prompts=prompt_set, chunk_tokens=ref.chunk_tokens, reference_cache=ref.reference_cache, output=path,
        ))  # fmt: skip
    print_lines(display.quality_lines(record))
    display.out.print(f"wrote {path}", markup=False)
    record_file(history, path)
