"""What a history record holds, built from a result on disk: the measured code, the machine, the setup, and each
metric's statistics with 95% intervals (per-request data stays in the JSON the record names).

- **Machine fingerprint**: a hash of stable fields only (CPU model and instruction-set flags, cores, RAM in GiB,
  GPU names and driver, the OS and its C library, Python, torch), never a measured speed: a reading in the hash
  would split one machine's history (folo-rs/folo#429).
- **Setup**: the config fields compare treats as "the setup" (``schema.must_match(COMPARE)``), hashed; the prompt
  set's hash beside it.
- **Code**: the run's ``environment.git`` (commit, branch, dirty, recorded when it ran); ``ab``: the base's and
  head's refs resolved to commits.
- **Metrics**: per metric the mean, p50, p90 and p99 with 95% intervals (where one holds at n) and n; for ``ab``
  each paired change with its interval and the minimum detectable change.
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
from pathlib import Path
from typing import Any

from llmbench.analysis.variance import RUN_STATS, stats_with_intervals
from llmbench.history.db import Result
from llmbench.machine.envinfo import isa_flags

RUN_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s", "prefill_tokens_per_s", "tool_name_ms",
               "tool_args_ms", "task_e2e_ms")  # fmt: skip
STATS = RUN_STATS


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def short_hash(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


# -------------------------------------------------------------------------------------------------- the code


def resolve_ref(ref: str, cwd: str | Path | None = None) -> str:
    """A git ref (tag, branch, commit) -> its commit; the ref itself when git can't resolve it (a name only)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=cwd, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return ref
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else ref


# -------------------------------------------------------------------------------------------------- the machine


def machine_of(env: dict[str, Any]) -> dict[str, Any]:
    """The stable facts of a run's ``environment`` (the fingerprint's input)."""
    plat = str(env.get("platform") or "")
    os_name = plat.split("-")[0] if plat else platform.system()
    libc = next((part for part in plat.split("-") if part.startswith(("glibc", "libc", "musl"))), None)
    gpu = env.get("gpu") or None
    ram = env.get("ram_total_bytes")
    return {
        "cpu_model": env.get("cpu_model"),
        "cpu_flags": isa_flags(env.get("cpu_flags") or []),
        "cpu_count": env.get("cpu_count"),
        "ram_gib": round(ram / 2**30) if ram else None,
        "gpu": {"name": gpu.get("name"), "driver": gpu.get("driver")} if isinstance(gpu, dict) else None,
        "os": f"{os_name} {libc}" if libc else os_name,
        "python": ".".join(str(env.get("python") or "").split(".")[:2]),
        "torch": env.get("torch"),
    }


def machine_id(machine: dict[str, Any]) -> str:
    return short_hash(machine)


# -------------------------------------------------------------------------------------------------- statistics


def run_metrics(run: Any) -> list[dict[str, Any]]:
    """Every recorded metric of a run, per request, with intervals."""
    from llmbench.results.agents import task_times, tasks_of
    from llmbench.results.metrics import decode_tokens_per_s, prefill_tokens_per_s

    per_request = {
        "ttft_ms": [r.ttft_ms for r in run.requests],
        "tpot_ms": [r.tpot_ms for r in run.requests],
        "e2e_ms": [r.e2e_ms for r in run.requests],
        "decode_tokens_per_s": [decode_tokens_per_s(r) for r in run.requests],
        "prefill_tokens_per_s": [prefill_tokens_per_s(r) for r in run.requests],
        "tool_name_ms": [getattr(r, "tool_name_ms", None) for r in run.requests],
        "tool_args_ms": [getattr(r, "tool_args_ms", None) for r in run.requests],
        "task_e2e_ms": [task_times(t)[0] for t in tasks_of(run.requests)[0]],  # one a whole agent task
    }
    rows: list[dict[str, Any]] = []
    for metric in RUN_METRICS:
        rows += stats_with_intervals(per_request[metric], metric)
    return rows


