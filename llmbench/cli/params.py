"""The command line's shared parameter types that are not settings of a measurement: report formats, the gate
options ``compare`` shares with ``ab`` (declared in :mod:`llmbench.spec.commands`), the history's database.
Every setting of a measurement is declared in :mod:`llmbench.spec` and its options generated from it."""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Optional

import typer

from llmbench.cli.specs import section_option
from llmbench.spec import OutputsSection
from llmbench.spec.gate import GateSection


class CompareFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


class ExportFormat(str, Enum):
    csv = "csv"
    parquet = "parquet"


class RunExportFormat(str, Enum):
    """``llmbench export``'s formats: the tables, and a trace (Chrome Trace Event Format: Perfetto, chrome://tracing).
    ``history export`` keeps :class:`ExportFormat`: a history has no timeline."""

    csv = "csv"
    parquet = "parquet"
    trace = "trace"


class Stat(str, Enum):
    mean = "mean"
    p50 = "p50"
    p90 = "p90"
    gaps = "gaps"  # TPOT from per-token gaps paired by position (TTFT, E2E: p50)


QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
OverwriteOpt = section_option(OutputsSection, "overwrite")[0]
FailOnRegressionOpt = section_option(GateSection, "fail_on_regression")[0]
FailOnOpt = section_option(GateSection, "fail_on")[0]
RequireMdcOpt = section_option(GateSection, "require_mdc")[0]
GateStatOpt = Annotated[
    Stat,
    typer.Option(
        help="Statistic the gates test (gaps: TPOT from per-token gaps paired by position, TTFT and E2E on the median)."
    ),
]
FormatOpt = Annotated[CompareFormat, typer.Option("--format", help="Output format.")]
DbOpt = Annotated[
    Optional[str],
    typer.Option("--history", envvar="LLMBENCH_HISTORY", show_envvar=True,
                 help="The database (default: ~/.local/share/llmbench/history.db)."),
]  # fmt: skip
SinceOpt = Annotated[Optional[str], typer.Option(help="Only results measured since: 30d, 12h, 2w or a date.")]
