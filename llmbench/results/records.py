"""The dict-shaped records a run JSON carries (``config.reader``, ``config.prompt_source``, ``cpu``, ...), typed.

They stay plain dicts (``dict[str, Any]`` to their writers and readers, which index them by key), but a run is
checked key by key against these TypedDicts when it is built or read back: a value of the wrong type or out of its
bounds is refused in one line naming it (``load_run``), never a crash in the command that shows it. Every key is
optional (a record of one kind holds some of them), and a key a newer version adds is kept, as for the schema's
models. Part of the run JSON's contract: a change here is a change of
:data:`llmbench.results.schema.SCHEMA_VERSION`'s history.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, ConfigDict, Field, TypeAdapter, with_config
from typing_extensions import Required, TypedDict

from llmbench.results.reader import MAX_CPS, MAX_WPM, MIN_WPM

# a measured duration or size: finite, never negative
Seconds = Annotated[float, Field(ge=0, allow_inf_nan=False)]
NonNeg = Annotated[float, Field(ge=0, allow_inf_nan=False)]
Share = Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)]
Count = Annotated[int, Field(ge=0, le=2**63 - 1)]  # what an int64 column holds
Positive = Annotated[int, Field(ge=1, le=2**63 - 1)]
Number = Annotated[float, Field(allow_inf_nan=False)]  # any sign (a change, a clock), finite
Sample = Optional[float]  # a server's gauge: any value it reported (Prometheus allows NaN and inf)

OPEN = ConfigDict(extra="allow")


@with_config(OPEN)
class ReaderRecord(TypedDict, total=False):
    """``config.reader``: the reader's pace (:mod:`llmbench.results.reader`)."""

    words_per_minute: Annotated[float, Field(ge=MIN_WPM, le=MAX_WPM, allow_inf_nan=False)]
    chars_per_s: Optional[Annotated[float, Field(gt=0, le=MAX_CPS, allow_inf_nan=False)]]


@with_config(OPEN)
class SpeculativeRecord(TypedDict, total=False):
    """``config.speculative`` (:meth:`llmbench.core.speculative.Speculative.record`)."""

    method: Required[Literal["prompt-lookup", "draft"]]
    draft_tokens: Required[Positive]
    max_ngram: Positive
    draft_model: str


@with_config(OPEN)
class DatasetSource(TypedDict, total=False):
    """``config.prompt_source`` of a dataset's or a trace's prompts: what was read and kept."""

    version: int
    path: Required[str]
    format: Required[str]
    file_sha256: str
    prompt_column: Optional[str]
    output_len_column: Optional[str]
    output_tokens_from: Optional[str]
    output_tokens: Optional[list[Count]]
    default_output_tokens: Optional[Count]
    min_prompt_tokens: Optional[Count]
    max_prompt_tokens: Optional[Count]
    num_prompts: Optional[Positive]
    seed: Optional[Count]
    entries: Required[Count]
    kept: Required[Count]
    dropped_shorter: Count
    dropped_longer: Count
    skipped: dict[str, Count]
    rows: list[str]
    template_tokens: Count
    lengthened_rows: list[str]


@with_config(OPEN)
class PrefixGroupsSource(TypedDict, total=False):
    """``config.prompt_source`` of ``--prefix-groups`` (:mod:`llmbench.workloads.prefixes`)."""

    kind: Required[Literal["prefix-groups"]]
    version: int
    count: Required[Positive]
    groups: Required[Positive]
    groups_used: Required[Count]
    dist: Required[str]
    seed: Required[Count]
    prefix_tokens: Required[Count]
    suffix_tokens: Required[Count]
    template_tokens: Required[Count]
    group_of: list[Count]
    prefix_reuse_expected: Required[Share]


@with_config(OPEN)
class SyntheticRecord(TypedDict, total=False):
    """``config.synthetic`` (:func:`llmbench.workloads.synthetic.synthetic_record`)."""

    tokens: Positive
    count: Positive
    seed: Count
    generator: int
    corpus_sha256: str
    scan_point: str


@with_config(OPEN)
class SessionsRecord(TypedDict, total=False):
    """``config.sessions`` (:func:`llmbench.workloads.sessions.record`)."""

    turns: Positive
    conversations: Count
    think_time_s: Seconds
    later_turns: str
    follow_ups: list[str]
    tasks: Count  # agent tasks (tool_results): how many, their steps in all, their tools' latencies
    steps: Count
    tool_latencies_ms: list[NonNeg]


@with_config(OPEN)
class ToolsRecord(TypedDict, total=False):
    """``config.tools``: a workload that asks for tool calls or structured output (:mod:`llmbench.workloads.tools`)."""

    prompts_with_tools: Count
    prompts_with_response_format: Count
    tool_names: list[str]
    constraints: Count  # distinct constraints a server compiles (response formats, forced tool calls)
    tasks: Count  # agent tasks (lines with tool_results)


