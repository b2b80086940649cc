"""The gate statistic ``gaps``: TPOT from per-token gaps paired by position. Ground truth from runs built with
known gaps: a uniform slowdown, bursts that hit a few tokens of a few requests, processes that disagree."""

from __future__ import annotations

import random

import pytest

from llmbench.analysis.compare import compare_runs
from llmbench.core.errors import UserError
from llmbench.results.metrics import ids_sha256, request_result, summarize
from tests.helpers import synthetic_run

MS = 1_000_000


def with_gaps(run, gaps_of, processes=None):
    """``run`` with each request's stamps rebuilt from ``gaps_of(i)`` (ms; TTFT kept), and ``process`` set."""
    out = []
    for i, r in enumerate(run.requests):
        stamps = [int(r.ttft_ms * MS)]
        for g in gaps_of(i):
            stamps.append(stamps[-1] + int(g * MS))
        new = request_result(prompt_index=r.prompt_index, repeat=r.repeat, start_ns=0, tokenized_ns=MS,
                             stamps_ns=stamps, prompt_tokens=30, output_sha256=ids_sha256(list(range(len(stamps)))),
                             output_text="x")  # fmt: skip
        if processes is not None:
            new.process = processes[i]
        out.append(new)
    return run.model_copy(update={"requests": out, "summary": summarize(out)})


def noisy_gaps(seed: int, n: int = 40, tokens: int = 32, tpot: float = 80.0, slower: float = 0.0, bursts=()):
    """Per request: gaps of ``tpot`` ms with 2% noise, ``slower`` times longer; in requests ``bursts`` (index ->
    first position) five consecutive gaps hit tenfold."""
    rng = random.Random(seed)
    table = []
    for i in range(n):
        gaps = [tpot * (1 + slower) * (1 + rng.uniform(-0.02, 0.02)) for _ in range(tokens - 1)]
        if i in dict(bursts):
            at = dict(bursts)[i]
            gaps[at : at + 5] = [g * 10 for g in gaps[at : at + 5]]
        table.append(gaps)
    return table.__getitem__


def test_gaps_see_a_slowdown_through_bursts_that_hijack_the_mean():
    base = with_gaps(synthetic_run(n=40), noisy_gaps(1, bursts={3: 0, 17: 10, 30: 20}))
    head = with_gaps(synthetic_run(n=40), noisy_gaps(2, slower=0.05, bursts={5: 2, 9: 4, 22: 25, 35: 12}))
    comp = compare_runs(base, head)
    gaps = comp.row("tpot_ms", "gaps")
    assert gaps.change_pct == pytest.approx(5.0, abs=0.6) and gaps.significant
    assert (gaps.ci_high_pct - gaps.ci_low_pct) / 2 < 1.0  # a tight interval despite the bursts
    mean = comp.row("tpot_ms", "mean")
    assert (mean.ci_high_pct - mean.ci_low_pct) / 2 > 2 * (gaps.ci_high_pct - gaps.ci_low_pct) / 2
    (tpot,) = [c for c in comp.gate(fail_on_regression=3, stat="gaps") if c.metric == "tpot_ms"]
    assert tpot.stat == "gaps" and tpot.regression
    # TTFT and E2E are gated on their median when the statistic is gaps
    assert {c.metric: c.stat for c in comp.checks(fail_on_regression=3, stat="gaps")} == {
        "ttft_ms": "p50", "tpot_ms": "gaps", "e2e_ms": "p50"}  # fmt: skip


def test_an_a_a_with_bursts_is_no_change():
    base = with_gaps(synthetic_run(n=40), noisy_gaps(3, bursts={1: 0, 2: 3}))
    head = with_gaps(synthetic_run(n=40), noisy_gaps(4, bursts={7: 9, 30: 1, 31: 20}))
    gaps = compare_runs(base, head).row("tpot_ms", "gaps")
    assert not gaps.significant and abs(gaps.change_pct) < 0.5
    assert compare_runs(base, head).gate(fail_on_regression=2, stat="gaps") == []


