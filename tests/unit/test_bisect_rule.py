"""bisect's decision rule and search (llmbench/analysis/bisect.py) against a simulated measurer whose true change
per commit is known: the ground truth a real machine can't give. Each look draws its pairs' changes from a normal
around the commit's true change and returns the pooled mean with its t interval, as ab does over processes."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from llmbench.analysis.bisect import (
    CommitFailed,
    Look,
    Search,
    TooManySkips,
    bisect,
    classify,
    pairs_needed,
)


class Simulated:
    """Commits with a true change each (percent against GOOD); a look is ``pairs`` draws of sd ``noise``."""

    def __init__(self, truth: list[float], noise: float, pairs: int, seed: int, broken: frozenset[int] = frozenset()):
        self.truth, self.noise, self.pairs = truth, noise, pairs
        self.rng = np.random.default_rng(seed)
        self.samples: dict[int, list[float]] = {}
        self.own: dict[int, list[float]] = {}
        self.broken = broken
        self.looks = 0

    def pooled(self, samples: list[float]) -> Look:
        a = np.asarray(samples)
        half = stats.t.ppf(0.975, a.size - 1) * a.std(ddof=1) / math.sqrt(a.size)
        return Look(float(a.mean()), float(a.mean() - half), float(a.mean() + half), a.size)

    def draw(self, true: float) -> list[float]:
        return list(self.rng.normal(true, self.noise, self.pairs))

    def measure(self, index: int, look: int) -> Look:
        if index in self.broken:
            raise CommitFailed(f"commit {index}: pip install failed")
        self.looks += 1
        self.samples.setdefault(index, []).extend(self.draw(self.truth[index]))
        assert look == len(self.samples[index]) // self.pairs - 1  # looks are numbered as they are pooled
        return self.pooled(self.samples[index])

    def verify(self, k: int, look: int) -> Look:  # c_{k-1} against c_k side by side: their own difference
        self.own.setdefault(k, []).extend(self.draw(self.truth[k] - self.truth[k - 1]))
        return self.pooled(self.own[k])

    def bad(self) -> Look:
        return self.pooled(self.draw(self.truth[-1]))


def step(n: int, at: int, size: float) -> list[float]:
    return [0.0 if i < at else size for i in range(n + 1)]


def run(truth, noise=3.0, pairs=20, seed=0, broken=frozenset(), max_looks=10):
    sim = Simulated(truth, noise, pairs, seed, broken)
    search = Search([f"c{i}" for i in range(len(truth))], sim.measure, max_looks=max_looks)
    return bisect(search, sim.bad(), sim.verify), search, sim


def test_the_rule_decides_only_when_the_interval_clears_the_cutoff():
    assert classify(Look(4.0, 3.0, 5.0, 20), 2.5) == "bad"
    assert classify(Look(1.0, 0.0, 2.0, 20), 2.5) == "good"
    assert classify(Look(2.4, 1.0, 3.8, 20), 2.5) == "unsure"
    assert classify(Look(math.nan, math.nan, math.nan, 1), 2.5) == "unsure"
    assert classify(Look(9.0, 2.0, math.inf, 2), 2.5) == "unsure"
    # the pairs to decide grow as the change nears the cutoff; on it, never
    far, near = Look(4.0, 3.0, 5.0, 20), Look(2.75, 1.75, 3.75, 20)
    assert pairs_needed(far, 2.5) == pytest.approx(20 * (1 / 1.5) ** 2)
    assert pairs_needed(near, 2.5) == pytest.approx(20 * (1 / 0.25) ** 2)
    assert pairs_needed(Look(2.5, 1.0, 4.0, 20), 2.5) == math.inf


def test_a_step_is_found_on_nearly_every_seed_with_few_looks():
    """A 5% step at commit 7 of 16, a pair's change sd 3% (this machine's duet: 2.5-4.9%), 20 pairs a look."""
    found, looks = 0, []
    for seed in range(40):
        answer, _, sim = run(step(16, 7, 5.0), seed=seed)
        found += answer.kind == "commit" and answer.first == 7
        looks.append(sim.looks)
        assert answer.kind in ("commit", "stretch")  # never a wrong single commit named with confidence...
        if answer.kind == "commit":
            assert answer.first == 7, (seed, answer)
    assert found >= 38
    assert max(looks) <= 12 and np.median(looks) <= 6  # 4 probes, most decided in one look


def test_no_commit_is_blamed_for_a_creep():
    """A 5% creep spread evenly over 16 commits: no commit holds half of it, so the answer is a stretch that
    covers the commits where the change crossed a quarter and three quarters of it."""
    truth = [5.0 * i / 16 for i in range(17)]
    for seed in range(10):
        answer, _, _ = run(truth, noise=1.5, seed=seed)
        assert answer.kind == "stretch", (seed, answer)
        assert answer.first <= 6 and answer.last >= 10, (seed, answer)  # D/4 at commit 4, 3D/4 at commit 12
        assert answer.first < answer.last


def test_a_commit_that_fails_is_skipped_and_its_neighbour_taken():
    answer, search, _ = run(step(16, 7, 5.0), broken=frozenset({8}), seed=1)
    assert answer == answer.__class__("commit", 7, 7, answer.reason)
    assert search.commits[8].skipped == "commit 8: pip install failed"
    # the bad commit itself broken: git's "could be any of"
    answer, _, _ = run(step(16, 7, 5.0), broken=frozenset({7}), seed=1)
    assert (answer.kind, answer.first, answer.last) == ("candidates", 7, 8)


def test_too_many_failures_end_the_search():
    with pytest.raises(TooManySkips, match="more than 5 commits"):
        run(step(16, 7, 5.0), broken=frozenset(range(1, 16)))


def test_an_unsure_commit_gets_more_looks_then_stops_by_its_estimate():
    """A commit whose true change sits exactly on the cutoff can't be decided: it is looked at until its
    budget (max_looks) ends, then the search goes on by the estimate, the decision flagged forced."""
    truth = step(4, 2, 4.0)
    truth[1] = 2.0  # on D/2
    _, search, _ = run(truth, noise=3.0, pairs=10, max_looks=6, seed=3)
    on_cutoff = [d for d in search.decisions if d.index == 1]
    assert on_cutoff and on_cutoff[0].forced and 1 <= len(search.commits[1].looks) <= 6
    assert search.commits[1].last.pairs <= 60
