"""compare: is NEW really slower than BASE, how sure is it, and is it the code, the setup or the machine?

A row per metric and statistic (mean, p50, p90; TPOT's gaps): NEW's change over BASE, a 95% interval, a verdict.
Requests pair by (prompt_index, repeat) when both runs used the same prompt file (sha256). TTFT's rows pool
``requests`` with ``ttft_requests`` (ab's one-token requests, keyed apart); the others read ``requests`` alone.
With b_i, n_i pair i's figures and N processes (``ab --processes``; else the bootstrap):

    p90, unpaired p50:  change = stat(n) / stat(b) - 1;  percentile bootstrap (scipy.stats.bootstrap's
        resamples, in numpy), paired: one index set for both runs; from 20,000 pairs (requests a side) on,
        sectioning instead: 16 random sections' ln ratios, t around the whole sample's
        (:func:`variance.sectioned_change`: the bootstrap's n x B resamples would set the time and the memory)
    mean:  change = mean(n) / mean(b) - 1;  Student t, the jackknife's (unpaired: Welch's) standard error
        (:func:`variance.mean_ratio_interval`)
    processes (any statistic but the paired median): each one's change c_p, Student t over them:
        change +- t_{0.975,N-1} sd(c_p) / sqrt(N)
    paired p50:  d_i = ln(n_i / b_i),  change = expm1(median_i d_i);  the exact order-statistic interval of the
        pairs' median (from 6 pairs); processes: each one's median m_p, t in logs: expm1(mean m_p +- t_{0.975,N-1}
        sd(m_p) / sqrt(N)), and the change expm1(mean m_p). base, new: medians
    TPOT gaps (stamps):  the same, d_i of the pair's mean gaps over the positions both reached (:func:`_gaps_row`);
    a duet's paired medians (p50 and gaps; ``pinned_cpu`` recorded in both runs): d_i clipped to median +- 3
        robust sd, then m_p = the mean over base's two CPUs of the median of the process's pairs on each
        (:func:`variance.balanced_median`)

Below the smallest n at which its kind of interval covers 93% (:data:`variance.MIN_N`, found by simulation:
:mod:`.coverage`), a row has no interval and no verdict ("too few pairs: n = 3; at least 6 needed") and never
fails a gate (the gate calls it BLIND).

``significant``: the row's 95% interval excludes 0 (every row; a study counts how often on A/A runs). Only rows
that *speak* say a verdict word: the p50 rows of TTFT, TPOT, E2E and decode tok/s, TPOT's gaps, and any row a
gate decides on (``--gate-stat mean``: the gated means); the others read "(information)" and never make compare
or the gate say anything changed. Why: a mean or p90 of per-request times is set by the few requests a stall
hit, and a t interval over a handful of processes is not honest under such tails (an A/A run: TTFT p90 -79%
[-155, -2.7], "faster"), while a paired median of log ratios cancels the prompts' spread and each pair's shared
drift, ignores the stalled pairs and swaps exactly ((1 + c(b, n)) (1 + c(n, b)) = 1). Unpaired p50 rows speak
too (robust; no pairs to exploit). And the words must hold together: TTFT, TPOT and E2E are three tests (TPOT's
p50, gaps and decode tok/s are one), and three at 95% speak by chance in ~10% of A/A runs. So a word needs the
interval at 1 - 0.05/3 (Bonferroni, :func:`variance.widen`) to exclude 0: A/A runs then speak in <= 5%. What
says "what changed" (:meth:`Comparison.changed`, the machine notes) reads the words. A *regression*: a gated
row significant (95%) in the bad direction by more than its threshold. Where the noise is: :mod:`.variance`.

Why one module of 900-odd lines (over 600): the rows, their pairing, the gaps statistic, the gate's verdict and
the checks that refuse impossible figures all read the same paired populations; the file is the comparison. No
torch here: compare starts fast.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from llmbench.analysis import shape, variance
from llmbench.analysis.startup import PROCESS_METRICS, process_change
from llmbench.core.errors import UserError
from llmbench.results.client import behind_reasons
from llmbench.results.metrics import cold_start, lever_summary
from llmbench.results.schema import COMPARE, ENV, Environment, Run, RunScalars, differences, must_match

# metric -> (label, direction): +1 when higher is better, -1 when lower is better, 0 when neither
METRICS: dict[str, tuple[str, int]] = {
    "ttft_ms": ("TTFT ms", -1),
    "tpot_ms": ("TPOT ms", -1),
    "e2e_ms": ("E2E ms", -1),
    "output_tokens": ("out tokens", 0),
    "decode_tokens_per_s": ("decode tok/s", +1),
    "decode_chars_per_s": ("decode chars/s", +1),  # the same speed in visible characters: across tokenizers
    # what a program waits for (an answer of tool calls has no TTFT): the first call's name, its arguments whole
    "tool_name_ms": ("tool name ms", -1),
    "tool_args_ms": ("tool args ms", -1),
    # the cold start, a sample a worker process (ab --processes): :mod:`.startup`
    "load_s": ("load s", -1),
    "ready_s": ("ready s", -1),
}
GATED_BY_DEFAULT = ("ttft_ms", "tpot_ms", "e2e_ms")
STATS = ("mean", "p50", "p90")
# TPOT from per-token gaps paired by position (:func:`_gaps_row`): bundled tokens leave a mean gap unchanged, a
# burst that hits a few pairs moves the median over pairs little. Paired runs with stamps; as a gate statistic it
# applies to TPOT, and TTFT and E2E are then gated on their median.
GAPS = "gaps"
GATE_STATS = (*STATS, GAPS)
GAPS_MIN_TOKENS = 3  # a request's TPOT over 2+ gaps
GAPS_MIN_PAIRS = 2  # a gaps row needs 2 usable pairs (its interval, 6: variance.MIN_N)
# which probe bounds which metric: decoding reads every weight per token, prefill is matmul-bound
PROBE_FOR = {
    "ttft_ms": "matmul_gflops",
    "tpot_ms": "mem_read_gbps",
    "e2e_ms": "mem_read_gbps",
    "decode_tokens_per_s": "mem_read_gbps",
}
CONFIDENCE = variance.CONFIDENCE
# the rows that speak (a verdict word) whatever is gated: robust statistics of the speed metrics
SPEAKING_STATS = ("p50", GAPS)
SPEAKING_METRICS = ("ttft_ms", "tpot_ms", "e2e_ms", "decode_tokens_per_s")
INFORMATION = variance.INFORMATION  # the verdict of a row that does not speak
NO_CHANGE = variance.NO_CHANGE


@dataclass
class Row:
    metric: str
    stat: str
    base: float
    new: float
    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    significant: bool  # the interval excludes 0, whether the row speaks or not
    # "faster" | "slower" | "more" | "fewer" | "no significant change" when the row speaks, else "(information)"
    verdict: str
    # the requests the row was computed on: the pairs (both the same) when paired, else each run's own
    n_base: int
    n_new: int
    speaks: bool = False  # a robust row (see the module's docstring) or a gated one: its verdict is a finding
    processes: int = 0  # the processes its interval is over (Student t, N - 1 df); 0: over pairs
    # "too few pairs: n = 3; at least 6 needed": below its interval's smallest honest n, no interval, no verdict;
    # or why else it has none ("no relative change: a base value is 0")
    too_few: str | None = None


@dataclass
class GateCheck:
    """One gated (metric, stat): its change, interval and threshold; ``regression`` when it fails the gate."""

    metric: str
    stat: str
    change_pct: float
    ci_low_pct: float
    ci_high_pct: float
    threshold_pct: float
    significant: bool
    regression: bool  # significantly worse, by more than the threshold
    # a shape metric's gate (llmbench.analysis.shape): its *_pct fields are NaN (no ratio to a base of 0) and
    # these say the difference NEW - BASE, its interval and the threshold, in ``unit``
    unit: str = "%"
    difference: float | None = None
    difference_ci: tuple[float, float] | None = None
    threshold: float | None = None


@dataclass
class MachineNote:
    metric: str
    metric_change_pct: float
    probe: str
    probe_slowdown_pct: float | None
    other_cpu_base: float | None
    other_cpu_new: float | None
    steal_base: float | None
    steal_new: float | None
    explanation: str
    stat: str = "p50"  # the row whose change it explains


# what a forked run's interval does not hold (benchmarks/README.md, "--spawn fork on a fresh runner")
FORK_CAVEAT = (
    "caution: the worker processes were forked from each side's process 0 (ab --spawn fork), so the interval "
    "leaves out what differs between base's and head's process 0 (where its weights lie, its hash seed): in the "
    "Xeon's A/A study 2 of 5 TPOT intervals excluded 0, the changes spreading 1.4x what the interval said"
)


@dataclass
class Comparison:
    base: str
    new: str
    paired: bool
    n_base: int
    n_new: int
    n_pairs: int
    config_diffs: list[tuple[str, Any, Any]]
    env_diffs: list[tuple[str, Any, Any]]
    rows: list[Row]
    outputs_compared: int
    outputs_changed: int
    outputs_note: str
    machine: list[MachineNote] = field(default_factory=list)
    probes: dict[str, dict[str, float | None]] = field(default_factory=dict)
    auto_diffs: list[str] = field(default_factory=list)  # config_diffs that automatic choices made, not the user
    # {name: [base, new]} of the quality figures, when both runs were measured against the same reference
    quality: dict[str, list[float | None]] = field(default_factory=dict)
    quality_note: str | None = None
    workload: list[str] = field(default_factory=list)  # what each run sent, for a dataset's runs
    n_ttft_pairs: int = 0  # the pairs of ttft_requests (ab's one-token requests) TTFT's rows pool in as well
    # {metric: where its speaking row's noise is} (``ab --processes``): see :func:`variance.noise`
    variance: dict[str, dict[str, Any]] = field(default_factory=dict)
    # {"base"|"new": what its lever did} (--speculative, --prefix-cache): results.metrics.lever_summary
    levers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # {"base"|"new": its cold start} (results.metrics.cold_start): one process each, information only
    cold: dict[str, dict[str, Any]] = field(default_factory=dict)
    # the shape of the wait: NEW - BASE in each metric's unit (llmbench.analysis.shape), information unless gated
    shape: list[shape.ShapeRow] = field(default_factory=list)
    # ab --spawn fork: the processes were forked from each side's process 0 (config.ab.setup.spawn), so the
    # interval over them leaves out what differs between base's and head's process 0 (FORK_CAVEAT)
    forked: bool = False
    # {"base"|"new": why its endpoint client fell behind the streams it measured} (client.fell_behind): its TTFT and
    # ITL hold the client's own delay, so a change between the runs may be the clients'
    client_behind: dict[str, str] = field(default_factory=dict)
    _notes: list[MachineNote] = field(default_factory=list, repr=False)  # every row's; ``machine``: the spoken

    def row(self, metric: str, stat: str) -> Row | None:
        """The row of ``metric``'s ``stat``; for ``gaps`` (a TPOT statistic) the median's row of other metrics; a
        cold-start metric's one row (over processes) whatever ``stat``."""
        if metric in PROCESS_METRICS:
            return next((r for r in self.rows if r.metric == metric), None)
        if stat == GAPS and metric != "tpot_ms":
            stat = "p50"
        return next((r for r in self.rows if r.metric == metric and r.stat == stat), None)

    def spoken_stat(self, metric: str) -> str:
        """The statistic of ``metric``'s robust speaking row: TPOT's gaps when there are stamps, else the p50."""
        return GAPS if metric == "tpot_ms" and self.row(metric, GAPS) is not None else "p50"

    def changed(self) -> list[Row]:
        """The rows that speak and found a change: what compare says changed (never a row of information)."""
        return [r for r in self.rows if r.speaks and r.too_few is None and r.verdict not in (INFORMATION, NO_CHANGE)]

    def speak(self, row: Row) -> None:
        """``row`` speaks from now on (the gate decides on it): its verdict is a finding, its machine note shown.
        A gated row's word is the gate's own test (its 95% interval), so the row and the gate never disagree; the
        other speaking rows keep the joint level (:func:`_spoken`)."""
        row.speaks = True
        row.verdict = row.too_few or _verdict(METRICS[row.metric][1], row.change_pct, row.significant)
        self.machine = _spoken_notes(self.rows, self._notes)

    def detectable_pct(self, metric: str, stat: str = "mean") -> float | None:
        """The minimum detectable change of ``metric``'s ``stat`` (the gate's default statistic unless told; compare
        shows its speaking rows') at this sample size: half the width of its 95% interval. A change larger than
        this would be called significant; one much smaller can't be told from noise. (About 1.4 times it is
        detected with 80% power.)"""
        row = self.row(metric, stat)
        if row is None or row.ci_low_pct != row.ci_low_pct:  # NaN: too few requests for an interval
            return None
        return (row.ci_high_pct - row.ci_low_pct) / 2

    def blind_spots(self, thresholds: dict[str, float], stat: str = "mean") -> list[tuple[str, float, float]]:
        """(metric, minimum detectable change, threshold) for each gated metric whose detectable change is above
        its threshold: this comparison could not have seen a regression of that size, so its "pass" says
        little. The CLI says so loudly; ``--require-mdc`` fails on it."""
        out = []
        for metric, pct in thresholds.items():
            mdc = self.detectable_pct(metric, stat)
            row = self.row(metric, stat)
            if row is not None and row.too_few is not None:
                mdc = math.inf  # no interval at this n: no change, however large, could have been seen
            if mdc is not None and mdc > pct:
                out.append((metric, mdc, pct))
        return out

    def checks(
        self, fail_on_regression: float | None = None, fail_on: dict[str, float] | None = None, stat: str = "mean"
    ) -> list[GateCheck]:
        """Every gated (metric, ``stat``) with its verdict: ``fail_on_regression`` PCT applies to TTFT, TPOT and
        E2E, ``fail_on`` sets {metric: PCT} one by one. A regression is significant (its 95% CI excludes 0)
        *and* worse than its threshold. The gated rows speak from then on (:meth:`speak`), a mean's too."""
        thresholds = thresholds_of(fail_on_regression, fail_on)
        if stat not in GATE_STATS:
            raise UserError(f"unknown gate statistic '{stat}'; expected mean, p50, p90 or gaps")
        if stat == GAPS and "tpot_ms" in thresholds and self.row("tpot_ms", GAPS) is None:
            raise UserError("--gate-stat gaps pairs TPOT's token gaps by position: it needs two runs of the same "
                            "prompts with their token stamps")  # fmt: skip
        for metric in PROCESS_METRICS.keys() & thresholds.keys():
            if self.row(metric, stat) is None:
                raise UserError(
                    f"--fail-on {metric}: each worker process is one sample of its cold start; these "
                    "runs lack 2 or more processes a side that recorded it (ab --processes)"
                )
        out = self._shape_checks(thresholds)
        for metric in METRICS:
            r = self.row(metric, stat) if metric in thresholds else None
            if r is not None:
                self.speak(r)
                worse = r.change_pct * -METRICS[r.metric][1]  # positive when worse
                regression = r.significant and worse > thresholds[r.metric]
                out.append(GateCheck(r.metric, r.stat, r.change_pct, r.ci_low_pct, r.ci_high_pct,
                                     thresholds[r.metric], r.significant, regression))  # fmt: skip
        return out

    def _shape_checks(self, thresholds: dict[str, float]) -> list[GateCheck]:
        """The gated shape metrics' checks: significantly worse (the interval excludes 0) by more than the
        threshold, in the metric's unit. A gated metric neither run has is refused: a gate that can't fail is off."""
        out = []
        for metric in shape.SHAPE_METRICS.keys() & thresholds.keys():
            row = next((r for r in self.shape if r.metric == metric), None)
            if row is None:
                raise UserError(f"--fail-on {metric}: these runs have no {metric} to compare (no tokens?)")
            shape.speak(row)
            nan = float("nan")
            out.append(GateCheck(metric, "mean", nan, nan, nan, nan, row.significant,
                                 row.significant and row.worse_by() > thresholds[metric], row.unit, row.difference,
                                 (row.ci_low, row.ci_high), thresholds[metric]))  # fmt: skip
        return out

    def gate(
        self, fail_on_regression: float | None = None, fail_on: dict[str, float] | None = None, stat: str = "mean"
    ) -> list[GateCheck]:
        """The regressions the gate finds (empty: it passes). The CLI exits 1 exactly when this is non-empty."""
        return [c for c in self.checks(fail_on_regression, fail_on, stat) if c.regression]

    def to_dict(self, checks: list[GateCheck] | None = None) -> dict[str, Any]:
        """A JSON-ready dict (``--format json``), with the gate's checks when given."""
        d = asdict(self)
        del d["_notes"]
        d["config_diffs"] = [{"key": k, "base": b, "new": n} for k, b, n in self.config_diffs]
        d["env_diffs"] = [{"key": k, "base": b, "new": n} for k, b, n in self.env_diffs]
        d["gate"] = [asdict(c) for c in checks or []]
        d["regression"] = any(c.regression for c in checks or [])
        d["verdict_confidence"] = variance.VERDICT_CONFIDENCE
        return _nulled(d)