# -------------------------------------------------------------------------------------------------- records


def setup_of(config: dict[str, Any]) -> dict[str, Any]:
    """The config fields that make "the same setup" (compare's list), as a dict."""
    from llmbench.results.schema import COMPARE, field_value, must_match

    return {k: field_value(config, k) for k in must_match(COMPARE)}


def _base(run: Any, path: Path | None, sha: str, kind: str) -> dict[str, Any]:
    config = run.config.model_dump()
    env = run.environment.model_dump()
    machine = machine_of(env)
    setup = setup_of(config)
    git = env.get("git") or {}
    return dict(
        sha256=sha,
        kind=kind,
        created_at=run.created_at,
        llmbench_version=run.llmbench_version,
        machine_id=machine_id(machine),
        machine=machine,
        config_hash=short_hash(setup),
        config=setup,
        prompt_sha256=config.get("prompt_sha256"),
        model=config.get("model"),
        engine=config.get("engine"),
        path=str(path.resolve()) if path else None,
        commit=git.get("commit"),
        branch=git.get("branch"),
        dirty=git.get("dirty"),
    )


def run_result(run: Any, path: Path | None, *, kind: str = "run", label: str | None = None) -> Result:
    """A run (or a sweep's setup, a scan's point, a load test's rate) as a history record."""
    sha = file_sha256(path) if path is not None and path.exists() else short_hash(run.model_dump(mode="json"))
    fields = _base(run, path, sha, kind)
    summary = run.summary
    extra = {
        "requests": len(run.requests),
        "complete": run.complete,
        "tpot_efficiency": summary.tpot_efficiency if summary else None,
    }
    return Result(**fields, label=label, metrics=run_metrics(run), run_id=run.run_id, extra=extra)


def ab_result(
    base: Any,
    head: Any,
    folder: Path,
    *,
    anchor: str | None = None,
    head_ref: str | None = None,
    base_ref: str | None = None,
    moves_anchor: bool = False,
) -> Result:
    """An ab pair as one record: the head's setup and machine, both commits, and per (metric, stat) the paired
    change of head over base with its interval and the minimum detectable change."""
    from llmbench.analysis.compare import compare_runs

    head_path, base_path = folder / "head.json", folder / "base.json"
    sha = hashlib.sha256((file_sha256(base_path) + file_sha256(head_path)).encode()).hexdigest()
    fields = _base(head, head_path, sha, "ab")
    git = head.environment.model_dump().get("git") or {}
    head_commit = resolve_ref(head_ref) if head_ref else git.get("commit")
    base_name = anchor or base_ref
    base_commit = resolve_ref(base_name) if base_name else None
    comp = compare_runs(base, head, base_name=str(base_path), new_name=str(head_path))
    rows = []
    for row in comp.rows:
        rows.append(
            {
                "metric": row.metric,
                "stat": row.stat,
                "value": row.new,
                "ci_low": None,
                "ci_high": None,
                "n": row.n_new,  # the requests (pairs, when paired) this row was computed on
                "change_pct": _finite(row.change_pct),
                "change_ci_low": _finite(row.ci_low_pct),
                "change_ci_high": _finite(row.ci_high_pct),
                "mdc_pct": comp.detectable_pct(row.metric, row.stat),
            }
        )
    fields.update(commit=head_commit, path=str(folder.resolve()))
    extra = {
        "pairs": comp.n_pairs,
        "base_value": {f"{r.metric}:{r.stat}": r.base for r in comp.rows},
        "moves_anchor": moves_anchor,
        "base_ref": base_ref,
        "complete": bool(base.complete and head.complete),  # an interrupted ab's change is of part of its pairs
        "requests": len(base.requests) + len(head.requests),
    }
    return Result(
        **fields,
        metrics=rows,
        run_id=f"ab:{base.run_id}+{head.run_id}",  # the pair: a re-saved head.json is not a second ab
        base_commit=base_commit,
        head_commit=head_commit,
        anchor_ref=anchor,
        head_ref=head_ref or (head_commit[:12] if head_commit else None),
        extra=extra,
    )


