"""Where a run's prompts come from, written once: what the user asked for (:class:`Workload`), the source it names
(:data:`Source`: a prompt list, a dataset, ``--synthetic``, a trace's rows, prefix groups), and the prompts the
run loop sends (:class:`Prepared`: made or chosen with the run's own token count, expanded into ``--turns``).

The steps, in the order a command takes them (each refuses what it can as early as it can, before anything slow):

1. :meth:`Workload.of` (a command's arguments) or :func:`as_source` (the Python API's ``prompts``);
2. :func:`read_trace` (``--trace``'s rows: the open loop's schedule is made of them) and :func:`source`;
3. :func:`begin`: a dataset is read at once (a bad file fails before anything loads) and chosen at once where no
   token count is needed;
4. :func:`prepare`, once the backend is made: the prompts, counted as the run counts ``prompt_tokens``.

Which counter counts is decided here: the backend's own (``counting``: a model in this process, or ``--endpoint``'s
``--tokenizer``) for ``run``; ``--tokenizer``'s :class:`~llmbench.backends.http.client.TokenCounter` for the commands
with no model in their process (:func:`prompt_list`: ``load``, ``ab``). The workloads layer takes the counts it is
given and never chooses one.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union

from llmbench.core.errors import UserError
from llmbench.spec import DATASET
from llmbench.workloads import promptsets, sessions
from llmbench.workloads.dataset import DatasetSpec, Rows
from llmbench.workloads.prefixes import PrefixSpec
from llmbench.workloads.prompts import PromptSet, as_prompt_set
from llmbench.workloads.synthetic import SyntheticSpec, synthetic_record
from llmbench.workloads.trace import Trace

if TYPE_CHECKING:
    from llmbench.options import RunOptions
    from llmbench.results.schema import RunConfig

# where prompts come from: read already (a prompt list), or made or chosen once the run's tokenizer is loaded
Source = Union[PromptSet, DatasetSpec, SyntheticSpec, Trace, PrefixSpec]
# a prompt's tokens as the run counts them (template and system prompt included), and the tokenizer
Counting = tuple[Callable[[str], int], Any]

DATASET_OPTIONS = DATASET  # the spec's dataset settings
TRACE_OPTIONS = ("trace_format", "time_scale", "start", "end")


def flag(name: str) -> str:
    """An argument's option as the user types it (``min_prompt_tokens`` -> ``--min-prompt-tokens``)."""
    return "--" + name.rstrip("_").replace("_", "-")


@dataclass(frozen=True)
class Workload:
    """What the user asked for, option by option (the names are the CLI's): a prompt file or dataset (``prompts``
    and the dataset options), ``--synthetic``, ``--prefix-groups``, or ``--trace``; ``endpoint``, ``rate`` and
    ``repeats`` only for what a trace refuses."""

    prompts: str | Path | None = None
    synthetic: str | None = None
    seed: int = 0
    prompt_format: str | None = None
    prompt_column: str | None = None
    output_len_column: str | None = None
    min_prompt_tokens: int | None = None
    max_prompt_tokens: int | None = None
    num_prompts: int | None = None
    prefix_groups: int | None = None
    prefix_tokens: int | None = None
    suffix_tokens: int | None = None
    group_dist: str | None = "uniform"
    trace: str | Path | None = None
    trace_format: str | None = None
    time_scale: float | None = None
    start: float | None = None
    end: float | None = None
    endpoint: str | None = None
    rate: float | None = None
    repeats: int = 1

    @classmethod
    def of(cls, spec: Any) -> Workload:
        """From a command's spec (:class:`llmbench.spec.Spec`): the settings its sections hold of these names (a
        setting has one name in every section); the others keep their defaults."""
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for t in spec.sections() for k, v in getattr(spec, t) if k in names})

    def given(self, names: Sequence[str]) -> dict[str, Any]:
        """Those of ``names`` the user gave (not None), in order."""
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


