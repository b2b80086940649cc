"""The gate statistic ``gaps``: TPOT from per-token gaps paired by position. Ground truth from runs built with
known gaps: a uniform slowdown, bursts that hit a few tokens of a few requests, processes that disagree."""

from __future__ import annotations

import random
import re
import subprocess
import sys

import pytest

from llmbench.compare import compare_runs
from llmbench.errors import UserError
from llmbench.metrics import ids_sha256, request_result, summarize
from llmbench.storage import save_run
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


@pytest.mark.subprocess
def test_compare_cli_gates_on_gaps_from_the_files(tmp_path):
    base = with_gaps(synthetic_run(n=40), noisy_gaps(8, bursts={4: 0}))
    head = with_gaps(synthetic_run(n=40), noisy_gaps(9, slower=0.06, bursts={11: 3, 12: 8}))
    save_run(base, tmp_path / "base.json")
    save_run(head, tmp_path / "head.json")
    args = [sys.executable, "-m", "llmbench", "compare", str(tmp_path / "base.json"), str(tmp_path / "head.json"),
            "--fail-on-regression", "4", "--gate-stat", "gaps"]  # fmt: skip
    r = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert r.returncode == 1, r.stderr
    assert re.search(r"gate tpot_ms gaps: \+[56]\.\d%, 95% CI \+[56]\.\d\.\.\+[56]\.\d%, threshold 4%: REGRESSION",
                     r.stdout)  # fmt: skip
    assert "TPOT (gaps)" in r.stdout  # the detectable change is the gate's own statistic's
    ok = subprocess.run([*args[:-4], "--fail-on-regression", "8", "--gate-stat", "gaps"], capture_output=True,
                        text=True, timeout=60)  # fmt: skip
    assert ok.returncode == 0 and "Traceback" not in ok.stderr
