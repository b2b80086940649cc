"""Terminal output: warnings, the live progress bar and the summary table (rich). No measuring here.

Why one module of 1,100-odd lines (over 600): every command's terminal rendering shares one console, one set of
number formats and one table style; the pieces are short functions, one per thing shown, and splitting them by
command would write the formats twice."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from llmbench.core.redact import redact_url, scrub
from llmbench.results.schema import RequestResult, Run, Stats

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)
LOAD_TABLE_WIDTH = 200  # load's table has 16 columns: printed whole in a CI log, not squeezed to ellipses


def print_wide(renderable: Any, min_width: int = 120) -> None:
    """Print on stdout at least ``min_width`` columns wide (a CI log's 80 would cut a sweep's columns).
    ``Console.print(width=...)`` does not widen a table's layout; the console's width does."""
    old = out.width
    out.width = max(old, min_width)
    try:
        out.print(renderable)
    finally:
        out.width = old


def warn(message: str) -> None:
    """A warning the user must not miss (stderr). The message is text, never markup: it may carry names from
    files or servers, and URLs, redacted (a driver's line may name the endpoint as given)."""
    message = scrub(message)
    loud = message.isupper() or message.split(":")[0].isupper()
    err.print(f"[bold red]warning:[/] {escape(message)}" if loud else f"[yellow]warning:[/] {escape(message)}",
              soft_wrap=True)  # fmt: skip


def info(message: str) -> None:
    """A progress note on stderr (kept off stdout so it stays parseable); URLs in it redacted."""
    err.print(f"[dim]{escape(scrub(message))}[/]", soft_wrap=True)


class ProgressReporter:
    """The loop's reporter on a terminal: status lines, warnings, and a bar over warm-ups and requests."""

    def __init__(self, progress: Any, quiet: bool = False) -> None:  # a rich Progress
        self.progress = progress
        self.quiet = quiet
        self.warned: set[str] = set()  # a driver's many runs (a scan's rounds, a sweep's setups) say it once
        # started on first use: the clock of a bar must not count the model's loading
        self.wtask = progress.add_task("warmup", total=None, last="", visible=False, start=False)
        self.task = progress.add_task("requests", total=None, last="", visible=False, start=False)

    def status(self, text: str) -> None:
        if not self.quiet:  # URLs redacted: a driver's status line may name the endpoint as it was given
            self.progress.console.print(f"[dim]{escape(scrub(text))}[/]", soft_wrap=True)

    def warn(self, text: str) -> None:
        if text not in self.warned:
            self.warned.add(text)
            warn(text)

    def warmup(self, done: int, total: int) -> None:
        self.progress.start_task(self.wtask)
        self.progress.update(self.wtask, completed=done, total=total, visible=True, refresh=True)

    def request(self, result: RequestResult, done: int, total: int) -> None:
        tpot = f"{result.tpot_ms:.1f}" if result.tpot_ms is not None else "-"
        if result.ttft_ms is None:  # an answer of tool calls alone: no text, its call's wait instead
            names = ",".join(result.tool_call_names or [])
            last = f"tool call {names} at {result.tool_name_ms or 0:.1f} ms  {result.tool_call_tokens or 0} tok"
        else:
            last = f"TTFT {result.ttft_ms:.1f} ms  TPOT {tpot} ms  {result.output_tokens} tok"
        self.progress.start_task(self.task)
        self.progress.update(self.task, completed=done, total=total, last=last, visible=True, refresh=True)

    def outcome(self, item: Any, in_flight: int, now_s: float) -> None:
        pass  # the bar follows requests (request above); outcomes are for watchers


@contextmanager
def reporter(quiet: bool = False) -> Iterator[ProgressReporter]:
    """A :class:`ProgressReporter` on stderr (``quiet``: no bar and no status notes; warnings stay).

    The bar is drawn when a request finishes, never by rich's refresh thread: that thread woke 10 times a second
    and competed with the model's threads during generation (on 2 cores: TPOT +1.8% [-2.3, +5.3], 12 rounds,
    benchmarks/side_costs.py progress). Drawn between requests, it can't touch a timed one.
    """
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"),
        console=err,
        disable=quiet,
        transient=False,
        auto_refresh=False,
    )
    progress.start()
    try:
        yield ProgressReporter(progress, quiet)
    finally:
        # refused before any bar showed: its empty last frame would print a blank line above the one-line refusal
        hidden, quiet_before = not any(t.visible for t in progress.tasks), err.quiet
        err.quiet = quiet_before or hidden
        try:
            progress.stop()
        finally:
            err.quiet = quiet_before


# (label, Summary field, decimals): the rows of every summary table, terminal and HTML
SUMMARY_ROWS = (
    ("TTFT (ms)", "ttft_ms", 1),
    ("TPOT (ms)", "tpot_ms", 2),
    ("output tokens", "output_tokens", 1),
    ("E2E, total (ms)", "e2e_ms", 1),
    ("decode tokens/s", "decode_tokens_per_s", 2),
    ("prefill tokens/s", "prefill_tokens_per_s", 1),
)
SUMMARY_COLUMNS = ("mean", "p50", "p90", "min", "max")  # the statistics of each row, terminal and HTML
# the shape of the wait (llmbench.results.reader; docs/metrics.md), shown when the run has it
SHAPE_ROWS = (
    ("decode chars/s", "decode_chars_per_s", 1),
    ("reader stall (ms)", "reader_stall_ms", 1),
    ("reader stalls", "reader_stalls", 2),
    ("Andes QoE", "andes_qoe", 3),
    ("fluidity", "fluidity", 3),
    # what a program waits for (llmbench.results.agents): shown when the answers called tools
    ("tool name (ms)", "tool_name_ms", 1),
    ("tool args whole (ms)", "tool_args_ms", 1),
)


def _fmt(s: Stats | None, key: str, digits: int = 1) -> str:
    if s is None:
        return "-"
    return f"{getattr(s, key):.{digits}f}"


def setup_title(run: Run) -> str:
    """What was measured, in one line of the facts the run knows: a server's URL and concurrency, and whatever its
    /health said of its weights, device and dtype (an endpoint's threads and unstated facts are not shown as
    "None" or "unknown"); a model here with its engine, weights, device, dtype and threads."""
    c = run.config
    endpoint = c.mode == "endpoint" and c.endpoint is not None
    engine = [c.engine] if c.engine not in (None, "transformers") and not endpoint else []
    known = [
        f"{c.weights} weights" if c.weights != "unknown" else "",
        "" if engine or c.device in ("endpoint", "unknown") else c.device,
        "" if c.dtype == "unknown" else c.dtype,
        f"{c.threads} threads" if c.threads is not None else "",
    ]
    if endpoint:
        assert c.endpoint is not None  # recorded redacted; a file from elsewhere may not be
        head = [f"{c.model} via {redact_url(c.endpoint.url)}", f"concurrency {c.endpoint.concurrency}"]
        return " · ".join([*head, *(k for k in known if k)])
    return " · ".join([c.model, *engine, *(k for k in known if k)])


def summary_rows(run: Run) -> list[tuple[str, Stats | None, int]]:
    """(label, stats, decimals) of every row a summary table shows, the terminal's and the report's alike: the
    timings, then the shape of the wait where the run has it."""
    s = run.summary
    if s is None:
        return []
    rows = [(label, getattr(s, key), digits) for label, key, digits in SUMMARY_ROWS]
    return rows + [(label, stats, digits) for label, key, digits in SHAPE_ROWS if (stats := getattr(s, key))]