def test_processes_that_disagree_are_noise_not_a_change():
    # four processes a side; the head's processes differ from the base's by -4%, +5%, -3%, +4%: no agreement
    offsets = [-0.04, 0.05, -0.03, 0.04]
    procs = [i % 4 for i in range(40)]
    base = with_gaps(synthetic_run(n=40), noisy_gaps(5), procs)
    table = noisy_gaps(6)
    head = with_gaps(synthetic_run(n=40), lambda i: [g * (1 + offsets[procs[i]]) for g in table(i)], procs)
    gaps = compare_runs(base, head).row("tpot_ms", "gaps")
    assert not gaps.significant and gaps.ci_low_pct < 0 < gaps.ci_high_pct
    # without the process labels, a bootstrap over pairs gives a far narrower interval: it can't see the processes
    shifted = with_gaps(synthetic_run(n=40), lambda i: [g * (1 + offsets[procs[i]]) for g in table(i)])
    unlabeled = compare_runs(with_gaps(synthetic_run(n=40), noisy_gaps(5)), shifted).row("tpot_ms", "gaps")
    assert unlabeled.ci_high_pct - unlabeled.ci_low_pct < (gaps.ci_high_pct - gaps.ci_low_pct) / 2


def test_gaps_need_paired_runs_with_stamps():
    base = with_gaps(synthetic_run(n=10), noisy_gaps(7, n=10))
    other = base.model_copy(update={"config": base.config.model_copy(update={"prompt_sha256": "1" * 64})})
    comp = compare_runs(base, other)
    assert comp.row("tpot_ms", "gaps") is None
    with pytest.raises(UserError, match="gaps pairs TPOT's token gaps by position"):
        comp.checks(fail_on_regression=5, stat="gaps")


def bundled(gaps_of, sizes):
    """``gaps_of`` with its tokens arriving in bundles (an HTTP relay's reads, speculative decoding's accepted
    drafts): a bundle of k tokens is released when its last is ready, so its first gap carries the k true gaps'
    sum and the other k - 1 are zero. ``sizes(i)``: request i's bundle sizes, used in turn."""

    def out(i):
        gaps, sizes_i, at, k = list(gaps_of(i)), sizes(i), 0, 0
        result = []
        while at < len(gaps):
            size = sizes_i[k % len(sizes_i)]
            group = gaps[at : at + size]
            result += [sum(group)] + [0.0] * (len(group) - 1)
            at, k = at + size, k + 1
        return result

    return out


def every(k):
    return lambda i: [k]


def irregular(seed):
    """Bundle sizes 1 to 4 drawn per request, as accepted drafts of speculative decoding come."""
    return lambda i: [random.Random(seed * 1000 + i).randint(1, 4) for _ in range(32)]


UNBUNDLED = every(1)


@pytest.mark.parametrize(
    ("base_sizes", "head_sizes"),
    [(UNBUNDLED, every(4)), (every(3), UNBUNDLED), (every(2), every(5)), (irregular(1), irregular(2))],
    ids=["head-bundled", "base-bundled", "both-bundled", "both-irregular"],
)
def test_a_slower_head_is_slower_whichever_side_bundles_its_tokens(base_sizes, head_sizes):
    # a 20% slower head, with zero gaps on one side or both: "100% faster" and a pass before the fix
    base = with_gaps(synthetic_run(n=40), bundled(noisy_gaps(10), base_sizes))
    head = with_gaps(synthetic_run(n=40), bundled(noisy_gaps(11, slower=0.2), head_sizes))
    gaps = compare_runs(base, head).row("tpot_ms", "gaps")
    assert gaps.verdict == "slower" and gaps.change_pct == pytest.approx(20.0, abs=1.0), gaps
    assert gaps.ci_low_pct > 15
    (tpot,) = [c for c in compare_runs(base, head).gate(fail_on_regression=5, stat="gaps") if c.metric == "tpot_ms"]
    assert tpot.regression


