"""Terminal output: warnings, the live progress bar and the summary table (rich). No measuring here."""

from __future__ import annotations

from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from llmbench.results import RequestResult, Run, Stats

err = Console(stderr=True, highlight=False)
out = Console(highlight=False)


def warn(message: str) -> None:
    """A warning the user must not miss (stderr)."""
    loud = message.isupper() or message.split(":")[0].isupper()
    err.print(f"[bold red]warning:[/] {message}" if loud else f"[yellow]warning:[/] {message}", soft_wrap=True)


def info(message: str) -> None:
    """A progress note on stderr (kept off stdout so it stays parseable)."""
    err.print(f"[dim]{message}[/]", soft_wrap=True)


@contextmanager
def run_progress(total: int, warmup: int, quiet: bool = False):
    """A progress bar over the measured requests; yields callbacks (on_warmup, on_request)."""
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
    )
    with progress:
        wtask = progress.add_task("warmup", total=warmup, last="", visible=warmup > 0)
        task = progress.add_task("requests", total=total, last="")

        def on_warmup(done: int, _total: int) -> None:
            progress.update(wtask, completed=done)

        def on_request(r: RequestResult, done: int, _total: int) -> None:
            tpot = f"{r.tpot_ms:.1f}" if r.tpot_ms is not None else "-"
            progress.update(
                task, completed=done, last=f"TTFT {r.ttft_ms:.1f} ms  TPOT {tpot} ms  {r.output_tokens} tok"
            )

        yield on_warmup, on_request


def _fmt(s: Stats | None, key: str, digits: int = 1) -> str:
    if s is None:
        return "-"
    return f"{getattr(s, key):.{digits}f}"


def summary_table(run: Run) -> Table:
    """Mean/p50/p90/min/max of each metric; its first column is the seed's table (means)."""
    s = run.summary
    c = run.config
    title = f"{c.model} · {c.weights} weights · {c.device} · {c.dtype} · {c.threads} threads"
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    for col in ("mean", "p50", "p90", "min", "max"):
        table.add_column(col, justify="right")
    if s is None:
        return table
    rows = [
        ("TTFT (ms)", s.ttft_ms, 1),
        ("TPOT (ms)", s.tpot_ms, 2),
        ("output tokens", s.output_tokens, 1),
        ("E2E, total (ms)", s.e2e_ms, 1),
        ("decode tokens/s", s.decode_tokens_per_s, 2),
    ]
    for label, stats, digits in rows:
        table.add_row(label, *(_fmt(stats, k, digits) for k in ("mean", "p50", "p90", "min", "max")))
    table.caption = f"{s.requests} requests" + ("" if run.complete else " (incomplete run)")
    return table