def _nulled(x: Any) -> Any:
    """``x`` with every NaN or infinity as None: JSON has none (a row with too few pairs has no interval)."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _nulled(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_nulled(v) for v in x]
    return x


def _prompt_ids_differ(base: Any, new: Any) -> tuple[str, str] | None:
    """When both runs recorded their input ids and some paired prompt got other ids (another tokenizer, chat
    template or system prompt): (base, new) descriptions for compare's setup differences; else None."""
    b = {r.prompt_index: r.prompt_token_ids_sha256 for r in base.requests if r.prompt_token_ids_sha256}
    n = {r.prompt_index: r.prompt_token_ids_sha256 for r in new.requests if r.prompt_token_ids_sha256}
    both = b.keys() & n.keys()
    differ = sum(b[k] != n[k] for k in both)
    if not differ:
        return None
    return f"{len(both)} prompts' ids", f"{differ} of them differ"


def check_percent(option: str, value: float, *, zero: bool = True) -> float:
    """A percentage option's value (a gate's threshold, ``--require-mdc``); UserError unless it is a finite number,
    0 or more (above 0 when not ``zero``). The one check every gate option goes through: a NaN would switch its
    gate off (every comparison with NaN is false, so nothing could fail), and so would an infinite threshold."""
    v = float(value)
    if not (math.isfinite(v) and (v >= 0 if zero else v > 0)):
        need = "0 or more" if zero else "above 0"
        raise UserError(f"{option}: expected a percentage, a finite number {need}, not {value:g}")
    return v


