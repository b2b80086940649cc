"""The specs of the commands beside ``run``: each is the shared sections (narrowed, with its own defaults) and the
command's own tables, declared here once (see :mod:`llmbench.spec`)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Literal, Optional

from pydantic import Field

from llmbench.spec import (
    DATASET,
    DEFAULT_DURATION_S,
    MAX_COUNT,
    MAX_THREADS,
    ArrivalsSection,
    Attn,
    Cache,
    Dtype,
    LeversSection,
    ModelSection,
    OutputsSection,
    PromptsSection,
    Quantize,
    ReaderSection,
    RequestsSection,
    Section,
    ServerSection,
    combine,
    setting,
    spec,
    view,
)
from llmbench.spec.gate import GateSection
from llmbench.workloads import limits

_PROMPT_FILE = ('Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl). Blank lines and # '
                "comments are skipped.")  # fmt: skip
_DATA = ('Prompt file: one prompt a line (.txt) or {"prompt": ...} a line (.jsonl); or a dataset: ShareGPT .json, '
         ".jsonl, .csv, .parquet, a save_to_disk folder (see Datasets).")  # fmt: skip
_LOADING = ("device_map", "allow_offload", "allow_pickle", "trust_remote_code")


def _folder(command: str) -> type[Section]:
    return view(OutputsSection, "output", "history", output={"help": f"Folder (default: results/{command}-<time>)."})


# ------------------------------------------------------------------------------------------------ sweep


class SweepGrid(Section):
    """The setups a sweep crosses: each option a comma list, every combination measured."""

    table: ClassVar[str] = "grid"
    lists: ClassVar[bool] = True
    # each a list of the setting of the same name (the model's, the levers'), comma-separated on the command line
    dtype: list[Dtype] = setting(["float32", "bfloat16"], "Comma-separated dtypes: float32,bfloat16,float16.",
                                 comma=True)  # fmt: skip
    threads: Optional[list[Annotated[int, Field(ge=1, le=MAX_THREADS)]]] = setting(
        None, "Comma-separated thread counts, e.g. 1,2 (default: one, the model's default).", comma=True
    )
    attn: Optional[list[Attn]] = setting(None, "Comma-separated attention kernels, e.g. eager,sdpa.", comma=True)
    cache: list[Cache] = setting(["dynamic"], "Comma-separated KV caches: dynamic,static.", comma=True)
    compile: bool = setting(False, "Also sweep torch.compile'd decoding.")
    quantize: list[Quantize] = setting(["none"], "Comma-separated: none,int8,int8-dynamic.", comma=True)
    engine: list[str] = setting(["transformers"], "Comma-separated engines: transformers,llama.cpp,openvino,"
                                "onnxruntime.", comma=True)  # fmt: skip
    precision: Optional[list[str]] = setting(
        None,
        "ENGINE=P1,P2 (repeatable), e.g. llama.cpp=q8_0,q4_k_m; a bare P1,P2 applies to every engine but "
        "transformers (default: each engine's 8-bit, a .gguf as is).",
    )
    speculative: Optional[list[str]] = setting(
        None,
        "Comma-separated --speculative values, e.g. none,prompt-lookup:3 (crossed with every setup; a setup "
        "whose greedy output differs from the plain run's can't be best).",
        comma=True,
    )
    prefix_cache: Optional[list[str]] = setting(None, "Comma-separated --prefix-cache values: none,system.",
                                                comma=True)  # fmt: skip


class SweepPlan(Section):
    """How a sweep measures and ranks."""

    table: ClassVar[str] = "sweep"
    rounds: int = setting(3, "Rounds; each runs every setup once over all prompts.", ge=1, le=MAX_COUNT)
    rank_by: Literal["mean", "p50"] = setting("mean", "Statistic that picks the best (p50: robust).")
    quality: bool = setting(False, "Also measure KL divergence and agreement against float32.")
    max_kld: Optional[float] = setting(None, "Setups above this mean KL divergence can't be best (implies --quality).")


SweepSpec = spec(
    "SweepSpec", "sweep",
    view(PromptsSection, "prompts", prompts={"required": True, "help": _PROMPT_FILE}),
    SweepGrid,
    view(ModelSection, "model", "weights", "device", *_LOADING),
    view(RequestsSection, "max_new_tokens", "ignore_eos", "warmup", "system_prompt", "chat_template",
         max_new_tokens=64),
    SweepPlan,
    ReaderSection,
    _folder("sweep"),
    doc="``llmbench sweep``: every setup of a grid measured in interleaved rounds.",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------ scan


class ScanGrid(Section):
    """The points a scan visits: prompt lengths, context depths, batch sizes."""

    table: ClassVar[str] = "scan"
    prompt_tokens: str = setting("64,256,1024", "Prompt lengths for the TTFT curve, template included (comma list; "
                                 "'' for none).")  # fmt: skip
    depth: str = setting("0,512,2048", "Context depths for the TPOT curve (comma list).")
    batch: str = setting("1,2,4,8", "Batch sizes for the throughput curve (comma list).")
    rounds: int = setting(3, "Rounds; each visits every point, the order rotating.", ge=1, le=MAX_COUNT)
    prompts_per_point: int = setting(3, "Different prompts per length or depth point.", ge=1,
                                     le=limits.MAX_REQUESTS)  # fmt: skip
    batch_prompt_tokens: int = setting(128, "Length of each prompt of a batch.")


ScanSpec = spec(
    "ScanSpec", "scan",
    ScanGrid,
    ModelSection,
    view(LeversSection, "speculative"),
    view(RequestsSection, "max_new_tokens", "seed", "warmup", "system_prompt", "chat_template", max_new_tokens=32,
         seed={"help": "Seed of the synthetic prompts."}),
    _folder("scan"),
    doc="``llmbench scan``: TTFT, TPOT and throughput curves over controlled prompts.",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------ load


class LoadPlan(Section):
    """The rates a load test offers and the SLOs it holds them to."""

    table: ClassVar[str] = "load"
    rates: str = setting("auto", "Offered rates, requests/s (comma list), or auto: search for the saturation point.")
    slo: Optional[list[str]] = setting(
        None, "METRIC:pNN=LIMIT, e.g. ttft_ms:p90=1000 (repeatable; metrics: ttft_ms, tpot_ms, e2e_ms)."
    )
    min_attainment: float = setting(0.9, "A rate holds when this share of requests meets every SLO.")
    one_token_passes: bool = setting(False, "A one-token answer (no TPOT) passes a TPOT limit.")
    fluidity_target: float = setting(
        0.9, "A request is fluid when its fluidity index (Etalon: the share of token deadlines met) is at least this.",
        gt=0, le=1, allow_inf_nan=False,
    )  # fmt: skip
    fluidity_share: float = setting(
        0.99, "Fluid capacity: the highest rate at which this share of requests sent is fluid, every lower rate too.",
        gt=0, le=1, allow_inf_nan=False,
    )  # fmt: skip
    auto_start: float = setting(1.0, "auto: the first rate tried (then doubled or halved).")
    auto_steps: int = setting(3, "auto: bisections after the ramp.")
    probe_rate: Optional[float] = setting(
        None, "Probes: full-length streamed requests at this constant rate beside each rate's load, reported apart "
        "(a newcomer's wait: TTFT, TPOT, stalls, QoE, fluidity).", gt=0, le=limits.MAX_RATE_RPS, allow_inf_nan=False,
    )  # fmt: skip
    stop_saturated: Optional[bool] = setting(
        None, "End a rate early once it is past saturation (a growing queue, or refusals). Default: on with --rates "
        "auto.", flag="--stop-saturated/--no-stop-saturated",
    )  # fmt: skip
    stop_min_s: float = setting(
        10.0, "--stop-saturated: seconds of a rate before the rule is checked.", gt=0, le=limits.MAX_SCHEDULE_S,
        allow_inf_nan=False,
    )  # fmt: skip
    stop_window_s: float = setting(
        120.0, "--stop-saturated: the trailing seconds the rule fits.", gt=0, le=limits.MAX_SCHEDULE_S,
        allow_inf_nan=False,
    )  # fmt: skip


LoadTestSpec = spec(
    "LoadTestSpec", "load",
    view(PromptsSection, "prompts", *DATASET, prompts={"required": True, "help": _DATA}),
    view(ServerSection, "endpoint", "api_key_env", "timeout_s", "tokenizer", "server_metrics", "metrics_url",
         endpoint={"required": True, "help": "The server's base URL, e.g. http://127.0.0.1:8000/v1."},
         api_key_env={"help": "The variable holding the API key."},
         timeout_s={"help": "A request that receives nothing for this long fails (a stalled server), s."},
         tokenizer={"help": "Hub id, folder or .gguf to count tokens."}),
    view(ModelSection, "model", model={"help": "The model name to send."}),
    combine("arrivals", view(ArrivalsSection, "duration_s", "requests", "arrival", "workers", "ray",
                             duration_s={"default": DEFAULT_DURATION_S,
                                         "help": "Seconds of arrivals per rate (unless --requests)."}),
            LoadPlan),
    view(RequestsSection, "max_new_tokens", "ignore_eos", "warmup", "system_prompt", "seed", max_new_tokens=64,
         ignore_eos={"default": False, "help": "Ask for exactly --max-new-tokens."},
         seed={"help": "Seed of the arrival schedule (and of --num-prompts)."}),
    ReaderSection,
    _folder("load"),
    doc="``llmbench load``: a server under open-loop load, rate by rate, against SLOs.",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------ ab


class AbSides(Section):
    """The two sides ab measures against each other."""

    table: ClassVar[str] = "sides"
    base: str = setting(..., "A server URL, or a command line starting `llmbench worker ...`.")
    head: str = setting(..., "The same, for the side under test.")


class AbDesign(Section):
    """How ab measures: processes, TTFT-only pairs, order, or a wall-time budget that chooses them."""

    table: ClassVar[str] = "design"
    processes: int = setting(
        1,
        "Worker processes per side, one after another, each with its own random hash seed and environment size: a "
        "difference only one process shows stays noise (the interval is taken over the processes' own changes).",
    )
    ttft_pairs: int = setting(
        0,
        "Extra pairs of one output token each, spread over the processes: more TTFT samples for the time (kept in "
        "ttft_requests; TTFT rows only).",
    )
    duet: bool = setting(
        False,
        "Both sides at the same moment, each pinned to its own CPU, the CPUs swapped pair by pair (the workers "
        "need --threads 1): the machine's noise lands on both.",
    )
    budget: Optional[str] = setting(
        None,
        "Wall time to fill (300s, 5m, 1h): processes, rounds and TTFT-only pairs are chosen for the smallest "
        "detectable change, from this run's measured costs; the choice is printed. Replaces --processes, --repeats "
        "and --ttft-pairs.",
    )
    calibrate: bool = setting(
        False,
        "With --budget: first measure the workers' setups on this CPU (dtype, int8 dynamic quantization, threads, "
        "and --max-new-tokens 8 or 16) and measure with the one that projects the smallest detectable change; "
        "its flags are appended to both worker commands. Off: the setup as given.",
    )
    spawn: Literal["exec", "fork", "auto"] = setting(
        "exec",
        "How a worker process after the first starts: exec (a new process: its own imports, load, hash seed and "
        "weights' place), fork (forked from process 0, loaded once: ~0.1 s a start; they share its hash seed and "
        "weights, only a heap padding differs; the workers need --threads 1 on the CPU), auto (fork where both "
        "sides can).",
    )


class AbOutputs(Section):
    """Where ab's runs and report go, and how the history files them."""

    table: ClassVar[str] = "outputs"
    output: Optional[Path] = setting(
        None, "Folder for base.json and head.json (default: results/ab-<UTC time>).", short="-o"
    )
    fmt: Literal["table", "markdown", "json"] = setting("table", "Output format.", flag="--format")
    resume: bool = setting(False, "Continue the interrupted ab run in -o's folder.")
    anchor: Optional[str] = setting(
        None,
        "With --history: the base is this pinned ref's code (a tag or commit); the head is recorded relative to "
        "it, for trend --anchor.",
    )
    head_ref: Optional[str] = setting(None, "With --history: the head's ref (default: this checkout's commit).")
    move_anchor: bool = setting(
        False,
        "This ab measures the new anchor (head) against --anchor: later results against it chain onto the "
        "old one's index.",
    )