@pytest.mark.parametrize(
    ("base_sizes", "head_sizes"),
    [(every(3), UNBUNDLED), (UNBUNDLED, every(4)), (irregular(3), irregular(4))],
    ids=["base-bundled", "head-bundled", "both-irregular"],
)
def test_an_a_a_with_bundled_tokens_is_no_change(base_sizes, head_sizes):
    base = with_gaps(synthetic_run(n=40), bundled(noisy_gaps(12), base_sizes))
    head = with_gaps(synthetic_run(n=40), bundled(noisy_gaps(13), head_sizes))
    comp = compare_runs(base, head)
    gaps = comp.row("tpot_ms", "gaps")
    assert not gaps.significant and abs(gaps.change_pct) < 0.5, gaps
    assert comp.gate(fail_on_regression=2, stat="gaps") == []


def test_gaps_weigh_every_token_as_tpot_does_not_the_typical_position():
    # speculative decoding: every step takes 30 ms and yields 1, 3, 3 tokens in turn, so 6 tokens in 7 come 10 ms
    # "apart" and TPOT is 90/7 = 12.86 ms; the base decodes one token every 10 ms. The head is 28.6% slower,
    # though a median over positions would call it faster (-100% raw, 0% with each bundle's wait spread over its
    # tokens).
    def steps(i):
        rng, gaps = random.Random(100 + i), []
        for size in [1, 3, 3] * 5:
            gaps += [30.0 * (1 + rng.uniform(-0.02, 0.02))] + [0.0] * (size - 1)
        return gaps

    base = with_gaps(synthetic_run(n=20), noisy_gaps(14, n=20, tokens=36, tpot=10.0))
    head = with_gaps(synthetic_run(n=20), steps)
    gaps = compare_runs(base, head).row("tpot_ms", "gaps")
    assert gaps.verdict == "slower" and gaps.change_pct == pytest.approx(100 * (90 / 7 / 10 - 1), abs=1.0), gaps


def test_gaps_treat_base_and_head_alike():
    """Swapped, the change is the reciprocal: (1 + c(base, head)) * (1 + c(head, base)) == 1, pairs even or odd,
    zero gaps on either side."""
    for n in (40, 39):
        base = with_gaps(synthetic_run(n=n), bundled(noisy_gaps(16, n=n), irregular(5)))
        head = with_gaps(synthetic_run(n=n), bundled(noisy_gaps(17, n=n, slower=0.1), every(3)))
        there = compare_runs(base, head).row("tpot_ms", "gaps")
        back = compare_runs(head, base).row("tpot_ms", "gaps")
        assert (1 + there.change_pct / 100) * (1 + back.change_pct / 100) == pytest.approx(1.0, abs=1e-9)
        assert there.n_base == there.n_new == n  # every pair is used: none has a span of zero


def test_a_pair_whose_tokens_all_came_at_once_measured_no_decode_time():
    # a relay that buffered one whole answer and sent it with the first token: no decode time in its stamps, so
    # that pair says nothing (skipped, on either side alike); two answers sent whole after a wait still count
    slow = noisy_gaps(19, n=10, slower=0.2)
    base = with_gaps(synthetic_run(n=10), noisy_gaps(18, n=10))
    head = with_gaps(synthetic_run(n=10), bundled(lambda i: [0.0] * 31 if i == 0 else slow(i),
                                                  lambda i: [31] if i < 3 else [1]))  # fmt: skip
    assert head.requests[0].tpot_ms is None and head.requests[1].tpot_ms is not None
    gaps = compare_runs(base, head).row("tpot_ms", "gaps")
    assert gaps.n_base == gaps.n_new == 9 and gaps.verdict == "slower"
    assert gaps.change_pct == pytest.approx(20.0, abs=1.0)
