"""The run JSON: a versioned schema, atomic saves, and a reader that refuses what it doesn't know.

Schema history (bump ``SCHEMA_VERSION`` on any change a reader of the old version would misread):
  1 (llmbench 0.1.0): first version. Optional fields added since, which a version-1 reader may ignore:
    machine.probe_before/probe_after/summary/samples (0.1.0, for compare's machine-or-model check);
    sessions, requests[].session, requests[].truncated_tokens, config.truncate (0.1.0, --resume/--truncate);
    load.decode_weight_bytes, summary.prefill_tokens_per_s/tpot_bound_ms/tpot_efficiency/
    roofline_mem_read_gbps (0.1.0, roofline);
    config.attn_implementation/cache_implementation/compile/quantization, load.quantize_s/compile_s
    (0.1.0, sweep);
    config.weights "unknown", config.endpoint, requests[].chunks/tokens_from/server_ttft_ms/server_queue_ms/
    stream_end_ms, summary.stream_*, client, failed_requests (0.1.0, endpoint runs).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from llmbench.errors import UserError, read_user_file

SCHEMA_VERSION = 1
_UMASK = os.umask(0)
os.umask(_UMASK)

# Written into every run so a reader never has to guess what a number means.
METRIC_FORMULAS: dict[str, str] = {
    "ttft_ms": "first_token_stamp - request_start; request_start is taken before chat templating and tokenizing",
    "tpot_ms": "(last_token_stamp - first_token_stamp) / (output_tokens - 1), for output_tokens >= 2; "
    "excludes the first token (as vLLM's TPOT); per request, then summarised over requests",
    "itl_ms": "token_times_ms[i] - token_times_ms[i-1] for i >= 1: every gap between consecutive tokens",
    "e2e_ms": "last_token_stamp - request_start",
    "decode_tokens_per_s": "(output_tokens - 1) / (last_token_stamp - first_token_stamp)",
    "tokenize_ms": "chat templating + tokenizing + moving the ids to the device, inside ttft_ms",
    "prefill_tokens_per_s": "prompt_tokens / (ttft_ms - tokenize_ms) * 1000: the first forward pass, "
    "generate()'s set-up included, without templating and tokenizing",
    "tpot_bound_ms": "decode_weight_bytes / mem_read_gbps: the fastest a decode step can read every weight once "
    "(tied embeddings counted once; KV cache and activations ignored)",
    "tpot_efficiency": "tpot_bound_ms / mean tpot_ms",
    "token_times_ms": "stamp of each output token, in ms since request_start; token_times_ms[0] == ttft_ms",
    "stamp": "time.perf_counter_ns() in the streamer's put(), when generate() hands over the token on the host",
}

# The same names measured over HTTP (config.mode "endpoint"): the client's clock, events instead of tokens.
ENDPOINT_METRIC_FORMULAS: dict[str, str] = {
    **METRIC_FORMULAS,
    "ttft_ms": "arrival of the first SSE event that carries content - request_start; request_start is taken "
    "before the HTTP request is built and sent (a role-only first event does not count)",
    "tpot_ms": "(last_content_event - first_content_event) / (output_tokens - 1), output_tokens from the "
    "server's usage, else from tokenizing the received text (requests[].tokens_from says which); as vLLM's TPOT",
    "itl_ms": "token_times_ms[i] - token_times_ms[i-1]: gaps between content events (an event may carry several "
    "tokens)",
    "e2e_ms": "last content event - request_start (stream_end_ms: when [DONE] or the end of the body arrived)",
    "tokenize_ms": "0: templating and tokenizing happen on the server, inside ttft_ms",
    "prefill_tokens_per_s": "prompt_tokens / ttft_ms * 1000: as the client sees it, transport and queue included",
    "token_times_ms": "arrival of each content event, in ms since request_start; token_times_ms[0] == ttft_ms",
    "stamp": "time.perf_counter_ns() when the SSE parser hands over the event (httpx + httpx-sse, one process)",
    "stream_gaps_under_1ms_share": "share of gaps between consecutive content events under 1 ms, all requests",
    "stream_largest_burst": "most content events of one request that arrived with under 1 ms between each",
    "stream_buffered": "true when at least half of the requests with >= 3 events had at least half of their "
    "gaps under 1 ms: the events were held and released together between server and client",
}


class _Model(BaseModel):
    # Unknown fields are kept, so a newer minor writer's extras survive a read-modify-write.
    model_config = ConfigDict(extra="allow", protected_namespaces=())


class Sampling(_Model):
    do_sample: bool = False
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None


class EndpointConfig(_Model):
    url: str  # the chat completions URL, without credentials or query
    api_key_env: str | None = None  # the variable the key came from (the key itself is never written)
    concurrency: int = 1
    server: dict | None = None  # what GET /health said (llmbench serve), if anything
    request_extra: dict = {}  # fields sent besides messages/model/stream (max_tokens, temperature, ...)


class RunConfig(_Model):
    mode: Literal["in-process", "endpoint"] = "in-process"
    model: str
    model_source: str  # "hub" | "folder" | "gguf" | "builtin"
    weights: Literal["pretrained", "random", "unknown"]  # unknown: an endpoint that doesn't say
    device: str
    dtype: str
    dtype_reason: str = ""
    threads: int | None = None
    max_new_tokens: int
    ignore_eos: bool
    warmup: int
    repeats: int
    prompt_file: str
    prompt_sha256: str
    prompt_count: int
    sampling: Sampling = Sampling()
    chat_template: bool = True
    system_prompt: str | None = None
    device_map: str | None = None
    truncate: bool = False  # prompts longer than the context were cut (left side) instead of refused
    attn_implementation: str | None = None  # --attn; None: transformers' default for the model
    cache_implementation: Literal["dynamic", "static"] = "dynamic"  # KV cache (--cache)
    compile: bool = False  # decode steps run through torch.compile (static cache)
    quantization: str | None = None  # "int8": dynamic int8 linear weights
    endpoint: EndpointConfig | None = None  # mode "endpoint": where and how the requests went


class GPUInfo(_Model):
    name: str
    memory_bytes: int | None = None
    driver: str | None = None
    cuda: str | None = None


class Environment(_Model):
    python: str
    torch: str | None = None
    transformers: str | None = None
    platform: str
    cpu_model: str
    cpu_count: int | None = None
    cpu_physical_cores: int | None = None
    ram_total_bytes: int | None = None
    gpu: GPUInfo | None = None


class Offload(_Model):
    disk: list[str] = []
    cpu: list[str] = []
    meta: list[str] = []
    missing_bytes: int = 0  # bytes of weights that are not in the memory of the device that computes


class LoadInfo(_Model):
    seconds: float
    device_map: dict[str, str] | None = None
    offload: Offload = Offload()
    allowed_offload: bool = False
    parameters: int | None = None
    weights_bytes: int | None = None
    decode_weight_bytes: int | None = None  # weights read per decode step: tied embeddings once, an untied
    # input embedding not at all (one row is gathered)
    quantize_s: float | None = None  # --quantize: seconds spent quantizing, after loading
    compile_s: float | None = None  # --compile: wall time of a 2-token generate() that compiles (untimed)


class RequestResult(_Model):
    prompt_index: int
    repeat: int
    prompt_tokens: int
    output_tokens: int
    tokenize_ms: float
    ttft_ms: float
    tpot_ms: float | None  # None when output_tokens < 2
    e2e_ms: float
    token_times_ms: list[float]
    output_token_ids_sha256: str
    output_text: str
    started_s: float = 0.0  # seconds since the first measured request started: shows drift over a run
    truncated_tokens: int = 0  # prompt tokens cut to fit the context (--truncate)
    session: int = 0  # index into Run.sessions: which invocation measured it (--resume adds sessions)
    # endpoint runs only: stamps are per content event, not per token
    chunks: int | None = None  # content events received (== len(token_times_ms))
    tokens_from: Literal["usage", "tokenizer", "chunks"] | None = None  # where output_tokens came from
    stream_end_ms: float | None = None  # [DONE] (or the body's end) arrived, ms since request_start
    server_ttft_ms: float | None = None  # llmbench serve's own stamp of the first token (from arrival)
    server_queue_ms: float | None = None  # llmbench serve: arrival until the model started on it (templating + wait)

    @model_validator(mode="after")
    def _invariants(self) -> RequestResult:
        stamps = self.output_tokens if self.chunks is None else self.chunks
        if len(self.token_times_ms) != stamps:
            raise ValueError("len(token_times_ms) != output_tokens (chunks, for endpoint runs)")
        if self.output_tokens and self.token_times_ms[0] != self.ttft_ms:
            raise ValueError("token_times_ms[0] != ttft_ms")
        return self


class Stats(_Model):
    n: int
    mean: float
    p50: float
    p90: float
    p99: float
    min: float
    max: float
    std: float


class Summary(_Model):
    requests: int
    ttft_ms: Stats
    tpot_ms: Stats | None = None
    e2e_ms: Stats
    output_tokens: Stats
    decode_tokens_per_s: Stats | None = None
    tokenize_ms: Stats | None = None
    prefill_tokens_per_s: Stats | None = None
    tpot_bound_ms: float | None = None  # roofline: decode_weight_bytes / mem_read_gbps
    tpot_efficiency: float | None = None  # tpot_bound_ms / mean TPOT (1.0 = at the memory limit)
    roofline_mem_read_gbps: float | None = None  # the bandwidth the bound used
    stream_buffered: bool | None = None  # endpoint runs: the events arrived in bursts (see metrics)
    stream_gaps_under_1ms_share: float | None = None
    stream_largest_burst: int | None = None
    stream_buffered_requests: int | None = None
    failed_requests: int = 0


class Probe(_Model):
    mem_read_gbps: float  # float32 sum over 256 MB (1 GB on GPU), the run's device and threads, median of 7
    matmul_gflops: float  # float32 256x1024 @ 1024x1024, the run's device and threads, median of 25
    threads: int
    seconds: float


class MachineSample(_Model):
    t_s: float  # seconds since sampling started
    cpu_busy_pct: float  # whole machine, 100 = every CPU busy
    own_cpu_pct: float  # this process, same scale
    other_cpu_pct: float  # busy - own: every other process
    steal_pct: float  # time the hypervisor gave this VM's CPUs to someone else
    load1: float
    freq_mhz: float | None = None
    rss_bytes: int
    swap_used_bytes: int


class MachineSummary(_Model):
    samples: int
    cpu_busy_pct_mean: float
    own_cpu_pct_mean: float
    other_cpu_pct_mean: float
    other_cpu_pct_max: float
    steal_pct_mean: float
    steal_pct_max: float
    load1_max: float
    freq_mhz_mean: float | None = None
    rss_max_bytes: int
    swap_used_max_bytes: int


class MachineState(_Model):
    swap_in_bytes: int = 0  # system-wide, during the requests
    swap_out_bytes: int = 0
    process_swap_bytes: int = 0  # this process's pages in swap at the end (VmSwap)
    probe_before: Probe | None = None
    probe_after: Probe | None = None
    summary: MachineSummary | None = None
    samples: list[MachineSample] = []


class ClientStats(_Model):
    """What the endpoint client itself cost: it shares the machine with a co-located server."""

    cpu_s: float  # this process's CPU time (user + system) during the measured requests
    wall_s: float
    cpu_pct_of_one_core: float  # 100 * cpu_s / wall_s
    cpu_ms_per_event: float | None = None  # cpu_s / content events received


class FailedRequest(_Model):
    prompt_index: int
    repeat: int
    error: str
    status: int | None = None  # HTTP status, when there was one
    started_s: float = 0.0


class Session(_Model):
    """One invocation that contributed requests (a resumed run has several)."""

    started_at: str
    environment: Environment
    load: LoadInfo | None = None
    interrupted_by: str | None = None  # "SIGINT" | "SIGTERM" when it stopped early


class Run(_Model):
    schema_version: Literal[1]  # == SCHEMA_VERSION; a file of another version is refused, never misread
    llmbench_version: str
    run_id: str
    created_at: str  # ISO 8601, UTC
    complete: bool
    config: RunConfig
    environment: Environment
    load: LoadInfo | None = None
    metrics: dict[str, str] = METRIC_FORMULAS
    warnings: list[str] = []
    requests: list[RequestResult] = []
    warmup_requests: list[RequestResult] = []
    summary: Summary | None = None
    machine: MachineState | None = None
    sessions: list[Session] = []
    client: ClientStats | None = None  # endpoint runs
    failed_requests: list[FailedRequest] = []  # endpoint runs: requests the server failed, the rest went on


class _Lean(BaseModel):
    # Fields not declared are skipped, not built: reading a 10,000-request run this way takes ~0.1 s.
    model_config = ConfigDict(extra="ignore", protected_namespaces=())


class RequestScalars(_Lean):
    """A request without its token stamps and text: what compare needs."""

    prompt_index: int
    repeat: int
    prompt_tokens: int
    output_tokens: int
    ttft_ms: float
    tpot_ms: float | None
    e2e_ms: float
    output_token_ids_sha256: str


class RunScalars(_Lean):
    """A run without per-token data (``load_run(..., scalars_only=True)``)."""

    schema_version: Literal[1]
    llmbench_version: str
    run_id: str
    created_at: str
    complete: bool
    config: RunConfig
    environment: Environment
    load: LoadInfo | None = None
    machine: MachineState | None = None
    summary: Summary | None = None
    requests: list[RequestScalars] = []


def save_run(run: Run, path: str | Path) -> None:
    """Write ``run`` to ``path`` atomically: a temp file in the same folder, fsync, then rename.

    A reader (or a crash at any instant) sees either the previous complete file or the new one.
    """
    write_atomic(path, run.model_dump_json(exclude_none=False).encode("utf-8"))


def write_atomic(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temp file in the same folder, fsync and rename."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)  # mkstemp makes 0600; a result file is as readable as any other
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def journal_path(path: str | Path) -> Path:
    """The append-only sidecar of a run JSON: one finished request a line, until the run is compacted."""
    p = Path(path)
    return p.with_name(p.name + ".journal")


class RunWriter:
    """Saves a run so that a crash at any instant loses at most the request in flight, in O(n) total work.

    Every finished request is appended to ``<path>.journal`` (one JSON line, fsync): O(1) per request.
    The full JSON is rewritten atomically (a *snapshot*) after each of the first ``always`` requests, then
    whenever the requests since the last snapshot reach ``growth`` (10%) of its size: snapshot sizes grow
    geometrically, so all of them together write about 1 + 1/growth = 11 times the final file, not n times.
    Each snapshot empties the journal. ``close()`` writes the final JSON and removes the journal. Readers
    (:func:`load_run`, ``--resume``) merge a journal left by a killed run.
    """

    def __init__(self, path: str | Path, run: Run, *, growth: float = 0.1, always: int = 20, clock=None) -> None:
        self.path = Path(path)
        self.journal = journal_path(path)
        self.growth, self.always = growth, always
        self._clock = clock or time.perf_counter
        self._last_n = 0
        self.snapshot_seconds = 0.0
        self.snapshots = 0
        self.journal_seconds = 0.0
        self.snapshot(run)

    def snapshot(self, run: Run) -> None:
        """Rewrite the whole JSON atomically and empty the journal (it is all in the snapshot now)."""
        t = self._clock()
        save_run(run, self.path)
        with open(self.journal, "wb") as f:
            os.fsync(f.fileno())
        self._last_n = len(run.requests)
        self.snapshot_seconds += self._clock() - t
        self.snapshots += 1

    def add(self, run: Run, request: RequestResult, summarize=None) -> bool:
        """Record ``request`` (already appended to ``run.requests``); returns True when a snapshot was written.

        ``summarize`` refreshes ``run.summary`` before a snapshot (it is O(n), so only then).
        """
        t = self._clock()
        with open(self.journal, "ab") as f:
            f.write(request.model_dump_json().encode("utf-8") + b"\n")
            f.flush()
            os.fsync(f.fileno())
        self.journal_seconds += self._clock() - t
        n = len(run.requests)
        if n <= self.always or n - self._last_n >= self.growth * self._last_n:
            if summarize:
                summarize()
            self.snapshot(run)
            return True
        return False

    def close(self, run: Run) -> None:
        """The final JSON; the journal goes."""
        save_run(run, self.path)
        self.journal.unlink(missing_ok=True)


def merge_journal(run: Run, path: str | Path) -> int:
    """Add the requests of ``path``'s journal (a killed run's) that the JSON lacks; returns how many.

    A torn last line (the kill came mid-write) is the request in flight: dropped.
    """
    jp = journal_path(path)
    if not jp.is_file():
        return 0
    have = {(r.prompt_index, r.repeat) for r in run.requests}
    added = 0
    for line in jp.read_bytes().splitlines():
        try:
            req = RequestResult.model_validate_json(line)
        except ValidationError:
            continue
        if (req.prompt_index, req.repeat) not in have:
            run.requests.append(req)
            have.add((req.prompt_index, req.repeat))
            added += 1
    if added:
        from llmbench.stats import summarize

        old = run.summary
        run.summary = summarize(
            run.requests,
            run.load.decode_weight_bytes if run.load else None,
            old.roofline_mem_read_gbps if old else None,
        )
    return added


def load_run(path: str | Path, *, scalars_only: bool = False) -> Run:
    """Read and validate a run JSON; :class:`UserError` (one line, naming the file) for anything unusable.

    ``scalars_only`` skips the token stamps and texts (returns a :class:`RunScalars`): 3x faster.
    """
    p = Path(path)
    data = read_user_file(p, "run file")
    if scalars_only and journal_path(p).is_file():
        scalars_only = False  # a killed run: read it whole so its journal can be merged
    try:
        # The fast path: pydantic parses and validates in one pass (a 10,000-request run in ~0.4 s).
        run = (RunScalars if scalars_only else Run).model_validate_json(data)
    except ValidationError:
        _diagnose(p, data)  # raises the one-line reason
        raise UserError(f"{p} is not a valid run JSON") from None  # _diagnose found nothing more precise
    if not scalars_only:
        merge_journal(run, p)  # a killed run's last requests are in its journal (no journal: nothing to do)
    return run


def _diagnose(p: Path, data: bytes) -> None:
    """Why ``data`` is not a run JSON, as a :class:`UserError`, checked in the order a user can act on."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{p} is not a run JSON (not UTF-8 text)") from None
    if not text.strip():
        raise UserError(f"{p} is empty, not a run JSON")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        hint = " (truncated?)" if e.pos >= len(text.rstrip()) else ""
        raise UserError(f"{p} is not valid JSON{hint}: {e.msg} at line {e.lineno}") from None
    if not isinstance(obj, dict) or "schema_version" not in obj or "requests" not in obj:
        raise UserError(f"{p} is not an llmbench run JSON (no schema_version/requests)")
    version = obj["schema_version"]
    if version != SCHEMA_VERSION:
        raise UserError(
            f"{p} has schema_version {version!r}; this llmbench ({_version()}) reads version {SCHEMA_VERSION}: "
            "upgrade or downgrade llmbench to read it"
        )
    try:
        Run.model_validate(obj)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise UserError(f"{p} is not a valid run JSON: {loc}: {err['msg']}") from None


