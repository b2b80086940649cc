"""The shared parameter types of where the prompts come from and when they are sent: datasets, traces, shared
prefixes, sessions and open-loop arrivals (see :mod:`llmbench.cli.params` for the rest)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

SyntheticOpt = Annotated[
    Optional[str],
    typer.Option(
        help="TOKENSxCOUNT, e.g. 512x20: COUNT different prompts of exactly TOKENS tokens each (chat template "
        "included), cut from a text llmbench ships, reproducible from --seed."
    ),
]
PromptFormatOpt = Annotated[
    Optional[str],
    typer.Option(help="How to read PROMPTS: txt, jsonl, json, sharegpt, csv, parquet, arrow (a save_to_disk folder); "
                 "default: by its extension.", rich_help_panel="Datasets"),
]  # fmt: skip
PromptColumnOpt = Annotated[
    Optional[str], typer.Option(help="The dataset's column holding the prompt (default: prompt).",
                                rich_help_panel="Datasets"),
]  # fmt: skip
OutputLenColumnOpt = Annotated[
    Optional[str], typer.Option(help="The dataset's column of output lengths: each request asks for exactly its "
                                "own (EOS ignored).", rich_help_panel="Datasets"),
]  # fmt: skip
MinPromptTokensOpt = Annotated[
    Optional[int], typer.Option(help="Keep prompts of at least this many tokens, as the run counts them.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
MaxPromptTokensOpt = Annotated[
    Optional[int], typer.Option(help="Keep prompts of at most this many tokens, as the run counts them.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
NumPromptsOpt = Annotated[
    Optional[int], typer.Option(help="Sample this many entries (drawn from --seed) among those the filters keep.",
                                rich_help_panel="Datasets"),
]  # fmt: skip
RateOpt = Annotated[
    Optional[float],
    typer.Option(help="With --endpoint: open loop, requests per second on a schedule drawn in advance."),
]
TraceOpt = Annotated[
    Optional[Path], typer.Option(help="With --endpoint: replay this trace: its times are the schedule, its rows "
                                 "the prompts (exact lengths, shared blocks).", rich_help_panel="Traces"),
]  # fmt: skip
TraceFormatOpt = Annotated[
    Optional[str], typer.Option(help="mooncake (JSONL, ms), burstgpt (CSV, s) or azure (CSV, date and time).",
                                rich_help_panel="Traces"),
]  # fmt: skip
TimeScaleOpt = Annotated[
    Optional[float], typer.Option(help="Multiply the trace's times (0.5: twice as fast). Default 1.",
                                  rich_help_panel="Traces"),
]  # fmt: skip
TraceStartOpt = Annotated[
    Optional[float], typer.Option(help="Replay from this second of the trace.", rich_help_panel="Traces")
]
TraceEndOpt = Annotated[
    Optional[float], typer.Option(help="Replay until this second of the trace.", rich_help_panel="Traces")
]
PrefixGroupsOpt = Annotated[
    Optional[int], typer.Option(help="Prompts in N groups sharing a prefix each (with --prefix-tokens, "
                                "--suffix-tokens, --num-prompts).", rich_help_panel="Shared prefixes"),
]  # fmt: skip
PrefixTokensOpt = Annotated[
    Optional[int], typer.Option(help="Tokens of each group's shared prefix.", rich_help_panel="Shared prefixes")
]
SuffixTokensOpt = Annotated[
    Optional[int], typer.Option(help="Tokens of each prompt's own suffix.", rich_help_panel="Shared prefixes")
]
GroupDistOpt = Annotated[
    str, typer.Option(help="How prompts fall into groups: uniform, zipf or zipf:A (from --seed).",
                      rich_help_panel="Shared prefixes"),
]  # fmt: skip
TurnsOpt = Annotated[
    int, typer.Option(help="Each prompt opens a conversation of this many turns, each sending the conversation so "
                      "far with the model's replies.", rich_help_panel="Sessions")
]  # fmt: skip
ThinkTimeOpt = Annotated[
    float, typer.Option(help="Seconds a session waits after a reply before its next turn.", rich_help_panel="Sessions")
]
DataArg = Annotated[
    Path,
    typer.Argument(
        help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl); or a dataset: ShareGPT '
        ".json, .jsonl, .csv, .parquet, a save_to_disk folder (see Datasets)."
    ),
]
DataSeedOpt = Annotated[int, typer.Option(help="Seed of --num-prompts.", rich_help_panel="Datasets")]
DataTokenizerOpt = Annotated[
    Optional[str], typer.Option(help="Hub id, folder or .gguf that counts prompts for the dataset filters (and "
                                "ShareGPT replies' lengths).", rich_help_panel="Datasets"),
]  # fmt: skip
ArrivalOpt = Annotated[
    str, typer.Option(help="Open loop: gaps between arrivals: poisson, constant or gamma:CV (CV > 1 burstier).")
]
RequestsOpt = Annotated[Optional[int], typer.Option(help="Open loop: how many requests to send.")]
DurationOpt = Annotated[Optional[float], typer.Option(help="Open loop: send for this many seconds (default 30).")]
WorkersOpt = Annotated[int, typer.Option(help="Open loop: client processes sharing the schedule.")]
RayOpt = Annotated[
    Optional[str],
    typer.Option(help="Open loop: run the --workers as Ray tasks on this cluster (address, 'auto' or 'local'; "
                 "pip install 'llmbench\\[ray]')."),
]  # fmt: skip
