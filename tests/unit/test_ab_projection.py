"""ab --budget's projection from this CPU's own noise (issue 62): the simulated variance of a process's balanced
median, the expected MDC against the MDC compare prints on synthetic runs of known noise, the pilot's pairs and
their cut to a shorter request, the targets per CPU, what would reach a missed target, and the calibration's
choice among setups of known speed and noise."""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import numpy as np
import pytest

from llmbench.analysis.variance import balanced_median_variance, c4, expected_mdc_pct, median_change


def test_c4_is_the_mean_sample_sd_over_sigma():
    rng = np.random.default_rng(1)
    for n in (2, 5, 20):
        s = rng.normal(size=(200_000, n)).std(axis=1, ddof=1)
        assert c4(n) == pytest.approx(float(s.mean()), rel=0.01)
    assert math.isnan(c4(1))


def test_balanced_median_variance_is_a_mean_of_one_and_pi_over_2_for_many():
    sigma = 0.05
    logs = np.random.default_rng(2).normal(0, sigma, 5000)
    assert balanced_median_variance(logs, 1) == pytest.approx(sigma**2, rel=0.08)
    # two placements of 20: each median's variance ~ pi/2 sigma^2 / 20, their mean halves it
    assert balanced_median_variance(logs, 40) == pytest.approx(math.pi / 2 * sigma**2 / 40, rel=0.12)
    # the same pilot gives the same plan
    assert balanced_median_variance(logs, 7) == balanced_median_variance(logs, 7)
    with pytest.raises(ValueError):
        balanced_median_variance(np.array([0.1]), 3)


def _printed_mdc(rng, draw, processes, pairs, s_b):
    """The MDC compare prints for one synthetic duet run: pairs per process drawn by ``draw``, placements taking
    turns from a random first, a process effect N(0, s_b)."""
    logs, clusters, where = [], [], []
    for p in range(processes):
        first = int(rng.integers(2))
        logs.append(draw(pairs) + rng.normal(0, s_b))
        clusters += [p] * pairs
        where += [(first + j) % 2 for j in range(pairs)]
    _, low, high = median_change(np.concatenate(logs), np.array(clusters), 0, placements=np.array(where))
    return (high - low) / 2


@pytest.mark.parametrize("tails", [False, True])
def test_the_projection_is_the_mdc_compare_prints_on_runs_of_known_noise(tails):
    """Ground truth by simulation: runs whose pairs' noise is known (normal, or a VM's: mostly steady pairs and
    some a preempted vCPU threw by +-20%), each through compare's own estimator; the projection from a large
    sample of the same noise (the pilot's role) is their mean printed MDC, within 8%."""
    rng = np.random.default_rng(3)

    def draw(n):
        x = rng.normal(0, 0.04, n)
        if tails:
            hit = rng.random(n) < 0.12
            x[hit] += rng.choice([-0.2, 0.2], hit.sum())
        return x

    from llmbench.drivers.ab_projection import PilotNoise

    sample = draw(4000)
    where = np.arange(4000) % 2
    noise = PilotNoise({"tpot": sample, "ttft": sample}, {"tpot": where, "ttft": where}, {"tpot": 0.005, "ttft": 0.005})
    for processes, pairs in ((6, 5), (16, 8)):
        printed = np.mean([_printed_mdc(rng, draw, processes, pairs, 0.005) for _ in range(300)])
        assert noise.mdc_pct("tpot", processes, pairs) == pytest.approx(printed, rel=0.08)


def test_the_projection_shrinks_with_pairs_and_processes_and_is_infinite_for_one():
    assert math.isinf(expected_mdc_pct(0.0, 0.01, 1))
    assert expected_mdc_pct(0.0, 0.0004, 8) > expected_mdc_pct(0.0, 0.0004, 16) > 0
    assert expected_mdc_pct(0.0001, 0.0004, 8) > expected_mdc_pct(0.0, 0.0004, 8)


def _result(ttft_ms: float, gap_ms: float, tokens: int = 32, slow_after: int | None = None):
    """A side's result with stamps: the first token at ttft_ms, each next gap_ms later (3x from ``slow_after``)."""
    stamps, t = [], ttft_ms
    for k in range(tokens):
        stamps.append(t)
        t += gap_ms * (3 if slow_after is not None and k + 1 >= slow_after else 1)
    return SimpleNamespace(ttft_ms=ttft_ms, token_times_ms=stamps, output_tokens=tokens)