def _finite(v: float | None) -> float | None:
    return v if v is not None and v == v and abs(v) != float("inf") else None


def value_result(
    record: dict[str, Any],
    path: Path,
    kind: str,
    metrics: dict[str, float | None],
    env_run: Any | None,
    label: str | None = None,
) -> Result:
    """A driver's summary file (load.json, quality.json) as a record of single values (stat "value")."""
    sha = file_sha256(path)
    rows = [
        {"metric": k, "stat": "value", "value": v, "ci_low": None, "ci_high": None, "n": None}
        for k, v in metrics.items()
        if v is not None
    ]
    if env_run is not None:
        fields = _base(env_run, path, sha, kind)
    else:
        from llmbench.machine import envinfo

        env = envinfo.collect("cpu").model_dump()
        machine = machine_of(env)
        setup = {k: record.get(k) for k in ("candidate", "reference", "model", "device") if k in record}
        git = env.get("git") or {}
        fields = dict(
            sha256=sha,
            kind=kind,
            created_at=record.get("created_at"),
            llmbench_version=None,
            machine_id=machine_id(machine),
            machine=machine,
            config_hash=short_hash(setup),
            config=setup,
            prompt_sha256=None,
            model=str(record.get("model") or (record.get("candidate") or {}).get("model")),
            engine=(record.get("candidate") or {}).get("engine"),
            path=str(path.resolve()),
            commit=git.get("commit"),
            branch=git.get("branch"),
            dirty=git.get("dirty"),
        )
    return Result(**fields, label=label, metrics=rows)


def results_of_file(path: Path) -> list[Result]:
    """The records a file on disk gives: a run JSON (one), a sweep/scan/load folder's summary (one per run file
    it names, plus the summary's own values), a quality.json, or an ab folder (base.json + head.json). A summary
    that is not shaped as llmbench writes it (a hand-edited or cut file) is one UserError naming it and the
    field, before anything is recorded."""
    from llmbench.results.kinds import kind_of
    from llmbench.results.storage import load_run

    found = kind_of(path)
    path, record = found.path, found.record or {}
    if found.kind == "ab":
        base, head = load_run(path / "base.json"), load_run(path / "head.json")
        ab = head.config.ab
        return [ab_result(base, head, path, base_ref=None, head_ref=None)] if ab else []
    if found.kind in ("sweep", "scan"):
        out = []
        for where, row in _rows(path, record, "results" if found.kind == "sweep" else "points"):
            label = _text(path, f"{where}.label", row.get("label"))
            run_file = _run_file(path, where, row)
            # a scan before run_file was recorded: its points' files were named by kind and value
            name = run_file or f"{label or row.get('kind')}-{row.get('value')}.json"
            run_path = _named(path, path.parent / name) if run_file else path.parent / name
            if run_path.is_file():
                run = load_run(run_path, scalars_only=True)
                out.append(run_result(run, run_path, kind=found.kind, label=label or run_path.stem))
        return out
    if found.kind == "load":
        return _load_results(record, path)
    if found.kind == "quality":
        greedy = record.get("greedy")
        if greedy is not None and not isinstance(greedy, dict):
            raise _malformed(path, f"'greedy' is {type(greedy).__name__}, not an object")
        keys = ("kld_mean", "kld_p99", "top1_agreement", "perplexity_candidate")
        values = {k: _number(path, k, record.get(k)) for k in keys}
        share = (greedy or {}).get("identical_share")
        values["greedy_identical_share"] = _number(path, "greedy.identical_share", share)
        return [value_result(record, path, "quality", values, None, label="quality")]
    return [run_result(load_run(path, scalars_only=True), path)]  # every recorded figure is a per-request scalar