def summary_table(run: Run) -> Table:
    """Mean/p50/p90/min/max of each metric; its first column is the seed's table (means)."""
    s = run.summary
    c = run.config
    table = Table(title=escape(setup_title(run)), title_justify="left")
    table.add_column("metric")
    for col in SUMMARY_COLUMNS:
        table.add_column(col, justify="right")
    if s is None:
        return table
    for label, stats, digits in summary_rows(run):
        table.add_row(label, *(_fmt(stats, k, digits) for k in SUMMARY_COLUMNS))
    caption = f"{s.requests} requests" + ("" if run.complete else " (incomplete run)")
    if s.tpot_bound_ms is not None and s.tpot_efficiency is not None:
        caption += (
            f"; roofline: TPOT >= {s.tpot_bound_ms:.1f} ms (weights / {s.roofline_mem_read_gbps:.1f} GB/s), "
            f"efficiency {s.tpot_efficiency:.2f}"
        )
    if s.stream_buffered is not None:
        share = 100 * (s.stream_gaps_under_1ms_share or 0)
        caption += (
            f"; stream: {share:.0f}% of gaps < 1 ms, largest burst: {s.stream_largest_burst} event(s) "
            f"({'buffered' if s.stream_buffered else 'not buffered'})"
        )
    if s.engine_tpot_ms is not None and s.tpot_vs_engine_pct is not None:
        caption += (f"; {c.engine}'s own timer: TPOT {s.engine_tpot_ms.mean:.2f} ms (llmbench's "
                    f"{s.tpot_vs_engine_pct:+.1f}%)")  # fmt: skip
    if s.prompt_reuse_requests is not None:
        reuse = s.prompt_reuse_requests
        caption += "; every prompt evaluated whole" if not reuse else f"; {reuse} requests reused a cached prefix"
    if s.failed_requests:
        caption += f"; {s.failed_requests} failed"
    table.caption = caption
    return table


# ---------------------------------------------------------------------------------------------- compare


def _num(v: float | None, digits: int = 2) -> str:
    return "-" if v is None else f"{v:.{digits}f}"


def _pct(v: float) -> str:
    return f"{v:+.1f}%" if v == v else "-"


def _ci(low: float, high: float) -> str:
    return "-" if low != low else f"{low:+.1f}..{high:+.1f}%"


def compare_lines(comp, checks: list[Any]) -> tuple[list[str], list[str]]:
    """The facts above and below compare's table (shared by the table and markdown formats). Plain text:
    the terminal escapes it."""
    pairing = f"paired by (prompt_index, repeat): {comp.n_pairs} pairs" if comp.paired else "unpaired"
    if comp.n_ttft_pairs:
        pairing += f" (and {comp.n_ttft_pairs} one-token pairs in TTFT's rows)"
    head = [f"{comp.n_base} -> {comp.n_new} requests, {pairing}", *comp.workload]
    # the statistic the gate tests for each metric (gaps: TPOT's own; TTFT then on the median), else the one
    # that speaks for it (TPOT's gaps when stamped, else the median)
    stat_of = {m: comp.spoken_stat(m) for m in ("ttft_ms", "tpot_ms")} | {c.metric: c.stat for c in checks}
    detectable = [(label, stat_of[m], comp.detectable_pct(m, stat_of[m]))
                  for m, label in (("ttft_ms", "TTFT"), ("tpot_ms", "TPOT"))]  # fmt: skip
    known = [(label, st, d) for label, st, d in detectable if d is not None]
    if known:
        if len({st for _, st, _ in known}) == 1:
            what = f"changes of the {known[0][1]} above " + ", ".join(f"{d:.1f}% in {label}" for label, _, d in known)
        else:
            what = "changes above " + ", ".join(f"{d:.1f}% in {label} ({st})" for label, st, d in known)
        size = f"{comp.n_pairs} pairs" if comp.paired else f"{min(comp.n_base, comp.n_new)} requests a side"
        head.append(f"with {size}, {what} would be called significant (half the 95% interval)")
    head += [
        f"setup differs: {k}: auto chose {b}, then {n} (an automatic choice, not an option that changed)"
        if k in comp.auto_diffs
        else f"setup differs: {k}: {b} -> {n}"
        for k, b, n in comp.config_diffs
    ]
    head += [f"environment differs: {k}: {b} -> {n}" for k, b, n in comp.env_diffs]
    if comp.paired and comp.outputs_compared:
        head.append(f"outputs: {comp.outputs_changed} of {comp.outputs_compared} changed ({comp.outputs_note})")
    else:
        head.append(f"outputs: {comp.outputs_note}")
    head += quality_change_lines(comp)
    head += [line for who in ("base", "new") if (line := lever_line(comp.levers.get(who), f"{who}: ")) is not None]
    head += cold_start_lines(comp.cold)
    tail = []
    mem, mm = comp.probes["mem_read_gbps"], comp.probes["matmul_gflops"]
    if mem["base"] and mem["new"] and mm["base"] and mm["new"]:
        tail.append(
            f"machine probe: memory read {mem['base']:.1f} -> {mem['new']:.1f} GB/s "
            f"({100 * (mem['new'] / mem['base'] - 1):+.0f}%), matmul {mm['base']:.0f} -> {mm['new']:.0f} GFLOP/s "
            f"({100 * (mm['new'] / mm['base'] - 1):+.0f}%)"
        )
    tail += [f"{note.metric}: {note.explanation}" for note in comp.machine]
    tail += [
        f"{who}'s CLIENT FELL BEHIND ({why}): its TTFT and ITL hold the client's own delay, and a change "
        "between the runs may be the clients'"
        for who, why in getattr(comp, "client_behind", {}).items()
    ]
    tail += [changed_line(comp), *noise_lines(comp)]
    few: dict[str, list[str]] = {}
    for r in comp.rows:
        if r.too_few:
            few.setdefault(r.too_few, []).append(f"{r.metric} {r.stat}")
    tail += [f"no 95% interval, no verdict ({why}): {', '.join(rows)}" for why, rows in few.items()]
    tail += shape_lines(comp.shape)
    for c in checks:
        status = "REGRESSION" if c.regression else "ok"
        if c.difference is not None:  # a shape metric: NEW - BASE in its unit
            low, high = c.difference_ci
            tail.append(f"gate {c.metric} (mean a request): {c.difference:+.4g} {c.unit}, 95% CI "
                        f"{_span(low, high)}, threshold {c.threshold:g} {c.unit} worse: {status}")  # fmt: skip
            continue
        tail.append(
            f"gate {c.metric} {c.stat}: {_pct(c.change_pct)}, 95% CI {_ci(c.ci_low_pct, c.ci_high_pct)}, "
            f"threshold {c.threshold_pct:g}%: {status}"
        )
    return head, tail


def _span(low: float, high: float) -> str:
    return f"[{low:+.4g}, {high:+.4g}]" if low == low else "none (too few)"  # NaN: no interval


def shape_lines(rows: list[Any]) -> list[str]:
    """compare's shape-of-the-wait rows (llmbench.analysis.shape): NEW - BASE a request, in each metric's unit."""
    if not rows:
        return []
    parts = [f"{r.metric} {r.base:.4g} -> {r.new:.4g} ({r.difference:+.4g} {r.unit}, 95% CI "
             f"{_span(r.ci_low, r.ci_high)}" + ("" if r.verdict == "(information)" else f", {r.verdict}") + ")"
             for r in rows]  # fmt: skip
    return ["the shape of the wait (mean a request; new - base): " + "; ".join(parts)]


def changed_line(comp) -> str:
    """What compare says changed: the rows that speak and found a change (never a row of information)."""
    from llmbench.analysis.compare import METRICS

    found = [f"{METRICS[r.metric][0]} {r.stat} {_pct(r.change_pct)} ({r.verdict})" for r in comp.changed()]
    if found:
        return "changed: " + ", ".join(found)
    return "changed: nothing significant in the rows that speak (medians, TPOT gaps, gated rows)"


