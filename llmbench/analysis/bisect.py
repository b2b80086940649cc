"""Which commit made it slower: a binary search whose every step is a measurement with an interval, not one
number (``llmbench bisect``; the driver measures, this module decides).

Each commit c_i of GOOD..BAD (a chain of parents: BAD's first-parent line, through the parent that leads to GOOD
where a merge's first does not; oldest first; c_0 = GOOD; a merge is one step, its branch's commits not visited)
is measured against **GOOD**, not its neighbour, so one cutoff keeps its meaning along the whole search and a
creep stays visible: f(i) is the metric's change in percent with a 95% interval [lo, hi] over processes (``ab``'s
statistics). BAD is measured first, giving D (its change); it must be a regression the gate would call (lo > 0 and
D > the threshold).

The rule at a cutoff c (the search for the first commit past D/2 uses c = D/2):

- bad when lo > c; good when hi < c; unsure otherwise.

It is the symmetric test between "no change" and "all of D" (the SPRT boundary for normal means), unlike the
gate's one-sided "significant and over the threshold": a wrong call needs the truth a whole half-width beyond c,
so adding looks turns unsure steps into decisions rather than errors (Pinpoint adds attempts to an UNKNOWN
comparison in the same way). An unsure commit gets another look (the looks pooled) while the pairs it would
need, n * (half-width / |change - c|)^2, fit its budget of looks; past that it stays unsure (a futility stop) and the
search goes on by its point estimate, the step flagged ``forced``. A commit that can't be built or run is
skipped with its reason and the nearest untried one in the range taken instead (git bisect's 125).

The answer: the first commit past D/2, verified against its own parent side by side. When that change alone is
past D/2 it is named (``commit``); otherwise no single commit holds it (a creep) and the answer is the stretch
from the first commit past D/4 to the first past 3D/4 (``stretch``), found by the same search at those cutoffs,
reusing every measurement. When skipped commits leave no way to tell, the candidates are named (``candidates``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

State = Literal["good", "bad", "unsure", "skipped"]
AnswerKind = Literal["commit", "stretch", "candidates", "none"]


class CommitFailed(Exception):
    """A commit that can't be built or run (the measurer raises it): skipped, with its reason."""


class TooManySkips(Exception):
    """More commits failed than the search may skip: it gives up rather than guess."""


@dataclass(frozen=True)
class Look:
    """A commit's change against GOOD, in percent, with its 95% interval, pooled over every look so far."""

    change_pct: float
    ci_low: float
    ci_high: float
    pairs: int

    @property
    def half_width(self) -> float:
        """Half the interval's width, in percentage points."""
        return (self.ci_high - self.ci_low) / 2


def classify(look: Look, cutoff: float) -> State:
    """bad when the whole interval is above ``cutoff``, good when it is below, else unsure (a NaN bound too)."""
    if not (math.isfinite(look.ci_low) and math.isfinite(look.ci_high)):
        return "unsure"
    if look.ci_low > cutoff:
        return "bad"
    if look.ci_high < cutoff:
        return "good"
    return "unsure"


def pairs_needed(look: Look, cutoff: float) -> float:
    """The pairs a decision at ``cutoff`` would take, if the change stays where it is: the half-width shrinks as
    1/sqrt(pairs), so n * (half-width / |change - cutoff|)^2; infinite when the change sits on the cutoff."""
    gap = abs(look.change_pct - cutoff)
    if not math.isfinite(look.half_width) or not math.isfinite(gap) or gap == 0:
        return math.inf
    return look.pairs * (look.half_width / gap) ** 2


@dataclass
class Commit:
    """One commit of the search: its looks (each pooled over those before), or why it was skipped."""

    sha: str
    looks: list[Look] = field(default_factory=list)
    skipped: str | None = None

    @property
    def last(self) -> Look | None:
        """The pooled measurement so far (None before the first look)."""
        return self.looks[-1] if self.looks else None


@dataclass
class Decision:
    """A commit's state at one cutoff; ``forced`` when the budget ended unsure and the point estimate chose."""

    index: int
    cutoff: float
    state: State
    forced: bool = False

    @property
    def past(self) -> bool:
        """Whether the search treats the commit as past the cutoff (bad, or unsure with its estimate above)."""
        return self.state == "bad"


@dataclass
class Answer:
    """Where the change came in: a commit, a stretch of commits, candidates among skipped ones, or none."""

    kind: AnswerKind
    first: int | None = None  # the commit (index into the search's commits), or the stretch's first
    last: int | None = None  # the stretch's last (== first for a commit)
    reason: str = ""


Measure = Callable[[int, int], Look]  # (commit index, look number) -> the pooled Look; raises CommitFailed