def test_pair_logs_cut_a_pair_to_a_shorter_request():
    from llmbench.drivers.ab_projection import PilotPair, pair_logs

    # head's gaps triple from its 16th token on: a 32-token pair sees it, an 8-token one doesn't
    pair = PilotPair(_result(100, 10), _result(110, 10, slow_after=16), wall_s=0.5, placement=1)
    logs, where, secs = pair_logs([pair], 8)
    assert logs["tpot"][0] == pytest.approx(0.0) and logs["ttft"][0] == pytest.approx(math.log(1.1))
    assert list(where["tpot"]) == list(where["ttft"]) == [1]
    # the pair ends with its later side: cut at token 8, the base (the side ending sooner by less) saves 24 gaps
    assert secs == pytest.approx(0.5 - 24 * 10 / 1000)
    full, _, secs32 = pair_logs([pair], None)
    assert full["tpot"][0] > 0.3 and secs32 == pytest.approx(0.5)
    # fewer than 3 tokens say nothing of the gaps
    assert pair_logs([PilotPair(_result(1, 1, 2), _result(1, 1, 2), 0.1, 0)], 8)[0]["tpot"].size == 0


def test_targets_follow_the_cpu():
    from llmbench.drivers.ab_budget import TARGETS_BF16_PCT, TARGETS_PCT, cpu_targets

    assert cpu_targets({"avx2", "avx512f", "avx512_bf16"}) == TARGETS_BF16_PCT == (1.0, 2.0)
    assert cpu_targets({"avx2", "amx_bf16"}) == TARGETS_BF16_PCT
    assert cpu_targets({"avx2", "fma"}) == TARGETS_PCT == (1.5, 3.0)
    assert cpu_targets(set()) == TARGETS_PCT


class _Side:
    """A live worker side with known delays: TTFT ttft_s, every pair's requests measured with stamps; a side's
    gaps jitter by ``noise`` (seeded), so the pilot sees a known pair-to-pair noise."""

    def __init__(self, seed: int, noise: float, pair_s: float = 0.004) -> None:
        self.rng, self.noise, self.pair_s = np.random.default_rng(seed), noise, pair_s
        self.start_s, self.start_read_mb, self.calls = 2.0, 0.0, []
        self.features = ("max_new_tokens",)

    @property
    def live(self):
        return self

    async def measure(self, request, stop, started_s):
        self.calls.append(request)
        await asyncio.sleep(self.pair_s)
        n = 1 if request.ttft_only else (request.max_new_tokens or 32)
        return _result(100 * math.exp(self.rng.normal(0, self.noise)), 40 * math.exp(self.rng.normal(0, self.noise)), n)


class _Status:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def status(self, line: str) -> None:
        self.lines.append(line)


def _choose(noise: float, budget_s: float = 300.0, pair_s: float = 0.004):
    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import choose
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    sides, status = [_Side(1, noise, pair_s), _Side(2, noise, pair_s)], _Status()
    prompts = PromptSet.from_list([f"p{i}" for i in range(20)])
    d = asyncio.run(choose(Design(duet=True, budget_s=budget_s), sides, prompts, RunOptions(warmup=1), 10.0,
                           (0, 1), status))  # fmt: skip
    return d, sides, status


def test_the_pilot_measures_this_cpus_noise_and_the_plan_projects_from_it():
    from llmbench.drivers.ab_budget import NOISE_MIN_PAIRS

    quiet, sides, status = _choose(0.002)
    noisy, _, _ = _choose(0.05)
    for d in (quiet, noisy):
        n = d.plan["noise"]
        assert n["source"] == "pilot" and n["pairs"] >= NOISE_MIN_PAIRS
    # the placements take turns, each kind's: a pair's base on CPU 0, then on CPU 1
    for short in (False, True):
        cpus = [r.cpu for r in sides[0].calls if r.ttft_only is short]
        assert cpus[:6] == [0, 1, 0, 1, 0, 1]
    # each side's gaps vary by 5%: a pair's log ratio by ~7%, its robust sd said and recorded
    assert 4 < noisy.plan["noise"]["sd_within_pct"]["tpot"] < 11
    assert quiet.plan["noise"]["sd_within_pct"]["tpot"] < 0.6
    # hundreds of pairs a process: the between-process prior (0.3%) is most of the quiet side's MDC
    assert noisy.plan["projected_mdc_tpot_pct"] > 1.3 * quiet.plan["projected_mdc_tpot_pct"]
    assert "pilot pairs" in status.lines[0] and "a pair varied" in status.lines[0]


def test_a_budget_that_cant_reach_its_target_says_so_and_what_would():
    from llmbench.drivers.ab_budget import cpu_targets

    d, _, status = _choose(0.5, budget_s=20.0, pair_s=0.05)
    plan = d.plan
    targets = cpu_targets()
    assert plan["fits_targets"] is False and plan["targets_pct"] == {"tpot": targets[0], "ttft": targets[1]}
    said = [line for line in status.lines if "projects an MDC of" in line]
    assert len(said) == 1
    if plan["reach_budget_s"] is not None:
        assert plan["reach_budget_s"] > 60 and f"--budget {math.ceil(plan['reach_budget_s'] / 60)}m" in said[0]
    else:
        assert "would not reach it" in said[0]
    quiet, _, quiet_status = _choose(0.0005, budget_s=300.0)
    assert quiet.plan["fits_targets"] is True and quiet.plan["reach_budget_s"] is None
    assert not any("projects an MDC of" in line for line in quiet_status.lines)


