"""The gate's settings (``compare``, ``ab``, ``history``): apart from the commands' specs, so ``compare --help``
reads them without building every command's."""

from __future__ import annotations

from typing import ClassVar, Literal, Optional

from llmbench.spec import Section, setting

Stat = Literal["mean", "p50", "p90", "gaps"]


class GateSection(Section):
    """What fails the job: a significant regression past a threshold, or a run too noisy to see one."""

    table: ClassVar[str] = "gate"
    fail_on_regression: Optional[float] = setting(
        None, "Exit 1 when TTFT, TPOT or E2E regresses significantly by more than PCT % (0: by anything)."
    )
    fail_on: Optional[list[str]] = setting(
        None,
        "METRIC=PCT, e.g. tpot_ms=5 or load_s=10 (the load over ab's processes); the shape of the wait in its own "
        "unit, worse by (a base may have none): reader_stall_ms=200, reader_stalls=1, reader_longest_stall_ms=300, "
        "andes_qoe=0.05, fluidity=0.1 (repeatable).",
    )
    gate_stat: Stat = setting(
        "p50",
        "Statistic the gates test: the median by default, robust to a pair a burst hit; gaps: TPOT from "
        "per-token gaps paired by position (TTFT, E2E: the median).",
    )
    require_mdc: Optional[float] = setting(
        None,
        "Exit 1 when the gated metrics' minimum detectable change is above PCT %: the run could not have seen "
        "a regression that small.",
    )
