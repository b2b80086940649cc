"""``llmbench load``: a server under open-loop load, rate by rate, against SLOs."""

from __future__ import annotations

from typing import Any

import typer

from llmbench.cli.common import (
    check_history,
    measuring,
    print_lines,
    record_file,
    run_async,
    run_options,
    user_errors,
)
from llmbench.cli.params import QuietOpt
from llmbench.cli.specs import from_spec
from llmbench.spec.commands import LoadTestSpec


@from_spec(LoadTestSpec)
def load(ctx: typer.Context, quiet: QuietOpt = False, **s: Any) -> None:
    """A server under open-loop load, rate by rate: latency percentiles, 429s, goodput under SLOs, fluidity and
    stalls, the saturation point and the fluid capacity."""
    from llmbench.drivers import load as ld
    from llmbench.drivers import workload
    from llmbench.options import endpoint_options_of
    from llmbench.present import terminal as display

    asked = ctx.meta["spec"]
    a, output, history = asked.arrivals, asked.outputs.output, asked.outputs.history
    with user_errors():
        spec = ld.LoadSpec(
            rates=ld.parse_rates(a.rates), slos=[ld.Slo.parse(t) for t in a.slo or []], arrival=a.arrival,
            duration_s=None if a.requests is not None else a.duration_s, requests=a.requests, seed=asked.requests.seed,
            workers=a.workers, ray=a.ray, min_attainment=a.min_attainment, one_token_passes=a.one_token_passes,
            fluidity_target=a.fluidity_target, fluidity_share=a.fluidity_share, auto_start=a.auto_start,
            auto_steps=a.auto_steps, stop_saturated=a.stop_saturated, stop_min_s=a.stop_min_s,
            stop_window_s=a.stop_window_s, probe_rate=a.probe_rate,
        )  # fmt: skip
        spec.validate()
        target = endpoint_options_of(asked.server, asked.model, asked.arrivals)
        options = run_options(asked)
        prompt_set = workload.prompt_list(workload.Workload.of(asked), options, asked.server.tokenizer)
        from llmbench.results.storage import prepare_driver_dir

        out_dir = prepare_driver_dir(output, "load")
        check_history(history)
        with measuring(quiet) as (stop, reporter):
            record, path = run_async(ld.load(prompt_set, target, options, spec, out_dir, stop=stop,
                                             reporter=reporter))  # fmt: skip
    display.print_wide(display.load_table(record), display.LOAD_TABLE_WIDTH)
    print_lines(display.load_lines(record))
    probed = sum(1 for r in record["rates"] if r.get("probes"))
    display.out.print(f"wrote {path} and {len(record['rates'])} run files"
                      + (f" (and {probed} probe files)" if probed else ""), markup=False)  # fmt: skip
    record_file(history, path)