@with_config(OPEN)
class PrecisionRecord(TypedDict, total=False):
    """``config.precision``: an engine's weight format."""

    format: str
    weights: str
    activations: str
    kv_cache: str


@with_config(OPEN)
class ProcessRecord(TypedDict, total=False):
    """One worker process of ``config.engine_settings.processes`` (ab)."""

    pid: Optional[int]
    spawn: str
    spawn_s: Optional[Seconds]
    fork_s: Optional[Seconds]
    startup_s: Optional[Seconds]
    load_s: Optional[Seconds]
    warmup_s: Optional[Seconds]
    start_read_mb: Optional[NonNeg]
    hash_seed: Optional[int]
    env_pad: Optional[Count]
    heap_pad: Optional[Count]


@with_config(OPEN)
class EngineSettingsRecord(TypedDict, total=False):
    """``config.engine_settings``: an engine's own settings (any keys) and ab's worker processes."""

    worker_processes: Positive
    processes: list[ProcessRecord]
    first_start: Optional[ProcessRecord]


@with_config(OPEN)
class RequestExtraRecord(TypedDict, total=False):
    """``config.endpoint.request_extra``: what each request's body asked beside the messages."""

    max_tokens: Positive
    temperature: NonNeg
    top_p: Share
    ignore_eos: bool


@with_config(OPEN)
class TraceRecord(TypedDict, total=False):
    """``config.endpoint.arrival.trace`` (:meth:`llmbench.workloads.trace.Trace.record`)."""

    path: str
    format: str
    sha256: str
    time_unit: str
    time_scale: Annotated[float, Field(gt=0, allow_inf_nan=False)]
    start_s: Optional[Seconds]
    end_s: Optional[Seconds]
    rows: Count
    rows_in_file: Count
    block_tokens: Positive
    generator: int
    prefix_reuse_expected: Share


@with_config(OPEN)
class AbSetupRecord(TypedDict, total=False):
    """``config.ab.setup``: each process's hash seed, environment padding and who went first."""

    spawn: str
    hash_seed: list[int]
    env_pad: list[Count]
    heap_pad: list[Count]
    base_first: list[bool]


@with_config(OPEN)
class GitRecord(TypedDict, total=False):
    """``environment.git``: the checkout llmbench ran in."""

    commit: Optional[str]
    branch: Optional[str]
    dirty: Optional[bool]


@with_config(OPEN)
class ConvertStep(TypedDict, total=False):
    step: str
    tool: str
    seconds: Seconds
    cached: bool
    cache_key: str


@with_config(OPEN)
class ConvertedRecord(TypedDict, total=False):
    """``load.converted``: the steps that made the engine's files."""

    steps: list[ConvertStep]
    path: str


@with_config(OPEN)
class WeightsCacheRecord(TypedDict, total=False):
    """``load.weights_cache``: the random weights' content-addressed file."""

    path: str
    key: str
    hit: bool
    build_s: Optional[Seconds]


@with_config(OPEN)
class CpuRecord(TypedDict, total=False):
    """``cpu``: what the tokens cost the CPU (:func:`llmbench.machine.telemetry.cpu_record`)."""

    cpu_s: Seconds
    busy_s: Seconds
    cores_busy: Optional[NonNeg]
    cpu_ms_per_output_token: Optional[NonNeg]
    cpu_ms_per_request: Optional[NonNeg]
    freq_mhz_mean: Optional[NonNeg]
    energy_j: Optional[NonNeg]
    energy_missing: Optional[str]
    j_per_output_token: Optional[NonNeg]


@with_config(OPEN)
class GpuRecord(TypedDict, total=False):
    """``machine.gpu``: the GPU's energy, clocks and memory over the run (:mod:`llmbench.machine.telemetry`)."""

    name: Optional[str]
    energy_j: Optional[NonNeg]
    window_energy_j: Optional[NonNeg]
    energy_method: Optional[str]
    energy_missing: Optional[str]
    power_integral_j: Optional[NonNeg]
    j_per_output_token: Optional[NonNeg]
    output_tokens_per_j: Optional[NonNeg]
    power_w_mean: Optional[NonNeg]
    power_w_max: Optional[NonNeg]
    sm_clock_mhz_min: Optional[Count]
    sm_clock_mhz_max: Optional[Count]
    clock_events: list[str]
    slowdowns: list[str]
    temperature_c_max: Optional[Number]
    memory_used_max_bytes: Optional[Count]
    torch_max_allocated_bytes: Optional[Count]
    torch_max_reserved_bytes: Optional[Count]
    other_processes: list[int]
    unsupported: dict[str, str]
    shared_by_runs: Positive


