"""``llmbench paint``: the first painted character in a real browser (headless Chromium), through whatever sits
between the server and it."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import print_lines, run_async, run_options, user_errors
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import PaintSpec


@from_spec(PaintSpec)
def paint(ctx: typer.Context, quiet: QuietOpt = False, **s: Any) -> None:
    """Time to the first painted character: each prompt streamed in headless Chromium (fetch + ReadableStream, a page
    at the endpoint's origin), every event stamped when read, appended and painted (requestAnimationFrame), with the
    buffering detector on the same streams."""
    from llmbench.backends.http.client import chat_url
    from llmbench.drivers import paint as driver
    from llmbench.options import endpoint_options_of
    from llmbench.present import terminal as display
    from llmbench.results.storage import prepare_output
    from llmbench.workloads.prompts import load_prompts

    def progress(kind: str, entry: dict) -> None:
        if quiet:
            return
        where = f"prompt {entry['prompt_index']}" + (" (warm-up)" if kind == "warmup" else "")
        if kind == "failed":
            display.warn(f"{where}: {entry['error']}")
        else:
            ms = {k: "-" if entry[k] is None else f"{entry[k]:.1f}" for k in ("ttft_ms", "first_paint_ms", "e2e_ms")}
            display.info(f"{where}: TTFT {ms['ttft_ms']} ms, first paint {ms['first_paint_ms']} ms, E2E {ms['e2e_ms']} "
                         "ms")  # fmt: skip

    with user_errors():
        spec = ctx.meta["spec"]
        options = run_options(spec)
        target = endpoint_options_of(spec.server, spec.model)
        target.check()
        chat_url(target.endpoint)  # a bad URL is one line before anything is claimed
        prompt_set = load_prompts(spec.prompts.prompts).text_only("paint")
        driver.check_tools(spec.paint.chromium)
        path = prepare_output(spec.outputs.output, spec.outputs.overwrite)
        record = run_async(driver.paint(prompt_set, target, options, chromium=spec.paint.chromium,
                                        client_check=spec.paint.client_check, output=path,
                                        on_request=progress))  # fmt: skip
    display.out.print(display.paint_table(record))
    print_lines(display.paint_lines(record))
    display.out.print(f"wrote {path}", markup=False)