def thresholds_of(fail_on_regression: float | None, fail_on: dict[str, float] | None) -> dict[str, float]:
    """{metric: PCT} from a threshold for TTFT, TPOT and E2E and per-metric ones; UserError for bad ones. A
    threshold of 0 is allowed: any significant slowdown fails."""
    gates: dict[str, float] = {}
    if fail_on_regression is not None:
        gates.update(dict.fromkeys(GATED_BY_DEFAULT, check_percent("--fail-on-regression", fail_on_regression)))
    allowed = ", ".join(k for k, v in METRICS.items() if v[1] != 0)
    for name, pct in (fail_on or {}).items():
        if name in shape.SHAPE_METRICS:  # a difference in the metric's unit: a base of 0 has no percentage
            gates[name] = shape.check_threshold(name, pct)
            continue
        if name not in METRICS or METRICS[name][1] == 0:
            raise UserError(f"--fail-on {name}: expected METRIC=PCT with METRIC one of {allowed}, or METRIC=AMOUNT "
                            f"(worse by, in its unit) with METRIC one of {', '.join(shape.SHAPE_METRICS)}")  # fmt: skip
        gates[name] = check_percent(f"--fail-on {name}", pct)
    return gates


def parse_fail_on(items: list[str] | None) -> dict[str, float]:
    """``--fail-on METRIC=PCT`` options -> {metric: pct}; UserError naming the bad item."""
    out: dict[str, float] = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep:
            raise UserError(f"--fail-on '{item}': expected METRIC=PCT, e.g. tpot_ms=5")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise UserError(f"--fail-on '{item}': '{value}' is not a number") from None
    return out


def gate_options(
    fail_on_regression: float | None, fail_on: list[str] | None, require_mdc: float | None
) -> dict[str, float]:
    """Every gate option of ``compare`` and ``ab`` checked at once, before anything is read or measured:
    {metric: PCT}. ``--require-mdc`` must be above 0: no measured interval has a width of 0."""
    gates = thresholds_of(fail_on_regression, parse_fail_on(fail_on))
    if require_mdc is not None:
        check_percent("--require-mdc", require_mdc, zero=False)
    return gates