def read_trace(w: Workload) -> Trace | None:
    """``--trace``'s rows (read before anything loads: a bad row is one line), or None; UserError for the options
    that go with it given without it, and for what a trace's rows can't be sent with."""
    from llmbench.workloads import trace

    if w.trace is None:
        for name in TRACE_OPTIONS:
            if getattr(w, name) is not None:
                raise UserError(f"--{name.replace('_', '-')} goes with --trace")
        return None
    if w.endpoint is None:
        raise UserError("a trace is replayed against a server: give --endpoint URL (and --tokenizer, the server's)")
    if w.prompts is not None or w.synthetic is not None or w.rate is not None:
        raise UserError("--trace makes the prompts and the schedule: drop PROMPTS, --synthetic and --rate")
    # what would choose or make other prompts, or send them again: the trace's rows are sent once each, at their time
    ignored = [flag(k) for k in w.given((*DATASET_OPTIONS, "prefix_groups", "prefix_tokens", "suffix_tokens"))]
    ignored += ["--group-dist"] if w.group_dist != "uniform" else []
    ignored += ["--repeats"] if w.repeats != 1 else []
    if ignored:
        raise UserError(f"{', '.join(ignored)}: not with --trace, whose rows are the prompts, each sent once at its "
                        "time")  # fmt: skip
    if w.trace_format is None:
        raise UserError(f"--trace needs --trace-format ({', '.join(trace.FORMATS)})")
    spec = trace.TraceSpec(str(w.trace), w.trace_format, 1.0 if w.time_scale is None else w.time_scale, w.start,
                           w.end)  # fmt: skip
    return trace.read(spec)


def source(w: Workload, trace: Trace | None = None) -> Source:
    """The source ``w`` names: a prompt file's prompts (read now), or the spec of prompts made or chosen once the
    tokenizer is loaded (synthetic ones, prefix groups, a dataset's, read at :func:`begin`). ``trace``: the rows
    :func:`read_trace` read (when not given, :func:`read_trace` is asked here)."""
    from llmbench.workloads import dataset
    from llmbench.workloads.prompts import load_prompts

    trace = trace if trace is not None else read_trace(w)
    if trace is not None:
        return trace  # the trace's rows: prompts made once --tokenizer is loaded
    if w.prefix_groups is not None:
        return _prefix_groups(w)
    for name in ("prefix_tokens", "suffix_tokens"):
        if getattr(w, name) is not None:
            raise UserError(f"--{name.replace('_', '-')} goes with --prefix-groups")
    if w.group_dist not in (None, "uniform"):
        raise UserError("--group-dist goes with --prefix-groups")
    if (w.prompts is None) == (w.synthetic is None):
        raise UserError("give either a prompt file or --synthetic TOKENSxCOUNT (or --endpoint with --trace)")
    given = w.given(DATASET_OPTIONS)
    if w.synthetic is not None:
        if given:
            raise UserError(f"--{next(iter(given)).replace('_', '-')} is for a prompt file or dataset, not --synthetic")
        return SyntheticSpec.parse(w.synthetic, w.seed)
    assert w.prompts is not None
    fmt = given.pop("prompt_format", None)
    if not given and not dataset.is_dataset(w.prompts, fmt):
        return load_prompts(w.prompts, as_lines=fmt == "txt")  # a prompt list: .txt, or .jsonl with a "prompt" field
    path = Path(w.prompts)
    shipped = None if path.exists() else promptsets.find(w.prompts)  # a shipped set's name, read as a dataset
    return DatasetSpec(str(shipped or path), format=fmt, seed=w.seed, **given)