AbSpec = spec(
    "AbSpec", "ab",
    view(PromptsSection, "prompts", *DATASET, prompts={"required": True, "help": _DATA}),
    AbSides,
    view(ServerSection, "tokenizer", tokenizer={"help": "Hub id, folder or .gguf that counts prompts for the dataset "
                                                "filters (and ShareGPT replies' lengths)."}),
    view(RequestsSection, "seed", "repeats", "warmup", "max_new_tokens", "ignore_eos", "system_prompt",
         seed={"help": "Seed of --num-prompts."}, repeats={"help": "Times to go round the prompt list (pairs per "
                                                            "prompt)."},
         max_new_tokens=64, ignore_eos={"default": True, "help": "Generate exactly --max-new-tokens."}),
    AbDesign,
    ReaderSection,
    GateSection,
    combine("outputs", AbOutputs, view(OutputsSection, "history")),
    doc="``llmbench ab``: base and head measured side by side, request by request, and gated on the pair.",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------ quality


class QualityReference(Section):
    """The reference the candidate is held to, and what it is measured on."""

    table: ClassVar[str] = "reference"
    reference_dtype: Dtype = setting("float32", "The reference setup's dtype (no quantization).")
    reference_model: Optional[str] = setting(None, "Another model as the reference (same tokenizer).")
    text: Optional[Path] = setting(None, "Evaluation text (UTF-8); default: the one llmbench ships.")
    prompts: Optional[Path] = setting(None, "Prompts for the greedy continuations.")
    chunk_tokens: int = setting(512, "Teacher-forced chunk length (capped by the context).")
    reference_cache: Optional[Path] = setting(None, "Keep the reference's top-256 log-probs here, reuse them next "
                                              "time.")  # fmt: skip


QualitySpec = spec(
    "QualitySpec", "quality",
    view(ModelSection, *(n for n in ModelSection.model_fields if n != "reprobe")),
    view(LeversSection, "compile", compile={"help": "The candidate decodes through torch.compile."}),
    QualityReference,
    view(RequestsSection, "max_new_tokens", max_new_tokens=32),
    view(OutputsSection, "output", "overwrite", "history",
         output={"default": Path("quality.json"), "help": "The quality JSON to write."}),
    doc="``llmbench quality``: is the faster setup still the same model?",
)  # fmt: skip


# ------------------------------------------------------------------------------------------------ bisect


class BisectSection(Section):
    """What a bisect measures on each commit, and how long it may look."""

    table: ClassVar[str] = "bisect"
    metric: str = setting("tpot_ms", "The metric to bisect on: tpot_ms, ttft_ms, e2e_ms.")
    stat: Optional[str] = setting(None, "Its statistic (the gate's: gaps for tpot_ms, p50 otherwise, by default).")
    threshold: float = setting(2.0, "BAD must be slower than GOOD by more than this, %, for there to be anything to "
                               "find.")  # fmt: skip
    worker: str = setting("--weights random --dtype bfloat16 --threads 1", "The options of each commit's `llmbench "
                          "worker` (the model, dtype, threads).")  # fmt: skip
    prompts: str = setting("env_violations", "A prompt file or a shipped set's name.")
    processes: Optional[int] = setting(None, "Worker processes a side in each look (default: --look chooses).")
    repeats: int = setting(1, "With --processes: rounds of the prompts in each look.")
    look: str = setting("5m", "Each look's wall time (ab --budget), unless --processes fixes its design.")
    duet: bool = setting(True, "Both sides at once on their own CPUs (ab --duet).", flag="--duet/--abba")
    max_looks: int = setting(3, "Looks one commit may take before it is decided by its estimate.")
    max_skips: int = setting(5, "Commits that may fail to build or run before bisect gives up.")
    build: Optional[str] = setting(None, "A shell command run in each commit's tree first; failing skips the commit.")
    repo: Path = setting(Path("."), "The git repository (default: the current folder's).")


class BisectOutputs(Section):
    """Where a bisect's looks are kept."""

    table: ClassVar[str] = "outputs"
    output: Optional[Path] = setting(None, "The bisect's folder.", short="-o")
    resume: bool = setting(False, "Go on with the bisect in -o's folder.")
    keep_trees: bool = setting(False, "Keep each commit's worktree.")


_LOOK = view(RequestsSection, "max_new_tokens", "warmup", max_new_tokens=32)
BisectSpec = spec(
    "BisectSpec", "bisect", BisectSection, _LOOK, combine("outputs", BisectOutputs, view(OutputsSection, "history")),
    doc="``llmbench bisect GOOD BAD``: which commit made it slower.",
)  # fmt: skip
BisectStepSpec = spec(
    "BisectStepSpec", "bisect-step",
    view(BisectSection, *(n for n in BisectSection.model_fields if n not in ("max_skips", "repo"))), _LOOK,
    doc="``llmbench bisect-step GOOD``: the checked-out commit judged for ``git bisect run``.",
)  # fmt: skip

# ------------------------------------------------------------------------------------------------ paint


class PaintSection(Section):
    """The browser that paints the answers, and the check beside it."""

    table: ClassVar[str] = "paint"
    chromium: Optional[Path] = setting(None, "Chromium's executable (default: /usr/bin/chromium, else chromium or "
                                       "chromium-browser on PATH).")  # fmt: skip
    client_check: bool = setting(True, "Also stream each prompt once with llmbench's own client through the same "
                                 "URL: the buffering detector on its arrival stamps.",
                                 flag="--client-check/--no-client-check")  # fmt: skip


PaintSpec = spec(
    "PaintSpec", "paint",
    view(PromptsSection, "prompts", prompts={"required": True, "help": _PROMPT_FILE}),
    view(ServerSection, "endpoint", "api_key_env", "timeout_s",
         endpoint={"required": True, "help": "The server's base URL, e.g. http://127.0.0.1:8000/v1 (the page is "
                                             "served at its origin)."},
         api_key_env={"help": "The variable holding the API key (the page sends it too)."},
         timeout_s={"help": "A request that receives nothing for this long fails, s."}),
    view(ModelSection, "model", model={"help": "The model name to send."}),
    view(RequestsSection, "max_new_tokens", "ignore_eos", "warmup", "repeats", max_new_tokens=64,
         ignore_eos={"default": False, "help": "Ask for exactly --max-new-tokens."}),
    PaintSection,
    view(OutputsSection, "output", "overwrite",
         output={"default": Path("paint.json"), "help": "The paint JSON to write."}),
    doc="``llmbench paint``: the first painted character in a real browser, through whatever sits in between.",
)  # fmt: skip

# ------------------------------------------------------------------------------------------------ worker, serve


class ServeSection(Section):
    """Where ``llmbench serve`` listens and how much it queues."""

    table: ClassVar[str] = "serve"
    host: str = setting("127.0.0.1", "Address to listen on (loopback: no one else can reach it).")
    port: int = setting(8000, "Port to listen on.", ge=0, le=65_535)
    max_queue: int = setting(4, "Requests that may wait while one generates; more get 429.", ge=0)
    test_reasoning_tokens: int = setting(0, "For tests: send each answer's first N tokens as reasoning.", hidden=True,
                                         ge=0)  # fmt: skip
    test_tool_calls: int = setting(0, "For tests: answer a conversation's first N requests with tools with a "
                                   "scripted tool call.", hidden=True, ge=0)  # fmt: skip
    grammars: Literal["first-use", "start", "off"] = setting(
        "first-use",
        "When response_format's grammar set-up (llguidance) is built: in the first request that asks, "
        "before listening, or never (refused).",
    )
    max_tokens: int = setting(256, "max_tokens when a request gives none.", ge=1)


WorkerSpec = spec("WorkerSpec", "worker", ModelSection, LeversSection, doc="``llmbench worker``: one side of ab.")
_SERVED = (n for n in ModelSection.model_fields if n not in ("engine", "precision"))  # transformers only
ServeSpec = spec(
    "ServeSpec", "serve", view(ModelSection, *_SERVED), ServeSection,
    doc="``llmbench serve``: one model behind an OpenAI-compatible endpoint.",
)  # fmt: skip
ServeSpec.config_file = False  # a server started by hand: its few flags, no file

# the measuring commands' specs (run's is llmbench.spec.RunSpec)
SPECS = {s.command: s for s in (SweepSpec, ScanSpec, LoadTestSpec, AbSpec, QualitySpec, BisectSpec,
                                BisectStepSpec, PaintSpec)}  # fmt: skip