def check_gate_inputs(
    stat: str, thresholds: dict[str, float], max_new_tokens: int, pairs: int, processes: int = 1, ttft_pairs: int = 0
) -> None:
    """UserError, before anything is measured, when the gate could not decide on what would be measured: ``--gate-stat
    gaps`` on requests of fewer than 3 tokens, or a gated row whose interval needs more pairs (or processes) than
    the design gives (:data:`variance.MIN_N`): it would print no interval and pass blind after minutes of measuring.
    ``pairs``: prompts x repeats a process; ``processes``: worker processes a side; ``ttft_pairs``: TTFT's one-token
    pairs, which its rows pool in."""
    if stat == GAPS and "tpot_ms" in thresholds and max_new_tokens < GAPS_MIN_TOKENS:
        raise UserError(f"gating TPOT on its gaps compares requests of {GAPS_MIN_TOKENS} or more tokens: "
                        f"--max-new-tokens {max_new_tokens} gives none")  # fmt: skip
    for metric in (m for m in thresholds if m not in PROCESS_METRICS):
        if metric in shape.SHAPE_METRICS:  # a mean difference over every pair, whichever process measured it
            n, kind, unit = pairs * max(processes, 1), "difference", "pairs (prompts x --repeats x --processes)"
        elif processes > 1:
            n, kind, unit = processes, "processes", "--processes"
        else:
            n = pairs + (ttft_pairs if metric == "ttft_ms" else 0)
            kind = interval_kind(stat if metric == "tpot_ms" or stat != GAPS else "p50", True, 0)
            unit = "pairs (prompts x --repeats)"
        if n < variance.MIN_N[kind]:
            raise UserError(f"gating {metric} on its {stat}: {n} {unit} give no 95% interval; at least "
                            f"{variance.MIN_N[kind]} are needed (benchmarks/README.md, Interval coverage)")  # fmt: skip


def _requests(run: Run | RunScalars, metric: str) -> list[Any]:
    """The requests ``metric``'s rows read: TTFT's pool ab's one-token ``ttft_requests`` in; output_tokens (the
    text's) leaves out the answers of tool calls alone (no text: 0, no ratio)."""
    if metric == "output_tokens" and any(r.ttft_ms is None for r in run.requests):
        return [r for r in run.requests if r.ttft_ms is not None]
    extra = (getattr(run, "ttft_requests", None) or []) if metric == "ttft_ms" else []
    return [*run.requests, *extra] if extra else run.requests  # the run's own list: its keys are computed once


def _series(run: Run | RunScalars, metric: str, keys: variance.KeyMemo) -> tuple[np.ndarray, np.ndarray]:
    """(keys, values) of ``metric``'s population in ``run`` (:func:`_requests`), arrays."""
    requests = _requests(run, metric)
    return variance.series(requests, metric, keys(requests))


def _stat(name: str):
    if name == "mean":
        return lambda x, axis=-1: np.mean(x, axis=axis)
    q = float(name[1:])
    return lambda x, axis=-1: np.percentile(x, q, axis=axis)