def _version() -> str:
    from llmbench import __version__

    return __version__


def utc_now() -> str:
    """ISO 8601 UTC to the second, as every timestamp in a run is written."""
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def new_run_record(config: RunConfig, environment: Environment, **fields) -> Run:
    """A run before its first request (both run modes): version stamps, a fresh id, ``complete: false``."""
    import uuid

    return Run(
        schema_version=SCHEMA_VERSION,
        llmbench_version=_version(),
        run_id=uuid.uuid4().hex,
        created_at=utc_now(),
        complete=False,
        config=config,
        environment=environment,
        **fields,
    )


def default_output_path(model: str, device: str, folder: str | Path = "results") -> Path:
    """``results/<UTC time>-<model>-<device>.json``; a suffix keeps two runs in the same second apart."""
    from datetime import datetime, timezone

    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    name = Path(model.rstrip("/\\")).name or "model"
    slug = "".join(c if c.isalnum() or c in "._-" else "_" for c in f"{name}-{device.replace(':', '')}")
    base = Path(folder) / f"{stamp}-{slug}"
    path, k = base.with_suffix(".json"), 1
    while path.exists():
        path, k = Path(f"{base}-{k}.json"), k + 1
    return path


def prepare_output(path: str | Path, overwrite: bool) -> Path:
    """Check, before any slow work, that the run JSON can be written at ``path`` without losing a file.

    A missing folder is made; a folder that can't be made, an existing file (unless ``overwrite``) or an
    unwritable place is a :class:`UserError`.
    """
    p = Path(path).expanduser()
    if p.is_dir():
        raise UserError(f"output {p} is a folder; give a file name such as {p / 'run.json'}")
    if p.exists() and not overwrite:
        raise UserError(f"output {p} already exists; choose another -o or pass --overwrite")
    for parent in [p.parent, *p.parent.parents]:
        if parent.exists() and not parent.is_dir():
            raise UserError(f"cannot make the output folder {p.parent}: {parent} is a file")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=p.parent)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise UserError(f"cannot write to {p.parent}: {e.strerror or e}") from None
    return p