@with_config(OPEN)
class GpuSample(TypedDict, total=False):
    """One of ``machine.gpu_samples``."""

    t_s: Required[Seconds]
    power_w: Optional[NonNeg]
    sm_clock_mhz: Optional[Count]
    mem_clock_mhz: Optional[Count]
    clock_events: Optional[list[str]]
    temperature_c: Optional[Number]
    memory_used_bytes: Optional[Count]
    utilization_pct: Optional[Annotated[float, Field(ge=0, le=100, allow_inf_nan=False)]]
    other_processes: Optional[list[int]]


@with_config(OPEN)
class GreedyRecord(TypedDict, total=False):
    prompts: Count
    identical_share: Optional[Share]
    first_divergence_median: Optional[float]
    first_divergence: list[Optional[Count]]
    max_new_tokens: Positive


@with_config(OPEN)
class QualityRecord(TypedDict, total=False):
    """``quality`` (sweep --quality): the setup against its reference (``llmbench quality``'s fields)."""

    reference: dict[str, Any]
    text_sha256: str
    positions: Count
    # KL divergences and perplexities as computed (an overflow may make them inf): typed, not bounded
    kld_mean: Optional[float]
    kld_p99: Optional[float]
    kld_max: Optional[float]
    top1_agreement: Optional[Share]
    perplexity_candidate: Optional[float]
    perplexity_reference: Optional[float]
    kld_method: str
    greedy: GreedyRecord


@with_config(OPEN)
class GaugeRecord(TypedDict, total=False):
    name: str
    mean: Required[Sample]
    max: Required[Sample]
    min: Sample
    over_labels: str
    label_sets: Required[Positive]
    max_label_set: Sample


@with_config(OPEN)
class CounterRecord(TypedDict, total=False):
    name: str
    delta: Sample
    first: Sample
    last: Sample
    kind: str


@with_config(OPEN)
class ServerMetricsRecord(TypedDict, total=False):
    """``server_metrics``: the server's Prometheus page over the run (``servermetrics.summarize``)."""

    url: str
    interval_s: Seconds
    scrapes: Required[Count]
    errors: list[str]
    window_s: Optional[Seconds]
    server: Optional[str]
    gauges: dict[str, GaugeRecord]
    counters: dict[str, CounterRecord]
    histograms: dict[str, dict[str, Any]]
    raw: dict[str, dict[str, Any]]
    notes: list[str]
    prefix_cache_hit_rate: Sample


# load.phases: each phase of the cold start, seconds (first_ttft_ms, ms); None where it does not apply
Phases = dict[str, Optional[NonNeg]]
# config.spec: the settings asked for, table by table (llmbench.spec)
SpecRecord = dict[str, dict[str, Any]]


def _check(keys: type) -> Callable[[dict[str, Any]], dict[str, Any]]:
    """A validator of a dict against the TypedDict ``keys`` (its adapter built on first use: not at import, which
    --help and compare pay for)."""
    adapter: list[TypeAdapter[Any]] = []

    def check(value: dict[str, Any]) -> dict[str, Any]:
        if not adapter:
            adapter.append(TypeAdapter(keys))
        return adapter[0].validate_python(value)

    return check


# the schema's field types: a dict to the code, checked against its TypedDict by pydantic
Reader = Annotated[dict[str, Any], AfterValidator(_check(ReaderRecord))]
Speculative = Annotated[dict[str, Any], AfterValidator(_check(SpeculativeRecord))]
PromptSource = Annotated[dict[str, Any], AfterValidator(_check(Union[PrefixGroupsSource, DatasetSource]))]
Synthetic = Annotated[dict[str, Any], AfterValidator(_check(SyntheticRecord))]
Sessions = Annotated[dict[str, Any], AfterValidator(_check(SessionsRecord))]
Tools = Annotated[dict[str, Any], AfterValidator(_check(ToolsRecord))]
Precision = Annotated[dict[str, Any], AfterValidator(_check(PrecisionRecord))]
EngineSettings = Annotated[dict[str, Any], AfterValidator(_check(EngineSettingsRecord))]
RequestExtra = Annotated[dict[str, Any], AfterValidator(_check(RequestExtraRecord))]
TraceInfo = Annotated[dict[str, Any], AfterValidator(_check(TraceRecord))]
AbSetup = Annotated[dict[str, Any], AfterValidator(_check(AbSetupRecord))]
Git = Annotated[dict[str, Any], AfterValidator(_check(GitRecord))]
Converted = Annotated[dict[str, Any], AfterValidator(_check(ConvertedRecord))]
WeightsCache = Annotated[dict[str, Any], AfterValidator(_check(WeightsCacheRecord))]
Cpu = Annotated[dict[str, Any], AfterValidator(_check(CpuRecord))]
Gpu = Annotated[dict[str, Any], AfterValidator(_check(GpuRecord))]
GpuSampleDict = Annotated[dict[str, Any], AfterValidator(_check(GpuSample))]
Quality = Annotated[dict[str, Any], AfterValidator(_check(QualityRecord))]
ServerMetrics = Annotated[dict[str, Any], AfterValidator(_check(ServerMetricsRecord))]