def _prefix_groups(w: Workload) -> PrefixSpec:
    """--prefix-groups' spec (the prompts are made once the tokenizer is loaded)."""
    if w.prompts is not None or w.synthetic is not None:
        raise UserError("--prefix-groups makes the prompts: drop PROMPTS and --synthetic")
    missing = [flag(k) for k in ("prefix_tokens", "suffix_tokens", "num_prompts") if getattr(w, k) is None]
    if missing:
        raise UserError(f"--prefix-groups needs {', '.join(missing)}")
    dataset_only = [flag(k) for k in w.given(DATASET_OPTIONS) if k != "num_prompts"]
    if dataset_only:
        raise UserError(f"{', '.join(dataset_only)}: options of a dataset; --prefix-groups makes its own prompts")
    assert w.prefix_groups is not None and w.prefix_tokens is not None and w.suffix_tokens is not None
    assert w.num_prompts is not None
    spec = PrefixSpec(w.prefix_groups, w.prefix_tokens, w.suffix_tokens, w.num_prompts, w.group_dist or "uniform",
                      w.seed)  # fmt: skip
    spec.validate()
    return spec


def as_source(prompts: Sequence[str] | str | Path | Source) -> Source:
    """The Python API's ``prompts``: a spec as it is (a dataset's is chosen once the model is loaded); a prompt
    file's path or a list of prompts -> their PromptSet."""
    if isinstance(prompts, (PromptSet, DatasetSpec, SyntheticSpec, Trace, PrefixSpec)):
        return prompts
    return as_prompt_set(prompts)


# ------------------------------------------------------------------------------- commands with no model here


def prompt_list(w: Workload, options: RunOptions, tokenizer: str | None) -> PromptSet:
    """``load``/``ab``: a prompt file, or a dataset chosen here, counted by ``tokenizer`` (the server's) where it
    must be (a dataset's output lengths change ``options``: see :func:`llmbench.workloads.dataset.apply_lengths`)."""
    src = source(dataclasses.replace(w, synthetic=None))
    if isinstance(src, DatasetSpec):
        return with_tokenizer(src, options, tokenizer)
    assert isinstance(src, PromptSet), src  # these commands take no option that makes prompts
    return src


def with_tokenizer(spec: DatasetSpec, options: RunOptions, tokenizer: str | None) -> PromptSet:
    """A dataset's prompt set for a command that has no model in its process (``load``, ``ab``): counted by
    ``tokenizer`` (hub id, folder or .gguf; the server's) where the filters or ShareGPT replies need it.
    ``options`` changes as :func:`llmbench.workloads.dataset.apply_lengths` says."""
    from llmbench.workloads import dataset

    rows = dataset.read(spec)
    counting: Counting | None = None
    if dataset.counts(spec, rows) and tokenizer:
        from llmbench.backends.http.client import TokenCounter

        counter = TokenCounter(tokenizer)
        counting = counter.counter_of(options.system_prompt), counter.tok
    refusal = "--min-prompt-tokens/--max-prompt-tokens count with the run's tokenizer: give --tokenizer"
    return dataset.apply_lengths(_select(spec, rows, counting, refusal), options)


# ------------------------------------------------------------------------------------------------ run's ladder


