"""A run's summary, composed once: its table, what it sent (the workload and open-loop lines), and what it cost
(cost, cache, server and, for a saved run, machine lines). ``run``, ``show`` and the HTML report all show it."""

from __future__ import annotations

from typing import Any

from llmbench.present import terminal as display


def workload_lines(run: Any) -> list[str]:
    """What the run sent: its dataset or synthetic workload, and its open loop (none for a plain closed loop)."""
    return [line for line in (display.workload_line(run.config), display.open_loop_line(run)) if line is not None]


def detail_lines(run: Any, *, machine: bool = False) -> list[str]:
    """What the run cost and what the server and its cache said; with ``machine``, the machine's record too."""
    lines = display.lever_lines(run) + display.cost_lines(run) + display.cache_lines(run) + display.server_lines(run)
    return lines + display.machine_lines(run) if machine else lines


def summary_lines(run: Any, *, machine: bool = False) -> list[str]:
    """Every line under the summary table, in the order they are shown."""
    return workload_lines(run) + detail_lines(run, machine=machine)


def print_summary(run: Any, *, machine: bool = False) -> None:
    """The summary table and its lines, on stdout."""
    display.out.print(display.summary_table(run))
    for line in summary_lines(run, machine=machine):
        display.out.print(line, markup=False, soft_wrap=True)