class Search:
    """The commits GOOD..BAD and what has been measured of them. ``commits[0]`` is GOOD (never measured: its
    change against itself is 0 by construction), ``commits[-1]`` is BAD. ``max_looks`` bounds the looks one
    commit may take (pooled; each look is one ``ab`` of the same design); ``max_skips`` the commits that may fail
    before it gives up."""

    def __init__(
        self, shas: list[str], measure: Measure, max_looks: int = 3, max_skips: int = 5,
        on_change: Callable[[], object] | None = None,
    ) -> None:  # fmt: skip
        if len(shas) < 2:
            raise ValueError("a search needs GOOD and at least one commit after it")
        self.commits = [Commit(s) for s in shas]
        self.measure = measure
        if max_looks < 1:
            raise ValueError("a commit needs at least one look")
        self.max_looks = max_looks
        self.max_skips = max_skips
        self.decisions: list[Decision] = []
        self.own: dict[int, Commit] = {}  # a commit against its own parent (the verification)
        self.on_change = on_change  # called after every look, skip and decision (bisect.json is rewritten)

    @property
    def skips(self) -> int:
        """How many commits could not be built or run."""
        return sum(c.skipped is not None for c in self.commits)

    def look_until_decided(self, index: int, cutoff: float) -> Decision:
        """Commit ``index`` at ``cutoff``: its pooled looks, more while an undecided one could be decided within
        its budget. A commit that fails is marked skipped (CommitFailed's reason)."""
        return self._keep(self._decide(self.commits[index], index, cutoff, self.measure))

    def own_change(self, index: int, cutoff: float, verify: Measure) -> tuple[Decision, Look | None]:
        """Commit ``index`` against its own parent (``verify``: the two side by side), by the same rule."""
        c = self.own.setdefault(index, Commit(self.commits[index].sha))
        return self._decide(c, index, cutoff, verify), c.last

    def _decide(self, c: Commit, index: int, cutoff: float, measure: Measure) -> Decision:
        while c.skipped is None:
            look = c.last
            if look is not None:
                state = classify(look, cutoff)
                if state != "unsure":
                    return Decision(index, cutoff, state)
                budget = look.pairs / len(c.looks) * self.max_looks  # the pairs all its looks would hold
                if len(c.looks) >= self.max_looks or pairs_needed(look, cutoff) > budget:
                    forced: State = "bad" if look.change_pct > cutoff else "good"
                    return Decision(index, cutoff, forced, forced=True)
            try:
                c.looks.append(measure(index, len(c.looks)))
            except CommitFailed as e:
                c.skipped = str(e) or "failed"
            self.changed()
        return Decision(index, cutoff, "skipped")

    def _keep(self, d: Decision) -> Decision:
        self.decisions.append(d)
        self.changed()
        return d

    def changed(self) -> None:
        """Tell ``on_change`` the search moved (a look, a skip, a decision)."""
        if self.on_change is not None:
            self.on_change()

    def first_past(self, cutoff: float, lo: int = 0, hi: int | None = None) -> tuple[int, int]:
        """The binary search for the first commit past ``cutoff`` between ``lo`` (known not past) and ``hi``
        (known past; default BAD): (lo, hi) at the end, hi == lo + 1 unless skipped commits fill the gap between
        them. Each probe is the middle, or its nearest untried neighbour when the middle was skipped."""
        hi = len(self.commits) - 1 if hi is None else hi
        while hi - lo > 1:
            probe = self._probe(lo, hi)
            if probe is None:
                break  # only skipped commits between lo and hi
            if self.skips > self.max_skips:
                raise TooManySkips(f"more than {self.max_skips} commits failed to build or run")
            d = self.look_until_decided(probe, cutoff)
            if d.state == "skipped":
                continue
            if d.past:
                hi = probe
            else:
                lo = probe
        return lo, hi

    def _probe(self, lo: int, hi: int) -> int | None:
        """The middle of (lo, hi), else the nearest commit to it that wasn't skipped (m+1, m-1, m+2, ...)."""
        mid = (lo + hi) // 2
        for k in range(hi - lo):
            for i in (mid + k, mid - k) if k else (mid,):
                if lo < i < hi and self.commits[i].skipped is None:
                    return i
        return None


def bisect(search: Search, change_of_bad: Look, verify: Measure) -> Answer:
    """The search at D/2 (D = BAD's change against GOOD), the first bad commit verified against its parent
    (``verify(k, look)``: c_{k-1} against c_k, side by side, pooled like the search's looks), and for a creep
    the stretch from the first commit past D/4 to the first past 3D/4."""
    d = change_of_bad.change_pct
    lo, hi = search.first_past(d / 2)
    if hi - lo > 1:
        return Answer("candidates", lo + 1, hi, "the commits between could not be built or run")
    decision, own = search.own_change(hi, d / 2, verify)
    shown = f"{own.change_pct:+.2f}% [{own.ci_low:+.2f}, {own.ci_high:+.2f}]" if own else "not measured"
    if decision.state == "bad":
        return Answer("commit", hi, hi, f"its own change {shown} is past half of {d:+.2f}%")
    start, _ = search.first_past(d / 4, 0, hi)
    _, end = search.first_past(3 * d / 4, hi - 1)
    if end <= start + 1:
        return Answer("commit", start + 1, start + 1, f"the only commit between a quarter and three quarters of "
                                                      f"{d:+.2f}% (its own change {shown})")  # fmt: skip
    return Answer("stretch", start + 1, end, f"no single commit holds it: its own change {shown} at the first "
                                             f"past half of {d:+.2f}%")  # fmt: skip