@dataclass(frozen=True)
class Pending:
    """A run's prompts before its backend is made: a dataset read already, and chosen already where no token count
    is needed (``source`` is then its PromptSet)."""

    source: Source
    rows: Rows | None = None  # a dataset's entries, to choose from once the tokenizer is loaded

    @property
    def known(self) -> PromptSet | None:
        """The prompts, where they are known before the backend loads (a resume's setup is checked with them)."""
        return self.source if isinstance(self.source, PromptSet) else None

    @property
    def most(self) -> int:
        """The most prompts the run can send a round, known before anything loads (a dataset's rows, cut to
        ``--num-prompts``; what ``--synthetic``, ``--prefix-groups`` or a trace will make)."""
        src = self.source
        if isinstance(src, PromptSet):
            return len(src.prompts)
        if isinstance(src, DatasetSpec):
            rows = len(self.rows.prompts) if self.rows is not None else src.num_prompts or 0
            return min(rows, src.num_prompts) if src.num_prompts is not None else rows
        if isinstance(src, Trace):
            return len(src.rows)
        return src.count  # SyntheticSpec, PrefixSpec

    def check_plan(self, options: RunOptions) -> int:
        """The requests the run plans (prompts x ``--repeats`` x ``--turns``, warm-ups apart), before anything
        loads; UserError in one line past :data:`~llmbench.workloads.limits.MAX_PLANNED`."""
        from llmbench.workloads.limits import check_planned

        return check_planned(("prompts", self.most), ("--repeats", options.repeats), ("--turns", options.turns))

    @property
    def counted_here(self) -> bool:
        """Whether the prompts are made or chosen by the run's tokenizer in this process (an engine then runs in
        this process too)."""
        return isinstance(self.source, (SyntheticSpec, DatasetSpec, PrefixSpec))

    def check_target(self, target: object) -> None:
        """UserError where ``target`` can't send these prompts: a trace's rows are replayed by the open loop whose
        schedule they are (``--endpoint URL --trace FILE``)."""
        from llmbench.options import EndpointOptions

        if isinstance(self.source, Trace) and not (isinstance(target, EndpointOptions) and target.open_loop is not None
                                                   and target.open_loop.replay is self.source):  # fmt: skip
            raise UserError("a trace is replayed against a server: run --endpoint URL --trace FILE")

    def fixed(self) -> PromptSet:
        """The prompts of a run whose requests are sent by other processes (``--workers``, ``--ray``): known now,
        else UserError."""
        if isinstance(self.source, PromptSet):
            return self.source
        what = "--synthetic" if isinstance(self.source, SyntheticSpec) else "a dataset chosen by the tokenizer"
        raise UserError(f"{what} is not available with --workers or --ray: write the prompts to a file")


def begin(src: Source, options: RunOptions) -> Pending:
    """What is known of the prompts before anything loads: a dataset is read now (a bad file fails before anything
    loads), and chosen now where no token count is needed (its output lengths change ``options``, as
    :func:`llmbench.workloads.dataset.apply_lengths` says); the plan's size is checked now too."""
    pending = _pending(src, options)
    pending.check_plan(options)
    return pending


def _pending(src: Source, options: RunOptions) -> Pending:
    if not isinstance(src, DatasetSpec):
        return Pending(src)
    from llmbench.workloads import dataset

    rows = dataset.read(src)
    if not dataset.counts(src, rows):
        return Pending(dataset.apply_lengths(dataset.select(src, rows), options))
    return Pending(src, rows)


@dataclass(frozen=True)
class Prepared:
    """What the run loop sends: the prompts (each turn of a conversation a prompt of its own), and what the run's
    record says of how they were made."""

    prompts: PromptSet
    synthetic: SyntheticSpec | None = None  # config.synthetic: the spec they were made from
    turns: int = 1
    think_time_s: float = 0.0
    followups: bool = False  # the data's own later turns were used (config.sessions says so)

    def annotate(self, config: RunConfig) -> None:
        """``config.synthetic`` and ``config.sessions``, where they apply."""
        if self.synthetic is not None:
            config.synthetic = synthetic_record(self.synthetic)
        if self.turns > 1:
            config.sessions = sessions.record(self.prompts, self.turns, self.think_time_s, self.followups)
        elif self.prompts.turns is not None:  # agent tasks: their steps are the turns
            config.sessions = sessions.task_record(self.prompts)
        if self.prompts.asks is not None:
            from llmbench.workloads.tools import record

            config.tools = record(self.prompts)