def _resamples(n: int) -> int:
    # Enough for a stable 95% interval on small runs; bounded work (n * B) so 10,000-request runs stay fast.
    return int(min(2000, max(150, 1_500_000 // max(n, 1))))


def change_intervals(
    base: np.ndarray, new: np.ndarray, stats: tuple[str, ...], paired: bool, seed: int = 0,
    clusters: np.ndarray | None = None,
) -> dict[str, tuple[float, float, float]]:  # fmt: skip
    """:func:`change_interval` for several statistics of the same two samples, sharing one set of resamples (the
    same ones each separate call would draw: every call seeds its generator alike), so a 10,000-pair compare
    indexes its arrays once per metric instead of once per statistic."""
    simple = len(base) < 2 or len(new) < 2 or (clusters is not None and paired and len(np.unique(clusters)) > 1)
    if simple or (np.ptp(base) == 0 and np.ptp(new) == 0) or _sectioned(base, new):
        return {s: change_interval(base, new, s, paired, seed, clusters) for s in stats}
    b, n = _resampled(base, new, paired, seed)
    alpha = (1 - CONFIDENCE) / 2
    out = {}
    # the mean's interval is Student t (:func:`variance.mean_ratio_interval`): only the quantiles are resampled
    quantiles = [s for s in stats if s != "mean"]
    qb = np.percentile(b, [float(s[1:]) for s in quantiles], axis=-1) if quantiles else None
    qn = np.percentile(n, [float(s[1:]) for s in quantiles], axis=-1) if quantiles else None
    for s in stats:
        f = _stat(s)
        point = 100.0 * (f(new) / f(base) - 1.0)
        if s == "mean":
            out[s] = (point, *variance.mean_ratio_interval(base, new, paired))
            continue
        k = quantiles.index(s)
        dist = 100.0 * (qn[k] / qb[k] - 1.0)  # type: ignore[index]
        low, high = np.quantile(dist, [alpha, 1 - alpha])
        out[s] = (point, float(low), float(high))
    return out


def _resampled(base: np.ndarray, new: np.ndarray, paired: bool, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The bootstrap's resamples (rows), drawn exactly as scipy.stats.bootstrap draws them: the same integers
    from the same generator (paired: one index set for both samples; else one set per sample, in order)."""
    rng = np.random.default_rng(seed)
    reps = _resamples(len(base))
    if paired:
        idx = rng.integers(0, len(base), (reps, len(base)))
        return base[idx], new[idx]
    b = base[rng.integers(0, len(base), (reps, len(base)))]
    return b, new[rng.integers(0, len(new), (reps, len(new)))]


def change_interval(
    base: np.ndarray, new: np.ndarray, stat: str, paired: bool, seed: int = 0, clusters: np.ndarray | None = None
):
    """(change %, low %, high %) of ``stat(new)/stat(base) - 1`` with a 95% percentile-bootstrap interval. ``clusters``
    (paired only): which worker process measured each pair (``ab --processes``); then the interval is over the
    processes' own changes (see :func:`_cluster_interval`), so a difference between two processes counts as
    noise unless several processes agree."""
    f = _stat(stat)
    point = 100.0 * (f(new) / f(base) - 1.0)
    if len(base) < 2 or len(new) < 2:
        return point, float("nan"), float("nan")
    if clusters is not None and paired and len(np.unique(clusters)) > 1:
        return (point, *_cluster_interval(base, new, clusters, f, seed))

    if np.ptp(base) == 0 and np.ptp(new) == 0:
        return point, point, point  # no spread: the change is exact
    # The percentile bootstrap, resampled exactly as scipy.stats.bootstrap(method="percentile") does (the same
    # integers from the same generator, the same linear quantiles), in numpy alone: importing scipy.stats cost
    # compare ~0.45 s, more than its arithmetic.
    if stat == "mean":
        return (point, *variance.mean_ratio_interval(base, new, paired))
    if _sectioned(base, new):
        return (point, *variance.sectioned_change(base, new, float(stat[1:]) / 100, paired, seed))
    b, n = _resampled(base, new, paired, seed)
    dist = 100.0 * (f(n, axis=-1) / f(b, axis=-1) - 1.0)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.quantile(dist, [alpha, 1 - alpha])
    return point, float(low), float(high)


def _sectioned(base: np.ndarray, new: np.ndarray) -> bool:
    """Large samples: a quantile's interval by sectioning (:func:`variance.sectioned_change`), not the bootstrap."""
    return min(len(base), len(new)) >= variance.SECTIONED_FROM


def _cluster_interval(base: np.ndarray, new: np.ndarray, clusters: np.ndarray, f, seed: int) -> tuple[float, float]:
    """The interval at the level of the processes: each process's own change (its pairs' statistic, head over
    base), and a Student t interval over those N changes (N - 1 degrees of freedom) around the pooled change.
    The processes are the experimental units: with a handful of them a bootstrap over processes is too narrow
    (4 processes give 35 distinct resamples), and one odd process must widen the interval, not decide it."""
    point = 100.0 * (f(new) / f(base) - 1.0)
    per = np.array([100.0 * (f(new[clusters == c]) / f(base[clusters == c]) - 1.0) for c in np.unique(clusters)])
    return variance.t_interval(point, per, CONFIDENCE)


def _verdict(direction: int, change: float, significant: bool) -> str:
    if not significant:
        return NO_CHANGE
    if direction == 0:
        return "more" if change > 0 else "fewer"
    better = (change > 0) == (direction > 0)
    return "faster" if better else "slower"


def _probe_speed(run: Run | RunScalars, key: str, method: str | None) -> float | None:
    m = run.machine
    if m is None:
        return None
    vals = [getattr(p, key) for p in (m.probe_before, m.probe_after) if p is not None and p.method == method]
    return float(np.mean(vals)) if vals else None


def _probe_method(run: Run | RunScalars) -> str | None:
    m = run.machine
    p = (m.probe_before or m.probe_after) if m else None
    return p.method if p else None


def _workload(base: Any, new: Any) -> list[str]:
    """The workload line of each run (one when both sent the same): a dataset's file and choices."""
    from llmbench.workloads.dataset import describe

    sb, sn = getattr(base.config, "prompt_source", None), getattr(new.config, "prompt_source", None)
    b, n = (describe(sb) if sb else None), (describe(sn) if sn else None)
    if b == n:
        return [b] if b else []
    return [f"base {b or 'workload: a prompt list'}", f"new {n or 'workload: a prompt list'}"]


# Bounds of what a run can record: the stopwatch counts nanoseconds, and no request takes a year. Inside them the
# arithmetic of any run stays finite (a ratio of two times is under 1e17); outside them a file is corrupt.
_MIN_MS = 1e-6
_MAX_MS = 365 * 86_400_000.0
_MAX_TOKENS = 10**12


def _is_time(v: Any) -> bool:
    return isinstance(v, (int, float)) and math.isfinite(v) and _MIN_MS <= v <= _MAX_MS


def _rising(stamps: Any) -> bool:
    """Non-decreasing (a NaN fails), in one array pass: a 10,000 x 256-token run's stamps in a few ms each."""
    try:
        a = np.asarray(stamps, dtype=float)
    except (TypeError, ValueError):  # not numbers
        return False
    return a.ndim == 1 and bool(np.all(a[1:] >= a[:-1]))


def _bad_figure(r: Any) -> str | None:
    """What about one request no run can record (its field and value), or None. Run files are validated when
    read, but a scalar read skips the requests' invariants, and a hand-edited file can hold any number."""
    texted = r.ttft_ms is not None  # an answer of tool calls alone has no text: no TTFT, 0 text tokens
    if texted and not _is_time(r.ttft_ms):
        return f"ttft_ms {r.ttft_ms!r}"
    if not (_is_time(r.e2e_ms) and r.e2e_ms >= (r.ttft_ms if texted else 0)):
        return f"e2e_ms {r.e2e_ms!r} (ttft_ms {r.ttft_ms!r})"
    if r.tpot_ms is not None and not _is_time(r.tpot_ms):
        return f"tpot_ms {r.tpot_ms!r}"
    if not (isinstance(r.output_tokens, int) and int(texted) <= r.output_tokens <= _MAX_TOKENS):
        return f"output_tokens {r.output_tokens!r}"
    stamps = getattr(r, "token_times_ms", None)  # read only for the gaps
    # from ttft_ms, non-decreasing, to a finite end: then every stamp is finite (NaN fails every comparison)
    if (
        stamps is not None
        and len(stamps)
        and not (stamps[0] == r.ttft_ms and stamps[-1] <= _MAX_MS and _rising(stamps))
    ):
        return "token_times_ms (not a finite, non-decreasing list from ttft_ms)"
    return None


def _check_requests(run: Run | RunScalars, name: str, keys: variance.KeyMemo | None = None) -> None:
    """UserError naming ``name``'s first request whose figures no run records, or a (prompt_index, repeat) it
    holds twice: compare would otherwise compute from it (a negative TPOT read as -125%, "faster"; a duplicate
    silently dropped from the pairs). In arrays first (a million requests in a second); the requests are walked
    one by one only to name the first bad one, or for their stamps."""
    memo = keys or variance.KeyMemo()
    kinds = [(kind, getattr(run, kind, None) or []) for kind in ("requests", "ttft_requests")]
    every = np.concatenate([memo(requests) for _, requests in kinds])  # ttft_requests' keys are their own too
    stamped = any(getattr(r[0], "token_times_ms", None) is not None for _, r in kinds if r)
    if not stamped and np.unique(every).size == every.size and all(_plausible(r) for _, r in kinds if r):
        return
    seen: set[tuple[int, int]] = set()
    for kind, requests in kinds:
        for i, r in enumerate(requests):
            key = (r.prompt_index, r.repeat)
            if key in seen:
                raise UserError(f"{name}: {kind}[{i}] is a second request of prompt {key[0]}, repeat {key[1]}: "
                                "a run measures each (prompt_index, repeat) once (a hand-edited or merged "
                                "file?)")  # fmt: skip
            seen.add(key)
            if (problem := _bad_figure(r)) is not None:
                raise UserError(f"{name}: {kind}[{i}] (prompt {key[0]}, repeat {key[1]}) holds {problem}: not a "
                                "figure a run records (a corrupted or hand-edited file?)")  # fmt: skip


def _plausible(requests: list[Any]) -> bool:
    """:func:`_bad_figure` (stamps aside) over arrays: True when every request passes."""
    try:
        ttft, e2e, tpot, tokens = (np.array([getattr(r, f) for r in requests], dtype=float)
                                   for f in ("ttft_ms", "e2e_ms", "tpot_ms", "output_tokens"))  # fmt: skip
        if any(type(r.output_tokens) is not int for r in requests):
            return False
    except (TypeError, ValueError):  # not numbers: the walk names the first
        return False

    def times(a: np.ndarray) -> np.ndarray:
        return np.isfinite(a) & (a >= _MIN_MS) & (a <= _MAX_MS)

    ok = times(ttft) & times(e2e) & (e2e >= ttft) & (np.isnan(tpot) | times(tpot)) & (tokens >= 1)
    ok &= tokens <= _MAX_TOKENS
    return bool(ok.all())


def compare_runs(
    base: Run | RunScalars,
    new: Run | RunScalars,
    *,
    base_name: str = "base",
    new_name: str = "new",
) -> Comparison:
    """Compare two runs: a row per (metric, stat), comparability, outputs and the machine. Gate it with
    :meth:`Comparison.gate`."""
    memo = variance.KeyMemo()
    for name, run in ((base_name, base), (new_name, new)):
        if not run.requests:
            raise UserError(f"{name} has no finished requests: nothing to compare")
        _check_requests(run, name, memo)
    paired = base.config.prompt_sha256 == new.config.prompt_sha256
    rows: list[Row] = []
    logs: dict[tuple[str, str], tuple[np.ndarray, np.ndarray | None]] = {}  # (metric, stat): each pair's ln(n/b)
    processes = {(r.prompt_index, r.repeat): r.process for r in _requests(base, "ttft_ms")
                 if getattr(r, "process", None) is not None}  # fmt: skip
    for metric in (m for m in METRICS if m not in PROCESS_METRICS):
        bs, ns = _series(base, metric, memo), _series(new, metric, memo)
        clusters = None
        if paired:
            encoded, b, n = variance.matched(bs, ns)
            keys = [variance.key_pair(k) for k in encoded] if processes else []  # ab's few pairs: their processes
            if processes and all(k in processes for k in keys):
                clusters = np.array([processes[k] for k in keys])
        else:
            b, n = bs[1], ns[1]
        if len(b) == 0 or len(n) == 0:
            continue
        units = variance.units(clusters)
        if not ((b > 0).all() and (n > 0).all()):  # a change relative to 0 is no number (a model that wrote only
            # whitespace decodes 0 visible chars/s): no change, no interval, and a gate on it is blind, not passed
            why = f"no relative change: a {'base' if not (b > 0).all() else 'new'} value is 0"
            nan = float("nan")
            rows += [_row(metric, stat, float(_stat(stat)(b)), float(_stat(stat)(n)), nan, nan, nan, len(b), len(n),
                          units, paired=paired, undefined=why) for stat in STATS]  # fmt: skip
            continue
        intervals = change_intervals(b, n, ("mean", "p90") if paired else STATS, paired, clusters=clusters)
        if paired:  # the median of the pairs' log ratios (see the module's docstring)
            logs[(metric, "p50")] = (np.log(n / b), clusters)
            places = None if clusters is None else _placements([_by_key(run, metric) for run in (base, new)], keys)
            intervals["p50"] = variance.median_change(*logs[(metric, "p50")], _resamples(len(b)), CONFIDENCE, places)
        rows += [_row(metric, stat, float(_stat(stat)(b)), float(_stat(stat)(n)), *intervals[stat], len(b), len(n),
                      units, paired=paired) for stat in STATS]  # fmt: skip

    if paired and (gaps := _gaps_row(base, new, processes)) is not None:
        at = max(i for i, r in enumerate(rows) if r.metric == "tpot_ms") + 1 if any(
            r.metric == "tpot_ms" for r in rows) else len(rows)  # fmt: skip
        rows.insert(at, gaps[0])
        logs[("tpot_ms", GAPS)] = gaps[1]

    for metric in PROCESS_METRICS:  # rows of information unless gated (a load's few samples: no word unasked)
        if (got := process_change(base, new, metric)) is not None:
            rows.append(_row(metric, "mean", *got[:5], got[5], got[5], got[5], kind="cold_start"))
    compared, changed, note = _outputs(base, new, paired, memo)
    comp = Comparison(
        base=base_name, new=new_name, paired=paired, n_base=len(base.requests), n_new=len(new.requests),
        n_pairs=len(np.intersect1d(memo(base.requests), memo(new.requests))) if paired else 0,
        config_diffs=differences(base.config.model_dump(), new.config.model_dump(), must_match(COMPARE)),
        env_diffs=differences(base.environment.model_dump(), new.environment.model_dump(),
                              must_match(ENV, Environment)),
        rows=rows, outputs_compared=compared, outputs_changed=changed, outputs_note=note,
    )  # fmt: skip
    comp.quality, comp.quality_note = _quality(base, new)
    comp.forked = any(_forked(r) for r in (base, new))
    comp.shape = shape.shape_rows(base, new, paired, memo)
    comp.workload = _workload(base, new)
    comp.levers = {who: d for who, run in (("base", base), ("new", new)) if (d := lever_summary(run)) is not None}
    comp.cold = {who: d for who, run in (("base", base), ("new", new)) if (d := cold_start(run)) is not None}
    comp.client_behind = {who: "; ".join(behind_reasons(c)) or "see client.per_process"
                          for who, run in (("base", base), ("new", new))
                          if (c := getattr(run, "client", None)) is not None and c.fell_behind}  # fmt: skip
    if paired and (ids := _prompt_ids_differ(base, new)) is not None:
        comp.config_diffs.append(("prompt_token_ids", *ids))
    both_auto = set(base.config.auto) & set(new.config.auto)
    comp.auto_diffs = [k for k, _, _ in comp.config_diffs if k in both_auto]
    # probes are comparable when made the same way (torch on the run's threads, or numpy on one)
    method = _probe_method(base) if _probe_method(base) == _probe_method(new) else None
    comp.probes = {k: {"base": _probe_speed(base, k, method), "new": _probe_speed(new, k, method)}
                   for k in ("mem_read_gbps", "matmul_gflops")}  # fmt: skip
    comp._notes = _machine_notes(base, new, rows, comp)
    comp.machine = _spoken_notes(rows, comp._notes)
    one_token = [_keys(getattr(run, "ttft_requests", None) or []) for run in (base, new)]
    comp.n_ttft_pairs = len(one_token[0] & one_token[1]) if paired else 0
    for metric in ("ttft_ms", "tpot_ms") if paired else ():  # where the noise of their speaking rows is
        pair = logs.get((metric, stat := comp.spoken_stat(metric)))
        if pair is not None and (v := variance.noise(*pair, comp.detectable_pct(metric, stat))) is not None:
            comp.variance[metric] = {"stat": stat, **v}
    return comp


def _forked(run: Any) -> bool:
    ab = getattr(run.config, "ab", None)
    return ab is not None and (ab.setup or {}).get("spawn") == "fork"


def _keys(requests: list[Any]) -> set[tuple[int, int]]:
    return {(r.prompt_index, r.repeat) for r in requests}


def _row(
    metric: str,
    stat: str,
    b: float,
    n: float,
    change: float,
    low: float,
    high: float,
    nb: int,
    nn: int,
    units: int,
    kind: str | None = None,
    paired: bool = True,
    undefined: str | None = None,
) -> Row:
    """A row; it speaks when its statistic is robust (see the module's docstring), else its verdict is
    ``(information)``, whatever its interval says (``significant`` keeps that). Below its interval's smallest
    honest n (:func:`interval_kind`, :data:`variance.MIN_N`) it has no interval and its verdict says so: too few;
    ``undefined`` says why else it has none (a value of 0 under a ratio)."""
    kind = kind or interval_kind(stat, paired, units)
    unit = "processes" if units > 1 else "pairs"
    few = undefined or variance.too_few(units if units > 1 else min(nb, nn), kind, unit)
    if few is not None:
        low = high = float("nan")
    significant = bool(np.isfinite(low) and (low > 0 or high < 0))
    row = Row(metric, stat, b, n, change, low, high, significant, INFORMATION, nb, nn, False, units, few)
    if stat in SPEAKING_STATS and metric in SPEAKING_METRICS:
        row.speaks, row.verdict = True, _spoken(row)
    if few is not None:
        row.verdict = few
    return row


def interval_kind(stat: str, paired: bool, processes: int) -> str:
    """Which :data:`variance.MIN_N` bounds a row's interval: over 2 or more ``processes``, Student t over them;
    else a paired median's exact interval (p50, gaps), a paired mean's or p90's bootstrap, or an unpaired row's."""
    if processes > 1:
        return "processes"
    if not paired:
        return "unpaired"
    return "median" if stat in SPEAKING_STATS else stat


def _spoken(row: Row) -> str:
    """A speaking row's verdict word: its change is a finding when its interval at the verdicts' level (95% over
    the metrics that speak together: :func:`variance.widen`) excludes 0."""
    low, high = variance.widen(row.change_pct, row.ci_low_pct, row.ci_high_pct, row.processes,
                               row.stat in SPEAKING_STATS)  # fmt: skip
    return _verdict(METRICS[row.metric][1], row.change_pct, bool(low > 0 or high < 0))


def _pair_gaps(b: Any, n: Any) -> tuple[float, float] | None:
    """(base, head) mean gap of one pair over the token positions both reached (see :func:`_gaps_row`); None when
    the pair can't say: no stamps, fewer than 3 tokens on a side, or a side that measured no decode time (every
    token in one event)."""
    bt, nt = getattr(b, "token_times_ms", None), getattr(n, "token_times_ms", None)  # lists, or numpy views
    if (
        bt is None
        or nt is None
        or not len(bt)
        or not len(nt)
        or min(b.output_tokens, n.output_tokens) < GAPS_MIN_TOKENS
    ):
        return None
    if len(bt) == b.output_tokens and len(nt) == n.output_tokens:  # a stamp per token: positions are tokens
        m = min(len(bt), len(nt)) - 1
        gb, gn = (bt[m] - bt[0]) / m, (nt[m] - nt[0]) / m
    else:  # an endpoint's events carry several tokens each: which came when is unknown, so the whole requests
        gb, gn = b.tpot_ms, n.tpot_ms
    return None if gb is None or gn is None or gb <= 0 or gn <= 0 else (float(gb), float(gn))


def _by_key(run: Run | RunScalars, metric: str) -> dict[tuple[int, int], Any]:
    return {(r.prompt_index, r.repeat): r for r in _requests(run, metric)}


def _placements(by_key: list[dict[tuple[int, int], Any]], keys: list[tuple[int, int]]) -> np.ndarray | None:
    """Base's CPU of each pair in ``keys`` where both runs are a duet's (each pair's two requests pinned to two
    CPUs, both placements present), else None: then either run's order of roles reads alike."""
    cpus = [tuple(getattr(side[k], "pinned_cpu", None) for side in by_key) for k in keys]
    if any(None in c or c[0] == c[1] for c in cpus) or len({c[0] for c in cpus}) < 2:
        return None
    return np.array([c[0] for c in cpus])


def _gaps_row(
    base: Run | RunScalars, new: Run | RunScalars, processes: dict
) -> tuple[Row, tuple[np.ndarray, np.ndarray | None]] | None:
    """TPOT's change from per-token gaps paired by position. For pair i (the same prompt_index and repeat in both
    runs) whose shorter request has m + 1 tokens, stamped t_0 .. t_m at the positions both reached:

        g_i = (t_m - t_0) / m = mean(gap_1 .. gap_m)    on each side: base b_i, head h_i
        change = exp(median_i ln(h_i / b_i)) - 1

    A mean gap weighs every token as TPOT does: a bundle of k tokens (k - 1 zero gaps and one gap k times as
    long: an HTTP relay's read, speculative decoding's accepted drafts) adds the same time over the same positions
    as k tokens one by one, so bundling on either side changes nothing. A median or a ratio per position would
    (a zero gap has no ratio, and skipping zeros leaves only the long gaps). The median over pairs of the log ratios
    is robust to a few pairs a burst hit and swaps exactly: (1 + change(base, head)) (1 + change(head, base)) = 1.
    Endpoint runs whose events carry several tokens each (fewer stamps than tokens) use each request's TPOT instead.
    A pair a side of which measured no decode time is skipped, on either side alike.

    The 95% interval is the paired p50 rows' (:func:`variance.median_change`): the pairs' median's exact interval,
    or (``ab --processes``) Student t in logs over the processes' own medians; a duet's (each request's
    ``pinned_cpu`` recorded) over each process's median per CPU, averaged (:func:`variance.balanced_median`: a CPU
    slowed for a while weighs alike on both sides). ``base``: base's median mean gap;
    ``new``: base times (1 + change), so the table's change = new / base - 1 holds. With the row, its pairs' logs
    and processes (for :mod:`~llmbench.analysis.variance`); None without stamps, or with fewer than 2 usable pairs."""
    if not all(hasattr(run.requests[0], "token_times_ms") for run in (base, new)):  # a scalar read without stamps
        return None
    by_key = [_by_key(run, "tpot_ms") for run in (base, new)]
    kept, gb, gn = [], [], []
    for k in sorted(by_key[0].keys() & by_key[1].keys()):
        if (g := _pair_gaps(by_key[0][k], by_key[1][k])) is not None:
            kept.append(k)
            gb.append(g[0])
            gn.append(g[1])
    if len(kept) < GAPS_MIN_PAIRS:
        return None
    logs = np.log(np.asarray(gn) / np.asarray(gb))
    clusters = np.array([processes[k] for k in kept]) if processes and all(k in processes for k in kept) else None
    places = _placements(by_key, kept) if clusters is not None else None
    point, low, high = variance.median_change(logs, clusters, _resamples(logs.size), CONFIDENCE, places)
    b50, m = float(np.median(gb)), len(kept)
    return _row("tpot_ms", GAPS, b50, b50 * (1 + point / 100), point, low, high, m, m, variance.units(clusters)), (
        logs, clusters)  # fmt: skip


def _outputs(
    base: Run | RunScalars, new: Run | RunScalars, paired: bool, keys: variance.KeyMemo
) -> tuple[int, int, str]:
    if not paired:
        return 0, 0, "different prompt files: outputs not compared"
    if base.config.mode != new.config.mode:  # token-id hashes in-process, text hashes over HTTP
        return 0, 0, f"{base.config.mode} vs {new.config.mode} run: outputs not compared"
    b, n = ((keys(run.requests), np.array([r.output_token_ids_sha256 for r in run.requests])) for run in (base, new))
    common, hb, hn = variance.matched(b, n)
    changed = int(np.count_nonzero(hb != hn))
    if base.config.sampling.do_sample or new.config.sampling.do_sample:
        note = "sampled decoding: outputs are not expected to match"
    elif changed:
        note = "greedy decoding gave different tokens: a correctness change (model, weights, dtype or code)"
    else:
        note = "greedy decoding gave the same tokens for every request"
    return int(common.size), changed, note


QUALITY_FIELDS = ("kld_mean", "kld_p99", "top1_agreement")


def _quality(base: Run | RunScalars, new: Run | RunScalars) -> tuple[dict[str, list[float | None]], str | None]:
    """Quality figures side by side when both runs carry them against the same reference on the same text."""
    bq, nq = base.quality, new.quality
    if not bq and not nq:
        return {}, None
    if not bq or not nq:
        return {}, f"only the {'new' if nq else 'base'} run has quality figures: not compared"
    if bq.get("reference") != nq.get("reference") or bq.get("text_sha256") != nq.get("text_sha256"):
        return {}, "quality measured against different references or texts: not compared"
    figures: dict[str, list[float | None]] = {k: [bq.get(k), nq.get(k)] for k in QUALITY_FIELDS}
    figures["greedy_identical_share"] = [(bq.get("greedy") or {}).get("identical_share"),
                                         (nq.get("greedy") or {}).get("identical_share")]  # fmt: skip
    return figures, None


MACHINE_NOTE_MIN_PCT = 5.0  # smaller changes are within what the probe itself can resolve


def _probe_threads(run: Run | RunScalars) -> int | None:
    p = run.machine.probe_before if run.machine else None
    return p.threads if p else None


def _gpu_reasons(base: Run | RunScalars, new: Run | RunScalars) -> list[str]:
    """What the card's record says about the new run that the base's doesn't: slowed clocks, other processes."""
    bg = (base.machine.gpu if base.machine else None) or {}
    ng = (new.machine.gpu if new.machine else None) or {}
    out = []
    fresh = sorted(set(ng.get("slowdowns") or []) - set(bg.get("slowdowns") or []))
    if fresh:
        out.append(f"the GPU's clocks were slowed ({', '.join(fresh)}; SM clock down to "
                   f"{ng.get('sm_clock_mhz_min')} MHz, base {bg.get('sm_clock_mhz_min')} MHz)")  # fmt: skip
    if ng.get("other_processes") and not bg.get("other_processes"):
        out.append(f"other processes used the GPU ({len(ng['other_processes'])})")
    return out


def _machine_notes(
    base: Run | RunScalars, new: Run | RunScalars, rows: list[Row], comp: Comparison
) -> list[MachineNote]:
    """For each significant change of a speed metric's statistic (5% or more): does the machine explain it? Every
    row's, spoken or not; :func:`_spoken_notes` picks those compare shows."""
    notes = []
    bs, ns = (base.machine.summary if base.machine else None), (new.machine.summary if new.machine else None)
    same_probe = _probe_threads(base) == _probe_threads(new)
    setup = "the setup differs (" + ", ".join(k for k, _, _ in comp.config_diffs) + "): that can explain it"
    for row in rows:
        if row.metric not in PROBE_FOR or not row.significant:
            continue
        worse_pct = row.change_pct * -METRICS[row.metric][1]  # + when slower
        if abs(worse_pct) < MACHINE_NOTE_MIN_PCT:
            continue
        key = PROBE_FOR[row.metric]
        pb, pn = comp.probes[key]["base"], comp.probes[key]["new"]
        slowdown = 100.0 * (pb / pn - 1.0) if pb and pn else None  # + when the new machine is slower
        ob, on = (bs.other_cpu_pct_mean if bs else None), (ns.other_cpu_pct_mean if ns else None)
        sb, sn = (bs.steal_pct_mean if bs else None), (ns.steal_pct_mean if ns else None)
        busier = []
        if ob is not None and on is not None and on - ob >= 15:
            busier.append(f"other processes used {on:.0f}% of the CPUs (base {ob:.0f}%)")
        if sb is not None and sn is not None and sn - sb >= 5:
            busier.append(f"steal time {sn:.0f}% (base {sb:.0f}%)")
        busier += _gpu_reasons(base, new)
        moved = f"{abs(worse_pct):.0f}% {'slower' if worse_pct > 0 else 'faster'}"
        if busier and worse_pct > 0:
            text = f"the machine was busier ({moved}): " + "; ".join(busier)
        elif comp.config_diffs and not same_probe:
            text = setup
        elif slowdown is not None and slowdown * worse_pct > 0 and abs(slowdown) >= 0.5 * abs(worse_pct):
            word = "slower" if slowdown > 0 else "faster"
            text = f"the machine explains it ({moved}): the {key} probe was {abs(slowdown):.0f}% {word} too"
        elif comp.config_diffs:
            text = setup
        elif slowdown is None:
            text = f"{moved}; no calibration probe in one of the runs: the machine can't be ruled out"
        else:
            text = (
                f"{moved}, while the {key} probe moved {-slowdown:+.0f}% and no other load was seen: the machine's "
                "measured state doesn't explain it (the code, the setup, or drift the probe can't see)"
            )
        notes.append(MachineNote(row.metric, float(row.change_pct), key, slowdown, ob, on, sb, sn, text, row.stat))
    return notes


def _spoken_notes(rows: list[Row], notes: list[MachineNote]) -> list[MachineNote]:
    """The machine notes of rows that speak and found a change (a verdict word), one per metric: a gated mean's or
    p90's first (the gate decided on it), then the gaps', then the median's."""
    spoke = {(r.metric, r.stat) for r in rows if r.speaks and r.verdict not in (INFORMATION, NO_CHANGE)}
    out: dict[str, MachineNote] = {}
    rank = {GAPS: 1, "p50": 2}  # a gated mean or p90: 0
    for note in sorted((n for n in notes if (n.metric, n.stat) in spoke), key=lambda n: rank.get(n.stat, 0)):
        out.setdefault(note.metric, note)
    return sorted(out.values(), key=lambda n: list(METRICS).index(n.metric))
