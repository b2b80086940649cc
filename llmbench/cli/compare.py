"""``llmbench compare``: a real change told from machine noise, with CI gates; and how a gate's verdict is shown
(``ab`` shows its own the same way)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from llmbench.cli.common import user_errors, written_record
from llmbench.cli.params import (
    CompareFormat,
    FailOnOpt,
    FailOnRegressionOpt,
    FormatOpt,
    GateStatOpt,
    RequireMdcOpt,
    Stat,
)
from llmbench.core.errors import UserError


def compare(
    runs: Annotated[list[Path], typer.Argument(help="BASE.json NEW.json [MORE.json ...]: each NEW against BASE.")],
    fail_on_regression: FailOnRegressionOpt = None,
    fail_on: FailOnOpt = None,
    gate_stat: GateStatOpt = Stat.mean,
    strict: Annotated[bool, typer.Option("--strict", help="Exit 2 when the setups differ.")] = False,
    require_mdc: RequireMdcOpt = None,
    fmt: FormatOpt = CompareFormat.table,
) -> None:
    """Tell a real change from machine noise: change, 95% CI and verdict per metric; CI gates."""
    from llmbench.analysis import compare as cmp
    from llmbench.analysis.gate import gate
    from llmbench.results.kinds import kind_of
    from llmbench.results.storage import load_run

    with user_errors():
        gates = cmp.gate_options(fail_on_regression, fail_on, require_mdc)  # before any file is read
        if len(runs) < 2:
            raise UserError("compare needs at least two run files: BASE.json NEW.json [MORE.json ...]")
        if (first := kind_of(runs[0], among=("load",))).kind == "load":
            if gates or require_mdc is not None:  # refused, not ignored: a gate that can't fail is off
                raise UserError("--fail-on-regression, --fail-on and --require-mdc gate run files, not load.json: "
                                "compare two runs at one rate (BASE/rate-R.json NEW/rate-R.json)")  # fmt: skip
            with written_record(", ".join(str(p) for p in runs)):
                _compare_loads(first.record or {}, runs)
            return
        stamps = ("token_times_ms",) if gate_stat is Stat.gaps else ()  # read only when the statistic needs them
        loaded = [load_run(p, scalars_only=True, request_fields=stamps) for p in runs]
        comps = [cmp.compare_runs(loaded[0], new, base_name=str(runs[0]), new_name=str(path))
                 for new, path in zip(loaded[1:], runs[1:], strict=True)]  # fmt: skip
        verdict = gate(comps, fail_on_regression, fail_on, gate_stat.value, require_mdc)
        for c in comps if strict else []:
            if c.config_diffs:
                diffs = ", ".join(f"{k} {b} -> {n}" for k, b, n in c.config_diffs)
                raise UserError(f"--strict: {c.new} was run with a different setup than {c.base}: {diffs}")
    render_verdict(comps, verdict, fmt)


def _compare_loads(base: dict, paths: list[Path]) -> None:
    """Two load.json at the offered rates both measured; each rate's runs can be compared as runs."""
    from llmbench.present import terminal as display
    from llmbench.results.kinds import kind_of

    if len(paths) != 2:
        raise UserError("compare takes two load.json files: BASE/load.json NEW/load.json")
    second = kind_of(paths[1], among=("load",))
    if second.kind != "load" or second.record is None:
        raise UserError(f"{paths[1]} is not a load.json; compare a load.json with another load.json")
    new = second.record
    common = {r["offered_rate_rps"] for r in base["rates"]} & {r["offered_rate_rps"] for r in new["rates"]}
    if not common:
        raise UserError("the two load tests share no offered rate: run them with the same --rates")
    display.out.print(display.load_comparison(base, new))
    b, n = base["saturation"]["rate_rps"], new["saturation"]["rate_rps"]
    display.out.print(f"saturation: {b} -> {n} requests/s; SLOs {[s['text'] for s in base['slos']]} -> "
                      f"{[s['text'] for s in new['slos']]}", markup=False, soft_wrap=True)  # fmt: skip
    if "fluid_capacity_rps" in base or "fluid_capacity_rps" in new:  # load.json files from before issue 46 lack it
        b, n = (f"{v:g}" if (v := r.get("fluid_capacity_rps")) is not None else "-" for r in (base, new))
        display.out.print(f"fluid capacity: {b} -> {n} requests/s", markup=False, soft_wrap=True)
    rate = min(common)
    runs = " ".join(f"{p.parent}/rate-{rate:g}.json" for p in paths)
    display.out.print(f"for intervals per rate, compare the runs: llmbench compare {runs}", markup=False,
                      soft_wrap=True)  # fmt: skip


def render_verdict(comps: list[Any], verdict: Any, fmt: CompareFormat | str) -> None:
    """compare's (and ab's) output in ``fmt``, then the gate's exit code (see :mod:`llmbench.analysis.gate`). A
    gate whose threshold is below what the run can detect is said loudly: its pass would otherwise be silent and
    blind."""
    import json

    from llmbench.present import terminal as display

    fmt = CompareFormat(fmt)  # ab's spec holds the name, compare's option the enum
    if fmt is CompareFormat.json:
        typer.echo(json.dumps([c.to_dict(k) for c, k in zip(comps, verdict.checks, strict=True)], indent=2,
                              default=str))  # fmt: skip
    for c, k in zip(comps, verdict.checks, strict=True):
        if fmt is CompareFormat.table:
            display.print_comparison(c, k)
        elif fmt is CompareFormat.markdown:
            typer.echo(display.comparison_markdown(c, k))
    from llmbench.analysis.compare import FORK_CAVEAT

    for line in [*verdict.blind, *([FORK_CAVEAT] if any(c.forked for c in comps) else [])]:
        display.err.print(line, markup=False, soft_wrap=True)
        if fmt is CompareFormat.markdown:
            typer.echo(f"> **{line}**")
    if verdict.mdc_error is not None:
        typer.echo(f"llmbench: error: {verdict.mdc_error}", err=True)
    raise typer.Exit(verdict.exit_code)