async def prepare(pending: Pending, backend: Any, options: RunOptions) -> Prepared:
    """The prompts ``pending`` stands for, made or chosen as ``backend`` counts a prompt's tokens (its
    ``counting``: it loads the model, or ``--tokenizer``, first), then expanded into ``options.turns`` turns.
    ``options``: a dataset's or a trace's output lengths change it (see
    :func:`llmbench.workloads.dataset.apply_lengths`)."""
    from llmbench.workloads import dataset, prefixes, synthetic, trace

    src, made = pending.source, None
    if isinstance(src, SyntheticSpec):
        count, tokenizer = await _counting(backend, "--synthetic", "--synthetic needs a model in this process or "
                                           "--endpoint with --tokenizer")  # fmt: skip
        prompts = synthetic.make(src, tokenizer, count)
        made = src
    elif isinstance(src, DatasetSpec):
        assert pending.rows is not None
        prompts = dataset.apply_lengths(await _choose(backend, src, pending.rows), options)
    elif isinstance(src, PrefixSpec):
        count, tokenizer = await _counting(backend, "--prefix-groups", "--prefix-groups needs a model in this "
                                           "process or --endpoint with --tokenizer")  # fmt: skip
        prompts = prefixes.make(src, tokenizer, count, text_counter(tokenizer))
    elif isinstance(src, Trace):
        count, tokenizer = await _counting(backend, "--trace", "a trace is replayed against a server: run "
                                           "--endpoint URL --trace FILE")  # fmt: skip
        prompts = dataset.apply_lengths(trace.synthesize(src, tokenizer, count, text_counter(tokenizer)), options)
    else:
        prompts = src
    followups = prompts.followups is not None
    if prompts.asks is not None and not getattr(backend, "speaks_tools", False):
        raise UserError("a workload with tools or response_format is sent to a server: run --endpoint URL (llmbench "
                        "serve, vLLM, llama.cpp's server), in one client process (no --workers)")  # fmt: skip
    expanded = sessions.expand(sessions.expand_tasks(prompts, options.turns), options.turns)
    return Prepared(expanded, made, options.turns, options.think_time_s, followups)


def text_counter(tokenizer: Any) -> Callable[[str], int]:
    """A text's tokens alone (no template, no special tokens): a block's, a reply's."""
    return lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])


async def _counting(backend: Any, what: str, refusal: str) -> Counting:
    """How ``backend`` counts a prompt's tokens, and its tokenizer; UserError ``refusal`` where it can't."""
    counting = getattr(backend, "counting", None)
    if counting is None:
        raise UserError(refusal)
    return await counting(what)


async def _choose(backend: Any, spec: DatasetSpec, rows: Rows) -> PromptSet:
    """The dataset's entries the filters allow, counted by ``backend`` as its requests will be."""
    counting = getattr(backend, "counting", None)
    refusal = ("--min-prompt-tokens/--max-prompt-tokens need the run's tokenizer: a model in this process or "
               "--endpoint with --tokenizer")  # fmt: skip
    if counting is None:
        return _select(spec, rows, None, refusal)
    endpoint = getattr(backend, "endpoint", None)
    if spec.needs_tokenizer or endpoint is None or endpoint.tokenizer:
        return _select(spec, rows, await counting("--min-prompt-tokens/--max-prompt-tokens"), refusal)
    return _select(spec, rows, None, refusal)  # a server without --tokenizer: ShareGPT replies give no lengths


def _select(spec: DatasetSpec, rows: Rows, counting: Counting | None, refusal: str) -> PromptSet:
    """The entries the filters allow, counted by ``counting`` (None: no count; UserError ``refusal`` where the
    filters need one)."""
    from llmbench.workloads import dataset

    if counting is None:
        if spec.needs_tokenizer:
            raise UserError(refusal)
        return dataset.select(spec, rows)
    count, tokenizer = counting
    return dataset.select(spec, rows, count, text_counter(tokenizer))


# ------------------------------------------------------------------------------------------------ the record


# the spec's settings that say where the prompts come from (PromptsSection's), replaced by what was measured
_SOURCE_KEYS = ("prompts", "synthetic", *DATASET, "prefix_groups", "prefix_tokens", "suffix_tokens", "trace",
                "trace_format", "time_scale", "start", "end")  # fmt: skip