def noise_lines(comp) -> list[str]:
    """Where the noise of TTFT's and TPOT's speaking rows is (``ab --processes``): between processes or between
    pairs within one, and what more of either would buy."""
    out = []
    for metric, v in comp.variance.items():
        label = {"ttft_ms": "TTFT", "tpot_ms": "TPOT"}.get(metric, metric)
        out.append(
            f"noise ({label} {v['stat']}, {v['processes']} processes x {v['pairs_per_process']:g} pairs): sd between "
            f"processes {v['sd_between_processes_pct']:.1f}%, between pairs within one "
            f"{v['sd_within_process_pct']:.1f}%; {v['advice']} (MDC {v['mdc_pct']:.1f}%; 2x processes "
            f"~{v['mdc_2x_processes_pct']:.1f}%, 2x pairs ~{v['mdc_2x_pairs_pct']:.1f}%)"
        )
    return out


COMPARE_COLUMNS = ["metric", "stat", "base", "new", "change", "95% CI", "verdict"]


def cold_start_lines(cold: dict[str, dict[str, Any]]) -> list[str]:
    """compare's cold-start line: base -> new for the figures both runs have (each run's first process: no
    interval; ab's runs have a row over their processes, the ``load s`` and ``ready s`` rows)."""
    b, n = cold.get("base"), cold.get("new")
    if not b or not n:
        return []
    shown = [f"{label} {b[k]:.2f} -> {n[k]:.2f}{unit}" for k, label, unit in (
        ("ready_s", "ready", " s"), ("load_s", "load", " s"), ("warmup_s", "warm-up", " s"),
        ("first_ttft_ms", "first TTFT", " ms")) if b.get(k) is not None and n.get(k) is not None]  # fmt: skip
    if not shown:
        return []
    return [f"cold start (each run's first process, information): {', '.join(shown)}"]


def compare_caption() -> str:
    """What compare's table's columns mean: its change, the verdicts' level, its rows of information."""
    from llmbench.analysis.variance import VERDICT_CONFIDENCE

    return (f"change = stat(new)/stat(base) - 1 (paired p50, gaps: the median over pairs of new/base); verdicts "
            f"hold at 95% over TTFT, TPOT and E2E together (each CI widened to {100 * VERDICT_CONFIDENCE:.1f}%): "
            "n.s. = that CI includes 0; (information): a mean or p90, shown, never a verdict")  # fmt: skip


def _row_cells(r, regression: bool, first: bool = True, short: bool = False) -> list[str]:
    from llmbench.analysis.compare import METRICS

    digits = 1 if r.metric == "output_tokens" else 2
    verdict = "REGRESSION" if regression else r.verdict
    if short and verdict == "no significant change":
        verdict = "n.s."
    elif short and r.too_few:
        verdict = "too few"  # the whole line is under the table
    return [
        METRICS[r.metric][0] if first else "",
        r.stat,
        _num(r.base, digits),
        _num(r.new, digits),
        _pct(r.change_pct),
        _ci(r.ci_low_pct, r.ci_high_pct),
        verdict,
    ]


def _regressed(checks: list[Any]) -> set[tuple[str, str]]:
    return {(c.metric, c.stat) for c in checks if c.regression}


def compare_table(comp, checks: list[Any]) -> Table:
    """compare's rich table, colored by verdict."""
    bad = _regressed(checks)
    table = Table(title=escape(f"{comp.base} -> {comp.new}"), title_justify="left", box=box.SIMPLE_HEAD,
                  pad_edge=False)  # fmt: skip
    for i, col in enumerate(COMPARE_COLUMNS):
        table.add_column(col, justify="right" if 2 <= i <= 5 else "left", no_wrap=True)
    for i, r in enumerate(comp.rows):
        first = i == 0 or comp.rows[i - 1].metric != r.metric
        last = i + 1 == len(comp.rows) or comp.rows[i + 1].metric != r.metric
        regression = (r.metric, r.stat) in bad
        style = "bold red" if regression else {"slower": "red", "faster": "green"}.get(r.verdict)
        table.add_row(*_row_cells(r, regression, first, short=True), style=style if r.speaks else "dim",
                      end_section=last)  # fmt: skip
    table.caption = compare_caption()
    return table


def print_comparison(comp, checks: list[Any]) -> None:
    """compare, the terminal way."""
    head, tail = compare_lines(comp, checks)
    for line in head:
        out.print(escape(line), soft_wrap=True)
    out.print(compare_table(comp, checks))
    for line in tail:
        out.print(escape(line), soft_wrap=True)


def comparison_markdown(comp, checks: list[Any]) -> str:
    """compare as markdown, for a pull-request comment."""
    head, tail = compare_lines(comp, checks)
    bad = _regressed(checks)
    lines = [f"### llmbench compare: `{comp.base}` -> `{comp.new}`", ""]
    lines += [f"- {x}" for x in head] + [""]
    lines.append("| " + " | ".join(COMPARE_COLUMNS) + " |")
    lines.append("|" + "|".join("---:" if 2 <= i <= 5 else "---" for i in range(len(COMPARE_COLUMNS))) + "|")
    for r in comp.rows:
        regression = (r.metric, r.stat) in bad
        cells = _row_cells(r, regression)
        if regression:
            cells[-1] = f"**{cells[-1]}**"
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", f"_{compare_caption()}_", "", *[f"- {x}" for x in tail]]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- sweep


def sweep_tables(record: dict) -> list[Table]:
    """Two tables of a sweep: sorted by TPOT and by TTFT; the best of each and the Pareto setups marked."""
    rows = record["results"]
    front = set(record.get("pareto", []))
    best = {m: (b or {}).get("label") for m, b in record.get("best", {}).items()}
    tables = []
    compiled = any(r.get("compile") for r in rows)
    quality = any(r.get("kld_mean") is not None for r in rows)
    levers = any(r.get("tokens_per_forward") is not None for r in rows)
    for metric, title in (("tpot_ms", "by TPOT (decoding)"), ("ttft_ms", "by TTFT (first token)")):
        key = f"{metric}_{record.get('rank_by', 'mean')}"
        ordered = sorted(rows, key=lambda r: (r[key] is None, r[key] or 0.0))
        stat = record.get("rank_by", "mean")
        t = Table(title=f"sweep {title}, {stat}s", title_justify="left", box=box.SIMPLE_HEAD)
        t.add_column("setup", no_wrap=True)
        extra = (("compile s",) if compiled else ()) + (("KLD", "top-1", "same greedy") if quality else ()) + (
            ("tokens/forward", "accepted") if levers else ())  # fmt: skip
        for col in ("TPOT ms", "TTFT ms", "efficiency", *extra):
            t.add_column(col, justify="right", no_wrap=True)
        t.add_column("", no_wrap=True)
        for r in ordered:
            marks = []
            if r["label"] == best.get(metric):
                marks.append(f"best {'TPOT' if metric == 'tpot_ms' else 'TTFT'}")
            if r["label"] in front:
                marks.append("pareto")
            if r.get("excluded_by_max_kld"):
                marks.append("over --max-kld" if r.get("kld_mean") is not None else "no KLD: not eligible")
            if r.get("failed"):
                marks.append("FAILED (its engine crashed)")
            if r.get("excluded_by_lossless"):
                marks.append(f"NOT LOSSLESS ({r['lossless_mismatches']} requests): not eligible")
            t.add_row(
                escape(r["label"]),
                _num(r[f"tpot_ms_{stat}"]),
                _num(r[f"ttft_ms_{stat}"], 1),
                _num(r["tpot_efficiency"]),
                *((_num(r["compile_s"], 1),) if compiled else ()),
                *(
                    (
                        _kld(r.get("kld_mean")),
                        _num(r.get("top1_agreement"), 3),
                        _num(r.get("greedy_identical_share"), 2),
                    )
                    if quality
                    else ()
                ),
                *((_num(r.get("tokens_per_forward")), _pct_or_dash(r.get("acceptance_rate"))) if levers else ()),
                ", ".join(marks),
            )
        tables.append(t)
    return tables


