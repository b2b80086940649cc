"""The command line's shared parameter types: the enums and every option or argument more than one command takes,
declared once (a command's own options stay beside it)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from llmbench.options import DEFAULT_MODEL


class DType(str, Enum):
    auto = "auto"
    float32 = "float32"
    bfloat16 = "bfloat16"
    float16 = "float16"


class Weights(str, Enum):
    pretrained = "pretrained"
    random = "random"


class Cache(str, Enum):
    dynamic = "dynamic"
    static = "static"


class Attn(str, Enum):
    eager = "eager"
    sdpa = "sdpa"
    flash_attention_2 = "flash_attention_2"
    flex_attention = "flex_attention"


class Quantize(str, Enum):
    none = "none"
    int8 = "int8"
    int8_dynamic = "int8-dynamic"


class CompareFormat(str, Enum):
    table = "table"
    markdown = "markdown"
    json = "json"


class ExportFormat(str, Enum):
    csv = "csv"
    parquet = "parquet"


class Stat(str, Enum):
    mean = "mean"
    p50 = "p50"
    p90 = "p90"
    gaps = "gaps"  # TPOT from per-token gaps paired by position (TTFT, E2E: p50)


class RankBy(str, Enum):
    mean = "mean"
    p50 = "p50"


# Options that several commands share, declared once.
PromptsArg = Annotated[
    Path,
    typer.Argument(
        help='Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl). Blank lines and # comments '
        "are skipped."
    ),
]
ModelOpt = Annotated[
    Optional[str],
    typer.Option("--model", "-m", help=f"Hub id, local folder or .gguf file (default: {DEFAULT_MODEL})."),
]
WeightsOpt = Annotated[
    Weights, typer.Option(help="random: the real architecture with random weights (no download; timings real).")
]
DeviceOpt = Annotated[str, typer.Option(help="auto, cpu, cuda, cuda:N or mps.")]
DTypeOpt = Annotated[DType, typer.Option(help="auto = fastest on the device.")]
ThreadsOpt = Annotated[Optional[int], typer.Option(help="torch intra-op threads (default: torch's choice).")]
MaxNewTokensOpt = Annotated[int, typer.Option(help="Tokens to generate per request at most.")]
IgnoreEosOpt = Annotated[
    Optional[bool],
    typer.Option("--ignore-eos/--stop-at-eos", help="Generate exactly --max-new-tokens. Default: on with random."),
]
WarmupOpt = Annotated[int, typer.Option(help="Unmeasured requests (per setup) before the measured ones.")]
SystemPromptOpt = Annotated[Optional[str], typer.Option(help="System message for every prompt.")]
NoChatTemplateOpt = Annotated[bool, typer.Option("--no-chat-template", help="Send the raw prompt text.")]
TrustRemoteCodeOpt = Annotated[bool, typer.Option("--trust-remote-code", help="Run the model repo's own code.")]
AllowPickleOpt = Annotated[bool, typer.Option("--allow-pickle", help="Allow pickle (.bin) weights in a folder.")]
AllowOffloadOpt = Annotated[
    bool, typer.Option("--allow-offload", help="Run even when weights are offloaded to disk/CPU (recorded).")
]
DeviceMapOpt = Annotated[
    Optional[str],
    typer.Option(help="Let accelerate place the weights: auto, balanced, sequential or a JSON object (offloading "
                 "is still refused)."),
]  # fmt: skip
AttnOpt = Annotated[Optional[Attn], typer.Option(help="Attention kernel (default: the model's).")]
_QUANTIZE_HELP = (
    "int8: int8 weights per output channel, activations in --dtype; "
    "int8-dynamic: int8 weights and activations, float32 only (CPU)."
)
QuantizeOpt = Annotated[Quantize, typer.Option(help=_QUANTIZE_HELP)]
EndpointOpt = Annotated[
    Optional[str],
    typer.Option(
        help="Measure an OpenAI-compatible server instead (vLLM, llama.cpp, Ollama, llmbench serve): its base URL, "
        "e.g. http://127.0.0.1:8000/v1. --model then names the model to send."
    ),
]
ReprobeOpt = Annotated[
    bool,
    typer.Option("--reprobe", help="--dtype auto: measure the dtypes again instead of this machine's cached choice."),
]
EngineOpt = Annotated[
    str,
    typer.Option(help="The engine that generates, fed the same token ids: transformers, llama.cpp, openvino or "
                 "onnxruntime (pip install 'llmbench\\[llamacpp|openvino|onnxruntime]')."),
]  # fmt: skip
PrecisionOpt = Annotated[
    Optional[str],
    typer.Option(help="--engine's weight format, converted from a Hugging Face folder: llama.cpp f16, q8_0, q4_k_m, "
                 "...; openvino fp16, int8, int4; onnxruntime fp32, int8, int4 (default 8-bit; a .gguf runs as is)."),
]  # fmt: skip
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")]
ApiKeyEnvOpt = Annotated[Optional[str], typer.Option(help="With --endpoint: the variable holding the API key.")]
TimeoutOpt = Annotated[
    float,
    typer.Option("--timeout", help="With --endpoint: a request that receives nothing for this long fails (a stalled "
                 "server), s."),
]  # fmt: skip
EndpointTokenizerOpt = Annotated[
    Optional[str], typer.Option(help="With --endpoint: hub id, folder or .gguf to count tokens without usage.")
]
RunSeedOpt = Annotated[
    int, typer.Option(help="Seed for --sample (each request derives its own), --synthetic, --rate's schedule, "
                      "--num-prompts and --prefix-groups.")
]  # fmt: skip
RunOutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Run JSON (default: results/<UTC time>-<model>-<device>.json)."),
]
AbOutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Folder for base.json and head.json (default: results/ab-<UTC time>)."),
]
AbGateStatOpt = Annotated[
    Stat,
    typer.Option(
        help="Statistic the gates test: the median by default, robust to a pair a burst hit; "
        "gaps: TPOT from per-token gaps paired by position (TTFT, E2E: the median)."
    ),
]
HistoryOpt = Annotated[
    Optional[str],
    typer.Option(envvar="LLMBENCH_HISTORY", show_envvar=True,
                 help="Record the result in the history: a URL (sqlite:///FILE.db, postgresql://...), a .db file, or "
                 "nothing for the default file (~/.local/share/llmbench/history.db)."),
]  # fmt: skip
OverwriteOpt = Annotated[bool, typer.Option("--overwrite", help="Replace an existing output file.")]
_SERVER_METRICS_HELP = (
    "With --endpoint: scrape the server's Prometheus /metrics during the run (gauges' mean and max, counters' "
    "deltas, into the run JSON)."
)
ServerMetricsOpt = Annotated[bool, typer.Option("--server-metrics", help=_SERVER_METRICS_HELP)]
MetricsUrlOpt = Annotated[
    Optional[str],
    typer.Option(help="The metrics page to scrape (default: the endpoint's host, /metrics); implies --server-metrics."),
]
CacheOpt = Annotated[Cache, typer.Option(help="KV cache: dynamic, or static (preallocated).")]
SpeculativeOpt = Annotated[
    Optional[str],
    typer.Option(help="Speculative decoding: none, prompt-lookup[:N[:MAX_NGRAM]] (n-gram drafts from the prompt, "
                 "default 10:2) or draft:MODEL[:K] (a draft model with the target's vocabulary, K drafts a step, "
                 "default 5). Tokens of one forward pass share one stamp; greedy output is checked against a plain "
                 "run's (lossless)."),
]  # fmt: skip
PrefixCacheOpt = Annotated[
    str,
    typer.Option(help="system: the prompts' shared leading tokens (system prompt, template preamble) computed once "
                 "per process by the first measured request (cold) and reused by the others (warm); none: nothing "
                 "reused between requests."),
]  # fmt: skip
CompileOpt = Annotated[bool, typer.Option("--compile", help="torch.compile the decode step (static cache).")]

FailOnRegressionOpt = Annotated[
    Optional[float],
    typer.Option(help="Exit 1 when TTFT, TPOT or E2E regresses significantly by more than PCT % (0: by anything)."),
]
FailOnOpt = Annotated[
    Optional[list[str]],
    typer.Option(help="METRIC=PCT, e.g. tpot_ms=5 or load_s=10 (the load over ab's processes; repeatable)."),
]
GateStatOpt = Annotated[
    Stat,
    typer.Option(
        help="Statistic the gates test (gaps: TPOT from per-token gaps paired by position, TTFT and E2E on the median)."
    ),
]
FormatOpt = Annotated[CompareFormat, typer.Option("--format", help="Output format.")]
RequireMdcOpt = Annotated[
    Optional[float],
    typer.Option(help="Exit 1 when the gated metrics' minimum detectable change is above PCT %: the run could not "
                 "have seen a regression that small."),
]  # fmt: skip


DbOpt = Annotated[
    Optional[str],
    typer.Option("--history", envvar="LLMBENCH_HISTORY", show_envvar=True,
                 help="The database (default: ~/.local/share/llmbench/history.db)."),
]  # fmt: skip
SinceOpt = Annotated[Optional[str], typer.Option(help="Only results measured since: 30d, 12h, 2w or a date.")]