def _load_results(load: dict, path: Path) -> list[Result]:
    """A load.json's records: one per rate's run file, and the load test's own values (saturation, goodput)."""
    from llmbench.results.storage import load_run

    out = []
    first = None  # the first rate's run (a rate may have none): the load test's machine and setup
    values: dict[str, float | None] = {}
    for where, rate in _rows(path, load, "rates"):
        offered = _number(path, f"{where}.offered_rate_rps", rate.get("offered_rate_rps"), required=True)
        values[f"goodput_rps@{offered:g}"] = _number(path, f"{where}.goodput_rps", rate.get("goodput_rps"))
        # a load.json from before the fluid capacity has no fluidity figures: None, not recorded
        fluid = _number(path, f"{where}.fluidity_attainment", rate.get("fluidity_attainment"))
        values[f"fluidity_attainment@{offered:g}"] = fluid
        run_file = _run_file(path, where, rate)
        if run_file is None:  # a rate without a run file: nothing measured to record
            continue
        run = load_run(_named(path, path.parent / run_file))
        first = first or run
        out.append(run_result(run, path.parent / run_file, kind="load", label=f"rate-{offered:g}"))
    saturation = load.get("saturation")
    if saturation is not None and not isinstance(saturation, dict):
        raise _malformed(path, f"'saturation' is {type(saturation).__name__}, not an object")
    # a load.json from before the verdicts and the probes has neither: None, not recorded
    values = {"saturation_rps": _number(path, "saturation.rate_rps", (saturation or {}).get("rate_rps")),
              "proven_rate_rps": _number(path, "saturation.proven_rate_rps",
                                         (saturation or {}).get("proven_rate_rps")),
              "fluid_capacity_rps": _number(path, "fluid_capacity_rps", load.get("fluid_capacity_rps")),
              "newcomer_capacity_rps": _number(path, "newcomer_capacity_rps", load.get("newcomer_capacity_rps")),
              **values}  # fmt: skip
    out.append(value_result(load, path, "load", values, first, label="load.json"))
    return out


def _malformed(record: Path, what: str) -> Exception:
    """A driver's record not shaped as llmbench writes it: one line naming the file and the field."""
    from llmbench.core.errors import UserError

    return UserError(f"{record}: {what}: not a record as llmbench writes it; nothing recorded")


def _rows(record: Path, data: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    """(``key[i]``, row) for each row of ``data[key]`` (absent: none); UserError for a non-list or a non-object."""
    rows = data.get(key)
    if rows is None:
        return []
    if not isinstance(rows, list):
        raise _malformed(record, f"'{key}' is {type(rows).__name__}, not a list")
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise _malformed(record, f"{key}[{i}] is {type(row).__name__}, not an object")
    return [(f"{key}[{i}]", row) for i, row in enumerate(rows)]


def _run_file(record: Path, where: str, row: dict[str, Any]) -> str | None:
    """A row's ``run_file``: a file name in the record's folder (None: the row names none)."""
    name = row.get("run_file")
    if name is None or name == "":
        return None
    if not isinstance(name, str) or Path(name).name != name or name in (".", ".."):
        raise _malformed(record, f"{where}.run_file is {name!r}, not a file name in its folder")
    return name


def _text(record: Path, where: str, v: Any) -> str | None:
    """A text field of a driver's record (a label), or None."""
    if v is not None and not isinstance(v, str):
        raise _malformed(record, f"{where} is {v!r}, not text")
    return v


def _number(record: Path, where: str, v: Any, required: bool = False) -> float | None:
    """A figure of a driver's record: a number (a bool is none), or None where it may be missing."""
    if (v is None and not required) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        return v
    raise _malformed(record, f"{where} is {v!r}, not a number")


def _named(record: Path, run_path: Path) -> Path:
    """A run file a driver's record names: UserError when it is not there (recording the rest would leave the
    history with part of the sweep, scan or load test and say nothing)."""
    from llmbench.core.errors import UserError

    if not run_path.is_file():
        raise UserError(f"{record}: names {run_path.name}, which is not in {run_path.parent}: nothing recorded")
    return run_path