def test_the_calibration_scores_a_faster_setup_above_a_slower_one_of_the_same_noise():
    from llmbench.drivers.ab_calibrate import Measured, WorkerSetup, score
    from llmbench.drivers.ab_projection import PilotPair

    rng = np.random.default_rng(4)

    def pairs(gap_ms: float, noise: float, n: int = 12) -> list[PilotPair]:
        out = []
        for j in range(n):
            b = _result(100, gap_ms * math.exp(rng.normal(0, noise)))
            h = _result(100, gap_ms * math.exp(rng.normal(0, noise)))
            out.append(PilotPair(b, h, (100 + 31 * gap_ms) / 1000, j % 2))
        return out

    fast = Measured(WorkerSetup("float32", "int8-dynamic"), 3.0, 0.1, pairs(45, 0.03))
    slow = Measured(WorkerSetup("bfloat16"), 3.0, 0.1, pairs(140, 0.03))
    args = (300.0, 40.0, 20, 1, True, (1.0, 2.0))
    a, b = score(fast, 16, *args), score(slow, 16, *args)
    assert a is not None and b is not None and a["pairs"] > 1.5 * b["pairs"] and a["score"] < b["score"]
    # a shorter request is a cheaper pair, cut from the same stamps
    short = score(fast, 8, *args)
    assert short is not None and short["pair_s"] < a["pair_s"]
    # a setup with no pairs can't be planned
    assert score(Measured(WorkerSetup("float32"), 3.0, 0.1), 16, *args) is None


def test_the_chi_square_quantile_and_the_scatter_of_a_printed_mdc():
    """Wilson-Hilferty's chi-square quantile against draws, and what it is for: the MDC a run prints scatters with
    its sample sd over few processes; 80% of runs of known noise print one within the projected 10-90% range."""
    from llmbench.analysis.variance import chi2_quantile

    rng = np.random.default_rng(5)
    for df in (3, 7, 15):
        draws = rng.chisquare(df, 400_000)
        for q in (0.1, 0.5, 0.9):
            assert chi2_quantile(df, q) == pytest.approx(float(np.quantile(draws, q)), rel=0.02)
    sigma, n = 0.03, 4
    low, mid, high = (expected_mdc_pct(0.0, sigma**2, n, q) for q in (0.1, 0.5, 0.9))
    assert low < mid < high and high / low > 3  # 4 processes: a wide scatter
    printed = []
    for _ in range(4000):
        per = rng.normal(0, sigma, n)
        from llmbench.analysis.variance import t_interval

        lo, hi = t_interval(0.0, per)
        printed.append(100 * math.expm1((hi - lo) / 2))
    inside = np.mean([(low <= p <= high) for p in printed])
    assert 0.77 < inside < 0.83


def test_a_missed_target_is_said_after_the_run_with_what_was_projected_before():
    from llmbench.drivers.ab_budget import shortfall

    def comp(tpot: float, ttft: float) -> SimpleNamespace:
        return SimpleNamespace(detectable_pct=lambda m, s: {"tpot_ms": tpot, "ttft_ms": ttft}[m],
                               spoken_stat=lambda m: "p50",
                               variance={"tpot_ms": {"sd_within_process_pct": 10.1, "sd_between_processes_pct": 0.0,
                                                     "processes": 4}})  # fmt: skip

    plan = {"targets_pct": {"tpot": 1.0, "ttft": 2.0}, "projected_mdc_tpot_pct": 1.58, "projected_mdc_ttft_pct": 0.5}
    line = shortfall(comp(2.9, 0.5), 300.0, plan)
    assert line is not None and "TPOT 2.9% against 1% (1.6% projected before measuring; a pair varied 10.1%" in line
    assert "TTFT" not in line  # met: not said
    assert shortfall(comp(2.9, 0.5), None, plan) is None  # no budget, no aim
    assert shortfall(comp(0.9, 1.9), 300.0, plan) is None
    # a run planned without a projection (no plan kept) is judged against this CPU's targets, and says so
    from llmbench.drivers.ab_budget import cpu_targets

    line = shortfall(comp(5.0, 0.1), 300.0, None)
    assert line is not None and f"against {cpu_targets()[0]:g}% (no projection" in line


def test_the_candidates_follow_the_cpu_and_the_design():
    import os

    from llmbench.drivers.ab_calibrate import WorkerSetup, candidates

    native = candidates(True, {"bfloat16"})
    assert native == [WorkerSetup("float32", "int8-dynamic"), WorkerSetup("bfloat16")]  # float32 only where emulated
    assert WorkerSetup("float32") in candidates(True, set())
    abba = candidates(False, set())
    cpus = len(os.sched_getaffinity(0))
    assert {c.threads for c in abba} == {1, cpus} and len(abba) == 3 * len({1, cpus})
    assert WorkerSetup("float32", "int8-dynamic", 2).flags() == ["--dtype", "float32", "--quantize", "int8-dynamic",
                                                                 "--threads", "2"]  # fmt: skip