def _pct_or_dash(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def quality_change_lines(comp: Any) -> list[str]:
    """The quality figures of both runs (same reference), or why they were not compared."""
    if comp.quality_note:
        return [f"quality: {comp.quality_note}"]
    if not comp.quality:
        return []
    names = {"kld_mean": "KLD mean", "kld_p99": "KLD p99", "top1_agreement": "top-1 agreement",
             "greedy_identical_share": "identical greedy answers"}  # fmt: skip
    parts = []
    for k, (b, n) in comp.quality.items():
        fmt = _kld if k.startswith("kld") else (lambda v: _num(v, 3))
        parts.append(f"{names[k]} {fmt(b)} -> {fmt(n)}")
    return ["quality vs the same reference: " + ", ".join(parts)]


def _kld(v: float | None) -> str:
    return "-" if v is None else f"{v:.2e}" if 0 < v < 1e-3 else f"{v:.4f}"


def sweep_verdicts(record: dict) -> list[str]:
    """One line per metric: the best setup and whether it beats the runner-up beyond noise."""
    lines = []
    for metric, name in (("tpot_ms", "TPOT"), ("ttft_ms", "TTFT")):
        b = record["best"].get(metric)
        if not b:
            continue
        m = record.get("best_margin", {}).get(metric)
        if m and m.get("too_few"):  # no interval holds at this n: neither "beyond" nor "within" noise
            lines.append(f"best {name}: {b['label']} (runner-up {m['runner_up']} is {m['runner_up_slower_pct']:+.1f}%; "
                         f"{m['too_few']} to tell it from noise)")  # fmt: skip
        elif m:
            sure = "beyond noise" if m["significant"] else "within noise: not a clear winner"
            lines.append(
                f"best {name}: {b['label']} (runner-up {m['runner_up']} is {m['runner_up_slower_pct']:+.1f}% "
                f"[{m['ci95_low_pct']:+.1f}, {m['ci95_high_pct']:+.1f}], {sure})"
            )
        else:
            lines.append(f"best {name}: {b['label']}")
    if record.get("pareto"):
        lines.append("no other setup beats on both: " + "; ".join(record["pareto"]))
    if record.get("excluded_by_max_kld"):
        lines.append(f"not eligible (KL divergence above --max-kld {record['max_kld']:g}, or none to check: an engine "
                     "without logits): " + "; ".join(record["excluded_by_max_kld"]))  # fmt: skip
    if record.get("excluded_by_lossless"):
        lines.append("not eligible (greedy output differs from the plain run's: not lossless): "
                     + "; ".join(record["excluded_by_lossless"]))  # fmt: skip
    lines += [f"note: {n}" for n in record.get("quality_notes", [])]
    return lines


def open_loop_line(run: Run) -> str | None:
    """An open-loop run's rates and the client's lateness, or None for a closed loop."""
    s, e = run.summary, run.config.endpoint
    if s is None or e is None or e.arrival is None or s.send_lateness_ms is None:
        return None
    late = s.send_lateness_ms
    workers = f" over {e.workers} workers" if e.workers > 1 else ""
    return (f"open loop: offered {e.arrival.rate_rps:g}/s ({e.arrival.process}){workers}, achieved "
            f"{_num(s.achieved_rate_rps)}/s; send lateness p50 {late.p50:.2f} ms, p99 {late.p99:.2f} ms, max "
            f"{late.max:.2f} ms")  # fmt: skip


def client_line(c: Any) -> str:
    """What the endpoint client itself cost (it shares the machine with a co-located server), and its self-check:
    how far its stamps were behind the server's sends, and its event loop's lag."""
    per_event = f", {c.cpu_ms_per_event:.3f} ms per event" if c.cpu_ms_per_event is not None else ""
    processes = getattr(c, "processes", 1) or 1
    over = f" over {processes} processes" if processes > 1 else ""
    line = (f"client: {c.cpu_s:.2f} s CPU in {c.wall_s:.1f} s{over} ({c.cpu_pct_of_one_core:.1f}% of one core"
            f"{per_event})")  # fmt: skip
    if getattr(c, "lag_p99_ms", None) is not None:
        line += f"; stamps behind the server's sends p50 {c.lag_p50_ms:.2f} ms, p99 {c.lag_p99_ms:.2f} ms"
    if getattr(c, "loop_lag_p99_ms", None) is not None:
        line += f"; event loop lag p99 {c.loop_lag_p99_ms:.2f} ms"
    return line + ("; FELL BEHIND" if getattr(c, "fell_behind", None) else "")


def scan_lines(record: dict) -> list[str]:
    """A scan's curves and fits as plain lines (the terminal prints them as text)."""
    lines = [f"scan of {record['model']} on {record['device']} ({record['dtype']}, {record['threads']} threads), "
             f"{record['rounds']} rounds{'' if record['complete'] else ' (INCOMPLETE)'}"]  # fmt: skip
    by_kind: dict[str, list[dict]] = {}
    for p in record["points"]:
        by_kind.setdefault(p["kind"], []).append(p)
    fits = record["fits"]
    if "length" in by_kind:
        cells = ", ".join(f"{p['value']} tokens {_num(p.get('ttft_ms_mean'), 1)} ms" for p in by_kind["length"])
        lines.append(f"TTFT by prompt length: {cells}")
        f = fits.get("length")
        if f:
            lo, hi = (1000 * v for v in f["ci95"]["b_ms_per_token"])
            half = f["quadratic_half_at_tokens"]
            where = (f"the quadratic term is half the cost at {half:.0f} tokens" if half
                     else "the quadratic term stays under half the cost in the range measured")  # fmt: skip
            lines.append(
                f"  fit: TTFT = {f['a_ms']:.1f} ms + {f['b_ms_per_token']:.4f} ms x L + "
                f"{f['c_ms_per_token2']:.3g} ms x L^2 (R\u00b2 {f['r2']:.3f}): "
                f"{f['prefill_ms_per_1k_tokens']:.1f} ms of prefill per 1,000 tokens [{lo:.1f}, {hi:.1f}]; {where}"
            )
    if "depth" in by_kind:
        cells = ", ".join(f"{p.get('prompt_tokens', p['value'])} tokens {_num(p.get('tpot_ms_mean'))} ms"
                          for p in by_kind["depth"])  # fmt: skip
        lines.append(f"TPOT by context depth: {cells}")
        f = fits.get("depth")
        if f:
            lines.append(f"  fit: TPOT = {f['t0_ms']:.2f} ms + {f['ms_per_1k_context_tokens']:.3f} ms per 1,000 tokens "
                         f"of context (R\u00b2 {f['r2']:.3f}); roofline: "
                         + ", ".join(f"{d} -> {v} ms" for d, v in f["roofline_tpot_ms"].items()))  # fmt: skip
    f = fits.get("batch")
    if f:
        cells = ", ".join(
            f"{r['batch']}: {r['aggregate_decode_tokens_per_s']:.1f} tok/s"
            + (
                f" (roofline {r['roofline_aggregate_tokens_per_s']:.0f})"
                if r["roofline_aggregate_tokens_per_s"]
                else ""
            )
            for r in f["table"]
        )
        lines.append(f"decode throughput by batch: {cells}")
        sat = f["saturation_batch"]
        lines.append(
            f"  throughput stops growing after batch {sat}" if sat else "  throughput still grows at the largest batch"
        )
    return lines


def quality_lines(record: dict) -> list[str]:
    """quality.json as plain lines."""
    c, r, g = record["candidate"], record["reference"], record["greedy"]
    setup = " ".join(str(x) for x in (_weights(c), c.get("attn") or "", "compiled" if c.get("compile") else "") if x)
    lines = [f"{setup} against {r['dtype']} ({r['model']}), {record['positions']} positions of "
             f"{record['text']['source']} ({record['kld_method']})"]  # fmt: skip
    ppl = record["perplexity_reference"]
    lines.append(
        f"KL divergence: mean {record['kld_mean']:.5f}, p99 {record['kld_p99']:.4f}, max {record['kld_max']:.3f}; "
        f"top-1 agreement {record['top1_agreement']:.3f}; perplexity {record['perplexity_candidate']:.3f}"
        + (f" (reference {ppl:.3f})" if ppl is not None else "")
    )
    share = g["identical_share"]
    lines.append(f"greedy: {share:.0%} of {g['prompts']} answers identical for {g['max_new_tokens']} tokens; the "
                 f"others part at token {g['first_divergence_median']:g} (median, identical ones counted as "
                 f"{g['max_new_tokens']})")  # fmt: skip
    lines += [f"note: {n}" for n in record.get("notes", [])]
    return lines


def _weights(setup: dict) -> str:
    """``bfloat16``, ``bfloat16+int8`` (weight-only int8 computes in the dtype) or ``int8-dynamic``."""
    q = setup.get("quantize")
    return f"{setup['dtype']}+{q}" if q == "int8" else (q or setup["dtype"])


def _p(d: dict | None, key: str, digits: int = 0) -> str:
    return "-" if not d or d.get(key) is None else f"{d[key]:,.{digits}f}"


def _share(v: float | None) -> str:
    """A share as a percentage: whole when it is one (100%), else to a tenth (99.5%, not a rounded 100%)."""
    if v is None:
        return "-"
    return f"{v:.0%}" if round(v * 100, 6).is_integer() else f"{v:.1%}"


def load_table(record: dict) -> Table:
    """load.json's rates, each on its steady-state window where one was found ("window": its share of the
    requests; "all": the whole run): offered and achieved rate, latency percentiles (TTFT's p99 with its 95% upper
    bound), errors, goodput, attainment with its lower 95% bound, fluidity attainment, stall-free share and the
    verdict ("-" in a load.json from before them)."""
    title = (f"load on {record['endpoint']} ({record['model']}), {record['arrival']} arrivals, SLOs: "
             + ", ".join(s["text"] for s in record["slos"]))  # fmt: skip
    t = Table(title=escape(title), title_justify="left")  # names from a server are text, never markup
    for col in ("offered/s", "achieved/s", "window", "TTFT p50", "TTFT p90", "TTFT p99 (<= 95%)", "TPOT p50",
                "TPOT p90", "late p99", "failed", "429", "goodput/s", "attainment (>= 95%)", "fluid", "stall-free",
                ""):  # fmt: skip
        t.add_column(col, justify="right" if col else "left")
    for r in record["rates"]:
        j = judged_rate(r)
        b = j.get("attainment_bounds")
        t.add_row(
            f"{r['offered_rate_rps']:g}", _num(r["achieved_rate_rps"]), _window_share(r), _p(j["ttft_ms"], "p50"),
            _p(j["ttft_ms"], "p90"), _bounded(j, "ttft_ms", "p99"), _p(j["tpot_ms"], "p50", 1),
            _p(j["tpot_ms"], "p90", 1), _p(r["send_lateness_ms"], "p99", 1), str(j["failed"]), str(j["http_429"]),
            _num(j["goodput_rps"]), f"{j['attainment']:.0%}" + (f" ({_share(b[0])})" if b else ""),
            _share(j.get("fluidity_attainment")), _share(j.get("stall_free")),
            r.get("verdict") or ("holds" if r["holds"] else "fails"),
        )  # fmt: skip
    return t


def judged_rate(row: dict) -> dict:
    """The figures a load.json rate is judged on: its steady-state window's, or the whole run's where the window is
    the whole run (or the record predates windows)."""
    steady = row.get("steady")
    return steady if steady and "sent" in steady else row


def _window_share(row: dict) -> str:
    steady = row.get("steady")
    if not steady:
        return "-"
    return "all" if "sent" not in steady else _share(steady["window"]["share"])


def _bounded(figures: dict, metric: str, key: str) -> str:
    """A percentile with its one-sided 95% upper bound: ``412 (<= 530)``, or ``412 (n < 299)`` when the requests
    can't bound it."""
    value = _p(figures.get(metric), key)
    bounds = figures.get("bounds_95")
    if value == "-" or not bounds or metric not in bounds:
        return value
    bound = (bounds[metric] or {}).get(key)
    if bound is None:
        from llmbench.analysis.tails import requests_to_bound

        return f"{value} (n < {requests_to_bound(float(key[1:]) / 100)})"
    return f"{value} (<= {bound:,.0f})"


def _fluid_capacity_line(record: dict) -> str:
    """The fluid capacity (drivers/load.py): the highest rate at which the share of fluid requests held, every
    lower rate too."""
    cap, failing = record.get("fluid_capacity_rps"), record.get("fluid_first_failing_rps")
    share, target = _share(record["fluidity_share"]), f"{record['fluidity_target']:g}"
    if cap is None and failing is None:
        return "fluid capacity: none (no rate was run)"
    if cap is None:
        return (f"fluid capacity: none; at {failing:g}/s, the lowest rate tried, fewer than {share} of requests had "
                f"fluidity >= {target} (Etalon)")  # fmt: skip
    tps = record.get("fluid_tokens_per_s")
    return (f"fluid capacity: {cap:g} requests/s" + (f" ({tps:,.1f} output tokens/s)" if tps else "")
            + f" is the highest offered rate at which >= {share} of requests had fluidity >= {target} (Etalon), "
            "every lower rate too" + (f"; {failing:g}/s did not" if failing is not None else
                                      "; every rate tried did"))  # fmt: skip


def load_lines(record: dict) -> list[str]:
    """The saturation verdict, the fluid capacity and what the table's columns mean."""
    s = record["saturation"]
    lines = []
    if s["rate_rps"] is None:
        lines.append(f"no offered rate held (attainment >= {record['min_attainment']:.0%} of requests meeting every "
                     "SLO): the server is saturated at the lowest rate tried")  # fmt: skip
    else:
        above = s.get("first_failing_above_rps")
        lines.append(f"saturation: {s['rate_rps']:g} requests/s is the highest offered rate that held (attainment >= "
                     f"{record['min_attainment']:.0%})" + (f"; {above:g}/s failed" if above else
                                                           "; every rate tried held"))  # fmt: skip
    proven = s.get("proven_rate_rps", False)
    if proven is not False:  # a load.json from before the verdicts has none
        lines.append(f"held at 95% confidence (attainment's lower Wilson bound >= {record['min_attainment']:.0%}, on "
                     "the steady-state window): " + (f"up to {proven:g} requests/s" if proven is not None else
                                                      "no rate"))  # fmt: skip
    for r in record["rates"]:
        if stopped := r.get("stopped"):
            left = f" of its {stopped['schedule_s']:g} s" if stopped.get("schedule_s") else ""
            lines.append(f"{r['offered_rate_rps']:g}/s STOPPED at {stopped['at_s']:.1f} s{left}, past saturation: "
                         f"{stopped['reason']}; {stopped['unfinished']} unfinished (counted as failed), "
                         f"{stopped['unsent'] or 0} never sent")  # fmt: skip
    stalled = [r for r in record["rates"] if (r.get("mid_stream_stalls") or {}).get("requests")]
    if stalled:
        lines.append("mid-stream stalls (a gap >= 8x the request's own median gap and >= 50 ms over it: a preemption "
                     "or a swap looks so): " + "; ".join(_stall_text(r) for r in stalled))  # fmt: skip
    lines.extend(_probe_lines(record))
    lines.extend(_window_lines(record))
    fluid = "fluidity_target" in record  # a load.json from before the fluid capacity has none of it
    if fluid:
        lines.append(_fluid_capacity_line(record))
    lines.append("latencies in ms from the actual send; TPOT per request, (last - first) / (n - 1); goodput: "
                 "requests meeting every SLO per second; late: the client's send lateness")  # fmt: skip
    if fluid:
        lines.append(f"fluid: requests sent whose fluidity index (Etalon) is >= {record['fluidity_target']:g} (a "
                     "failed one is not); stall-free: requests sent whose reader never waited over 100 ms")  # fmt: skip
    if not record.get("complete", True):
        lines.append("INCOMPLETE: interrupted; the rates above are those finished")
    return lines


def _probe_lines(record: dict) -> list[str]:
    """Each rate's probes (``--probe-rate``: one newcomer's wait while the load runs) and the newcomer's capacity."""
    probed = [r for r in record["rates"] if r.get("probes")]
    if not probed:
        return []
    rate = record.get("probe_rate_rps") or probed[0]["probes"].get("probe_rate_rps")
    lines = [
        f"probes ({_num(rate, 3).rstrip('0').rstrip('.')}/s beside each rate's load, full-length streams, "
        "reported apart):"
    ]
    for r in probed:
        p = r["probes"]
        qoe = (p.get("andes_qoe") or {}).get("min")
        lines.append(f"  {r['offered_rate_rps']:g}/s: {p['sent']} probes, TTFT p50 {_p(p['ttft_ms'], 'p50')} p90 "
                     f"{_p(p['ttft_ms'], 'p90')} ms, TPOT p50 {_p(p['tpot_ms'], 'p50', 1)} ms, fluid "
                     f"{_share(p['fluidity_attainment'])}, stall-free {_share(p['stall_free'])}, QoE min "
                     f"{_num(qoe)}, {p['failed']} failed")  # fmt: skip
    if "newcomer_capacity_rps" not in record:  # a record put together by hand: probes, but no capacity judged
        return lines
    cap, failing = record.get("newcomer_capacity_rps"), record.get("newcomer_first_failing_rps")
    share = _share(record.get("fluidity_share"))
    lines.append("a newcomer's capacity: " + (
        f"{cap:g} requests/s, the highest offered rate at which >= {share} of the probes stayed fluid, every lower "
        "rate too" if cap is not None else f"none: at the lowest rate, fewer than {share} of the probes were fluid")
        + (f"; at {failing:g}/s they were not" if failing is not None and cap is not None else ""))  # fmt: skip
    return lines


def _stall_text(row: dict) -> str:
    m = row["mid_stream_stalls"]
    server = row.get("server_preemptions")
    return (
        f"{row['offered_rate_rps']:g}/s {m['requests']} requests ({_share(m['share'])}), longest "
        f"{m['longest_ms']:,.0f} ms" + (f", server preemptions {server:g}" if server is not None else "")
    )


def _window_lines(record: dict) -> list[str]:
    """Where each rate's steady-state window lies, and the whole run's TTFT p90 beside the window's."""
    lines = []
    for r in record["rates"]:
        steady = r.get("steady")
        if not steady:
            continue
        w = steady["window"]
        if "sent" not in steady:
            lines.append(f"  {r['offered_rate_rps']:g}/s: every request ({w['method']})")
            continue
        c = w.get("concurrency") or {}
        lines.append(
            f"  {r['offered_rate_rps']:g}/s: sends {w['start_s']:.1f}-{w['end_s']:.1f} s, {_share(w['share'])} of the "
            f"finished requests; in flight {_num(c.get('inside'), 1)} inside, {_num(c.get('outside'), 1)} outside; "
            f"whole run TTFT p90 {_p(r['ttft_ms'], 'p90')} ms"
        )
    return (
        ["steady-state windows (arrival edges and MSER-5 on TTFT and E2E; the table's figures are on them):", *lines]
        if lines
        else []
    )


def load_comparison(base: dict, new: dict) -> Table:
    """Two load.json side by side at the offered rates both measured."""
    t = Table(title="load: base -> new at equal offered rates", title_justify="left")
    for col in ("offered/s", "goodput/s", "attainment", "fluid", "TTFT p90", "TPOT p90", "429"):
        t.add_column(col, justify="right")
    rows_b = {r["offered_rate_rps"]: r for r in base["rates"]}
    for r in new["rates"]:
        b = rows_b.get(r["offered_rate_rps"])
        if b is None:
            continue
        t.add_row(
            f"{r['offered_rate_rps']:g}",
            f"{_num(b['goodput_rps'])} -> {_num(r['goodput_rps'])}",
            f"{b['attainment']:.0%} -> {r['attainment']:.0%}",
            f"{_share(b.get('fluidity_attainment'))} -> {_share(r.get('fluidity_attainment'))}",
            f"{_p(b['ttft_ms'], 'p90')} -> {_p(r['ttft_ms'], 'p90')}",
            f"{_p(b['tpot_ms'], 'p90', 1)} -> {_p(r['tpot_ms'], 'p90', 1)}",
            f"{b['http_429']} -> {r['http_429']}",
        )
    return t


def engines_lines(rows: list[dict[str, str]]) -> list[str]:
    """``llmbench engines``: a few lines per engine (plain text)."""
    out = []
    for r in rows:
        state = r["installed"] if r["installed"] != "no" else f"not installed: pip install '{r['extra']}'"
        out.append(f"{r['engine']}: {state}")
        out.append(f"  reads {r['reads']}")
        if r["converter"] != "-":
            out.append(f"  converter: {r['converter']}")
        if r["note"]:
            out.append(f"  {r['note']}")
    return out


# ---------------------------------------------------------------------------------------------- history


def history_table(rows: list[dict]) -> Table:
    """``history list``: one row per result."""
    t = Table(title="history", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("id", "measured", "kind", "label", "commit", "machine", "setup", "model", "engine"):
        t.add_column(col, no_wrap=col in ("id", "measured", "commit", "machine", "setup"))
    for r in rows:
        commit = (r.get("head_commit") or r.get("commit") or "")[:10] + ("*" if r.get("dirty") else "")
        if r.get("anchor_ref"):
            commit += f" vs {r['anchor_ref']}"
        t.add_row(str(r["id"]), str(r.get("created_at") or "")[:19], r["kind"], escape(str(r.get("label") or "")),
                  escape(commit), r["machine_id"][:8], r["config_hash"][:8], escape(str(r.get("model") or "")),
                  escape(str(r.get("engine") or "")))  # fmt: skip
    t.caption = f"{len(rows)} results (* dirty checkout)"
    return t


def history_result_lines(r: dict) -> list[str]:
    """``history show ID``: the record and its metrics."""
    lines = [f"result {r['id']}: {r['kind']} {r.get('label') or ''} measured {r.get('created_at')}, recorded "
             f"{r.get('recorded_at')}", f"  file: {r.get('path')} (sha256 {r['sha256'][:16]}...)",
             f"  code: {r.get('commit')} ({r.get('branch')}{', dirty' if r.get('dirty') else ''})"]  # fmt: skip
    if r.get("anchor_ref") or r.get("base_commit"):
        lines.append(f"  ab: base {r.get('base_commit')} (anchor {r.get('anchor_ref')}), head {r.get('head_commit')} "
                     f"({r.get('head_ref')})")  # fmt: skip
    lines.append(f"  machine {r['machine_id']}: {r.get('machine')}")
    lines.append(f"  setup {r['config_hash']}: model {r.get('model')}, engine {r.get('engine')}, prompts "
                 f"{(r.get('prompt_sha256') or '')[:12]}")  # fmt: skip
    for m in sorted(r["metrics"], key=lambda m: (m["metric"], m["stat"])):
        line = f"  {m['metric']} {m['stat']}: {_num(m['value'], 3)}"
        if m.get("ci_low") is not None:
            line += f" [{_num(m['ci_low'], 3)}, {_num(m['ci_high'], 3)}]"
        if m.get("change_pct") is not None:
            line += f", change {m['change_pct']:+.2f}%"
            if m.get("change_ci_low") is not None:
                line += f" [{m['change_ci_low']:+.2f}, {m['change_ci_high']:+.2f}]"
            if m.get("mdc_pct") is not None:
                line += f", detectable {m['mdc_pct']:.2f}%"
        if m.get("n") is not None:
            line += f" (n {m['n']})"
        lines.append(line)
    return lines


def trend_table(trend: Any) -> Table:
    """``trend``: the points with their intervals; the first point of each new level marked."""
    t = Table(title=f"{trend.metric} {trend.stat} ({trend.unit})", title_justify="left", box=box.SIMPLE_HEAD)
    for col in ("#", "measured", "commit", "value", "95% CI", ""):
        t.add_column(col, justify="right" if col in ("#", "value") else "left", no_wrap=True)
    starts = {c.index: c for c in trend.changes}
    for i, p in enumerate(trend.points):
        ci = "-" if p.ci_low is None else f"{p.ci_low:.2f} .. {p.ci_high:.2f}"
        mark = ""
        if i in starts:
            c = starts[i]
            mark = f"change {c.size:+.2f} [{c.ci_low:+.2f}, {c.ci_high:+.2f}]"
        t.add_row(str(i), str(p.created_at or "")[:19], escape((p.commit or "")[:10] or str(p.label or "")),
                  f"{p.value:.3f}", ci, mark)  # fmt: skip
    return t


def trend_lines(trend: Any) -> list[str]:
    """The change points in words, and what was left out."""
    lines = []
    for c in trend.changes:
        where = f"between {c.between[0]} and {c.between[1]}" if c.between[0] else f"at point {c.index}"
        lines.append(f"change point {where}: {c.before:.3f} -> {c.after:.3f} ({c.size:+.3f} {trend.unit}, 95% CI "
                     f"[{c.ci_low:+.3f}, {c.ci_high:+.3f}])")  # fmt: skip
    if not trend.changes:
        lines.append(f"no change point in {len(trend.points)} points")
    if trend.chained:
        lines.append(f"anchors chained onto {trend.anchor}: {', '.join(trend.chained)}")
    lines += [f"note: {n}" for n in trend.notes]
    return lines


_BARS = "▁▂▃▄▅▆▇█"


def sparkline(values: list[float | None], width: int = 48) -> str:
    """``values`` as one line of block characters (min to max), resampled to at most ``width``; gaps as spaces."""
    if len(values) > width:  # each character the mean of its share of the samples
        step = len(values) / width
        chunks = [values[int(i * step) : int((i + 1) * step)] for i in range(width)]
        values = [(sum(ok) / len(ok)) if (ok := [v for v in c if v is not None]) else None for c in chunks]
    known = [v for v in values if v is not None]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    if hi == lo:  # flat: a level line, not the floor
        return "".join(" " if v is None else _BARS[3] for v in values)
    return "".join(" " if v is None else _BARS[min(7, int((v - lo) / (hi - lo) * 8))] for v in values)


def machine_lines(run: Any) -> list[str]:
    """The machine over the run, one sparkline each, in the terminal: the card's power and SM clock (a run on a
    GPU, clock slowdowns marked below) or this CPU's busy share and frequency."""
    m = getattr(run, "machine", None)
    if m is None:
        return []
    lines = []

    def line(name: str, unit: str, values: list[Any]) -> None:
        known = [v for v in values if v is not None]
        if len(known) >= 2:
            lines.append(f"{name:>10} {sparkline(values)}  {min(known):.0f}-{max(known):.0f} {unit}")

    if m.gpu_samples:
        line("GPU power", "W", [x.get("power_w") for x in m.gpu_samples])
        line("SM clock", "MHz", [x.get("sm_clock_mhz") for x in m.gpu_samples])
        from llmbench.machine.telemetry import SLOWDOWNS

        marks = ["!" if set(x.get("clock_events") or []) & SLOWDOWNS else " " for x in m.gpu_samples]
        if "!" in marks and len(marks) <= 48:
            lines.append(f"{'slowed':>10} {''.join(marks)}")
    elif m.samples:
        line("CPU busy", "%", [x.cpu_busy_pct for x in m.samples])
        line("CPU freq", "MHz", [x.freq_mhz for x in m.samples])
    if lines:
        lines.insert(0, f"machine over the run ({len(m.gpu_samples or m.samples)} samples, 0.5 s apart):")
    return lines


def workload_line(config: Any) -> str | None:
    """What was sent, for a dataset's run (see :func:`llmbench.workloads.dataset.describe`); None for a prompt list or
    synthetic prompts (their name says it)."""
    src = getattr(config, "prompt_source", None)
    if not src:
        return None
    from llmbench.workloads.dataset import describe  # a dataset's run only

    return describe(src)


def cache_lines(run: Any) -> list[str]:
    """Prefix reuse: the share of prompt tokens the server's cache served (beside what a trace expected) and TTFT
    of cold and warm requests; none without either."""
    s = run.summary
    if s is None or (s.cached_tokens_share is None and s.ttft_cold_ms is None and s.ttft_warm_ms is None):
        return []
    e = run.config.endpoint
    trace = e.arrival.trace if e is not None and e.arrival is not None else None
    source = getattr(run.config, "prompt_source", None) or {}
    parts = []
    if s.cached_tokens_share is not None:
        whose = "the prefix cache" if getattr(run.config, "prefix_cache", None) else "the server's usage"
        parts.append(f"{s.cached_tokens_share:.1%} of prompt tokens cached ({whose})")
    if trace and trace.get("prefix_reuse_expected") is not None:
        parts.append(f"the trace implies {trace['prefix_reuse_expected']:.1%}")
    elif source.get("prefix_reuse_expected") is not None:
        parts.append(f"the workload implies {source['prefix_reuse_expected']:.1%}")
    ttft = [f"{name} p50 {st.p50:.1f} ms (n={st.n})" for name, st in (("cold", s.ttft_cold_ms),
            ("warm", s.ttft_warm_ms)) if st is not None]  # fmt: skip
    if ttft:
        parts.append("TTFT " + ", ".join(ttft))
    return ["prefix reuse: " + "; ".join(parts)]


def lever_line(d: dict | None, who: str = "") -> str | None:
    """One line for what a lever did (:func:`llmbench.results.metrics.lever_summary`), or None."""
    if d is None:
        return None
    parts = []
    if d.get("tokens_per_forward") is not None:
        parts.append(f"{d['tokens_per_forward']:.2f} tokens per forward pass")
    if d.get("acceptance_rate") is not None:
        parts.append(f"{d['accepted_tokens']} of {d['drafted_tokens']} drafted tokens accepted "
                     f"({d['acceptance_rate']:.1%})")  # fmt: skip
    if d.get("prefix_tokens"):
        parts.append(f"{d['prefix_tokens']} prompt tokens reused by the warm requests")
    cold, warm = d.get("ttft_cold_p50_ms"), d.get("ttft_warm_p50_ms")
    if cold is not None and warm is not None:
        parts.append(f"TTFT cold {cold:.1f} ms, warm p50 {warm:.1f} ms")
    checked, bad = d.get("lossless_checked"), d.get("lossless_mismatches")
    if checked:
        if bad:
            m = d.get("first_mismatch") or {}
            where = (f"; first in prompt {m['prompt_index'] + 1} at output token {m['position']}"
                     if m.get("position") is not None else "")  # fmt: skip
            parts.append(f"NOT LOSSLESS: {bad} of {checked} requests differ from a plain uncached run's greedy "
                         f"output{where} (the engine's numerics)")  # fmt: skip
        else:
            parts.append(f"lossless: {checked} of {checked} requests equal a plain uncached run's greedy output")
    return f"{who}{d['label']}: " + "; ".join(parts) if parts else f"{who}{d['label']}"


def lever_lines(run: Any) -> list[str]:
    """The run's lever (--speculative, --prefix-cache), if any."""
    from llmbench.results.metrics import lever_summary

    line = lever_line(lever_summary(run))
    return [line] if line else []


def server_lines(run: Any) -> list[str]:
    """The server's own metrics over the run (--server-metrics), one line; none without them."""
    sm = getattr(run, "server_metrics", None)
    if not sm:
        return []
    c, g = sm.get("counters") or {}, sm.get("gauges") or {}
    parts = []
    for key, label in (("requests", "requests"), ("prompt_tokens", "prompt tokens"),
                       ("generation_tokens", "generated tokens")):  # fmt: skip
        if (d := (c.get(key) or {}).get("delta")) is not None:
            parts.append(f"{d:g} {label}")
    for key, label in (("running_requests", "running"), ("waiting_requests", "waiting"),
                       ("kv_cache_usage", "KV cache usage")):  # fmt: skip
        if key in g:
            gauge = g[key]
            # a fraction averaged over ranks: the busiest one's peak beside it (an average hides one rank full)
            sets = (f" (mean of {gauge['label_sets']} label sets; highest one {gauge['max_label_set']:.3g})"
                    if gauge.get("max_label_set") is not None else "")  # fmt: skip
            parts.append(f"{label} mean {gauge['mean']:.3g} max {gauge['max']:.3g}{sets}")
    if sm.get("prefix_cache_hit_rate") is not None:
        parts.append(f"prefix cache hit rate {sm['prefix_cache_hit_rate']:.1%} (tokens)")
    window = f" over {sm['window_s']:.1f} s, {sm['scrapes']} scrapes" if sm.get("window_s") else ""
    notes = f"; {'; '.join(sm['notes'])}" if sm.get("notes") else ""
    return [f"server ({sm.get('server') or 'unknown'}){window}: {', '.join(parts) or 'no known metric'}{notes}"]


def cost_lines(run: Any) -> list[str]:
    """What the tokens cost besides time: the CPU (time per token, cores busy, energy or why not) and the GPU
    (energy per token, power, clocks, events), one line each."""
    lines = []
    cpu = getattr(run, "cpu", None)
    if cpu:
        energy = (f"{cpu['j_per_output_token']:.4g} J per output token" if cpu.get("j_per_output_token") is not None
                  else f"energy not measured: {cpu.get('energy_missing')}")  # fmt: skip
        freq = f", {cpu['freq_mhz_mean']:.0f} MHz" if cpu.get("freq_mhz_mean") else ""
        per_token = cpu.get("cpu_ms_per_output_token")
        lines.append(f"CPU: {per_token:.4g} ms of CPU time per output token, {cpu.get('cores_busy')} cores busy"
                     f"{freq}; {energy}" if per_token is not None else f"CPU: {energy}")  # fmt: skip
    gpu = run.machine.gpu if getattr(run, "machine", None) is not None else None
    if gpu:
        if gpu.get("j_per_output_token") is not None:
            per_j = f"{gpu['output_tokens_per_j']:.3g} tokens per J; " if gpu.get("output_tokens_per_j") else ""
            energy = f"{gpu['j_per_output_token']:.4g} J per output token ({per_j}{gpu.get('energy_method')})"
        else:
            energy = f"energy unknown: {gpu.get('energy_missing')}"
        power = f", {gpu['power_w_mean']:.0f} W mean" if gpu.get("power_w_mean") is not None else ""
        clocks = (f", SM clock {gpu['sm_clock_mhz_min']}-{gpu.get('sm_clock_mhz_max')} MHz"
                  if gpu.get("sm_clock_mhz_min") is not None else "")  # fmt: skip
        events = f", clock events: {', '.join(gpu['clock_events'])}" if gpu.get("clock_events") else ""
        lines.append(f"GPU {gpu.get('name') or ''}: {energy}{power}{clocks}{events}")
    return lines


def _verdict(v: bool | None, yes: str, no: str) -> str:
    return "-" if v is None else yes if v else no


def paint_table(record: dict) -> Table:
    """llmbench paint's requests: TTFT, the first painted character, E2E (ms from the request's start in the page),
    render lag, paint gaps, and the verdicts (the detector on the page's reads and on llmbench's own client, the
    paint's), which must agree."""
    b = record["browser"]
    title = f"paint: {record['endpoint']} ({record['model'] or 'model not named'}) in Chromium {b['version']}"
    t = Table(title=escape(title), title_justify="left")  # names from a server are text, never markup
    for col in ("prompt", "TTFT", "first paint", "E2E", "lag p50", "lag max", "gap max", "gaps>100", "frames",
                "page reads", "client", "painted", "agree"):  # fmt: skip
        t.add_column(col, justify="left" if col in ("page reads", "client", "painted", "agree") else "right")
    for r in record["requests"]:
        client = r.get("client") or {}
        t.add_row(
            f"{r['prompt_index']}" + (f" r{r['repeat']}" if r["repeat"] else ""), _p(r, "ttft_ms", 1),
            _p(r, "first_paint_ms", 1), _p(r, "e2e_ms", 1), _p(r["render_lag_ms"], "p50", 1),
            _p(r["render_lag_ms"], "max", 1), _p(r["paint_gaps_ms"], "max", 1), str(r["paint_gaps_ms"]["over_100ms"]),
            str(r["paint_gaps_ms"]["frames"]), _verdict(r["page_buffered"], "buffered", "streamed"),
            _verdict(client.get("buffered"), "buffered", "streamed") if client else "-",
            _verdict(r["painted_at_once"], "at once", "spread"), _verdict(r["agree"], "yes", "NO"),
        )  # fmt: skip
    return t


def paint_lines(record: dict) -> list[str]:
    """The medians, the verdicts in words, what disagreed or failed."""
    s = record["summary"]
    n = s["requests"]
    gap = s["paint_gap_ms_max"]
    gaps = f"{gap:.1f} ms ({s['paint_gaps_over_100ms']} over 100 ms)" if gap is not None else "none (each in one frame)"
    lines = [f"{n} requests: TTFT p50 {_num(s['ttft_ms_p50'], 1)} ms, first paint p50 "
             f"{_num(s['first_paint_ms_p50'], 1)} ms, E2E p50 {_num(s['e2e_ms_p50'], 1)} ms; render lag p50 "
             f"{_num(s['render_lag_ms_p50'], 1)} ms, max {_num(s['render_lag_ms_max'], 1)} ms; longest paint gap: "
             f"{gaps}"]  # fmt: skip
    client = s.get("client_buffered_requests")
    checked = "" if client is None else f"; llmbench's client: {client} of {n} buffered"
    lines.append(f"buffering detector on the page's reads: {s['page_buffered_requests']} of {n} buffered{checked}; "
                 f"painted at once: {s['painted_at_once_requests']} of {n}")  # fmt: skip
    if s["page_buffered_requests"] or client:
        lines.append("the stream arrived all at once: something between server and browser buffers it (nginx: "
                     "proxy_buffering off, or let the server's X-Accel-Buffering: no through)")  # fmt: skip
    if not s["agree"]:
        lines.append("the detector and the paint times disagree on some requests (agree: NO): a partly buffered "
                     "stream, or tokens faster than frames")  # fmt: skip
    if record["failed"]:
        f = record["failed"][0]
        lines.append(f"{len(record['failed'])} requests failed; the first (prompt {f['prompt_index']}): {f['error']}")
    return lines