def recorded(spec: dict[str, Any] | None, src: Source) -> dict[str, Any] | None:
    """The spec a run records (``config.spec``), its ``[prompts]`` naming the prompts measured: a prompt file or
    dataset given on the command line or to ``measure()`` over a config file's, as an absolute path (a shipped set
    by its name), so that ``--config-from`` finds it from any folder. Prompts passed in memory leave no file to
    name: the table then names none (``config.prompt_file`` is ``<list>``, which ``--config-from`` refuses)."""
    from llmbench.workloads.prompts import IN_MEMORY

    if spec is None or not isinstance(src, (PromptSet, DatasetSpec, SyntheticSpec)):
        return spec  # prefix groups, a trace: made from the spec's own settings
    table = {k: v for k, v in spec.get("prompts", {}).items() if k not in _SOURCE_KEYS}
    if isinstance(src, SyntheticSpec):
        table["synthetic"] = f"{src.tokens}x{src.count}"
    elif isinstance(src, DatasetSpec):
        table["prompts"] = _absolute(src.path)
        given = {"prompt_format": src.format, **{k: getattr(src, k) for k in DATASET if hasattr(src, k)}}
        table |= {k: v for k, v in given.items() if v is not None}
    elif src.path.startswith(promptsets.LABEL_PREFIX):
        table["prompts"] = src.path.removeprefix(promptsets.LABEL_PREFIX)
    elif src.path != IN_MEMORY and Path(src.path).is_file():
        table["prompts"] = _absolute(src.path)
    return {**spec, "prompts": table}


def _absolute(path: str) -> str:
    return str(Path(path).expanduser().resolve())


@dataclass(frozen=True)
class Replay:
    """``run --config-from RUN.json``: what the run recorded of its prompts, to measure the same ones again."""

    run_file: str
    prompt_file: str
    prompt_sha256: str
    file_sha256: str | None = None  # a dataset's file (config.prompt_source.file_sha256)
    turns: int = 1  # --turns: prompt_sha256 is of the conversations (workloads.sessions.digest)

    @classmethod
    def of(cls, run_file: str | Path, config: Any) -> Replay:
        """From a run's config (:class:`~llmbench.results.schema.RunConfig`)."""
        source = config.prompt_source if isinstance(config.prompt_source, dict) else {}
        file_sha = source.get("file_sha256")
        turns = (config.sessions or {}).get("turns", 1) if isinstance(config.sessions, dict) else 1
        return cls(str(run_file), config.prompt_file, config.prompt_sha256,
                   file_sha if isinstance(file_sha, str) else None, turns if isinstance(turns, int) else 1)  # fmt: skip

    def check_given(self, w: Workload) -> None:
        """UserError when the run's prompts were passed in memory and the replay names none."""
        from llmbench.workloads.prompts import IN_MEMORY

        if self.prompt_file == IN_MEMORY and w.prompts is None and w.synthetic is None and w.prefix_groups is None \
                and w.trace is None:  # fmt: skip
            raise UserError(f"--config-from {self.run_file}: the run measured prompts passed in memory (llmbench."
                            "measure([...])), which no file holds: give PROMPTS")  # fmt: skip

    def check_same(self, src: Source) -> None:
        """UserError when the prompt file (or dataset) the run recorded, read again for its replay, has changed
        since: its sha256 differs (a file given on the command line instead is measured as asked: not checked)."""
        if isinstance(src, PromptSet):
            now, then = sessions.digest(src, self.turns) if self.turns > 1 else src.sha256, self.prompt_sha256
        elif isinstance(src, DatasetSpec) and self.file_sha256 is not None:
            from llmbench.workloads import dataset

            now, then = dataset.read(src).sha256, self.file_sha256
        else:
            return
        if now == then:
            return
        raise UserError(f"--config-from {self.run_file}: {src.path} has changed since the run measured it (sha256 "
                        f"{now[:12]}..., the run's {then[:12]}...): these are not the prompts it measured; give "
                        "PROMPTS to measure this file anyway")  # fmt: skip
