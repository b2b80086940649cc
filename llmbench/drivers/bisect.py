"""``llmbench bisect``'s measuring: each commit of GOOD..BAD checked out (:mod:`llmbench.drivers.checkout`) and
measured against GOOD with ``ab``, the looks of one commit pooled, and the search of
:mod:`llmbench.analysis.bisect` fed with the pooled intervals. Everything lands in one folder:

    OUT/bisect.json                 the search as it stands (rewritten after every look: an interrupted bisect
                                    keeps its looks and goes on from them when run again with the same OUT)
    OUT/<sha12>/look-<j>/           each look's ab folder (base.json = GOOD, head.json = the commit)
    OUT/<sha12>/own-<j>/            the first bad commit against its own parent, side by side
    OUT/trees/<sha12>/              the worktrees (removed at the end unless ``keep_trees``)
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmbench.analysis import bisect as rule
from llmbench.core.errors import UserError
from llmbench.drivers import checkout
from llmbench.drivers.ab import Design
from llmbench.options import RunOptions
from llmbench.results.schema import Run
from llmbench.workloads.prompts import PromptSet

BISECT_VERSION = 1
LOOK_STRIDE = 10_000  # look j's pairs are numbered repeat + j * LOOK_STRIDE when the looks are pooled


MAX_THRESHOLD_PCT = 10_000.0  # a 100x slowdown: past it a bisect needs no statistics
MAX_LOOKS = 100  # looks at one commit, each minutes of measuring
MAX_SKIPS = 10_000  # commits that may fail to build: more than any bisect walks


@dataclass
class Settings:
    """What a bisect measures and how long it may look: the gate's metric, statistic and threshold, the worker's
    options (``llmbench worker ...`` after ``worker``), each look's ab design, and the looks per commit."""

    metric: str = "tpot_ms"
    stat: str = "gaps"
    threshold_pct: float = 2.0
    worker: str = "--weights random --dtype bfloat16 --threads 1"
    design: Design = field(default_factory=lambda: Design(duet=True, budget_s=240.0))
    max_looks: int = 3
    max_skips: int = 5
    build: str | None = None
    keep_trees: bool = False

    def validate(self) -> None:
        """UserError for a setting no bisect can use, before anything is checked out (docs/limits.md)."""
        if not (math.isfinite(self.threshold_pct) and 0 < self.threshold_pct <= MAX_THRESHOLD_PCT):
            raise UserError(f"--threshold must be a percentage above 0, at most {MAX_THRESHOLD_PCT:g}, not "
                            f"{self.threshold_pct}")  # fmt: skip
        for name, value, most in (("--max-looks", self.max_looks, MAX_LOOKS), ("--max-skips", self.max_skips,
                                                                               MAX_SKIPS)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
                raise UserError(f"{name} must be a whole number from 1 to {most:,}, not {value!r}")
        self.design.validate()


def measured_with(settings: Settings, prompts: PromptSet, options: RunOptions) -> dict[str, Any]:
    """Everything that shapes a look's runs (not the metric, statistic or threshold: those only read them): the
    worker's options, the build command, the prompts' content, the run options and the ab design. Saved in
    bisect.json; looks measured with anything else are never pooled with new ones."""
    return json.loads(json.dumps({"worker": settings.worker, "build": settings.build, "prompts": prompts.sha256,
                                  "options": options.model_dump(), "design": asdict(settings.design)}))  # fmt: skip


def measured_with_key(settings: Settings, prompts: PromptSet, options: RunOptions) -> str:
    """A short hash of :func:`measured_with` (bisect-step's folders are named by it: other settings, other looks)."""
    text = json.dumps(measured_with(settings, prompts, options), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def pool(runs: list[Run]) -> Run:
    """One run of several looks' runs (one side): look j's requests renumbered (repeat + j * LOOK_STRIDE, its
    processes after the earlier looks'), so pairs stay keyed and processes stay clusters."""
    requests, ttft, offset = [], [], 0
    for j, run in enumerate(runs):
        n = max([r.process or 0 for r in run.requests + run.ttft_requests] + [0]) + 1

        def moved(r: Any, j: int = j, offset: int = offset) -> Any:
            process = None if r.process is None else r.process + offset
            return r.model_copy(update={"repeat": r.repeat + j * LOOK_STRIDE, "process": process})

        requests += [moved(r) for r in run.requests]
        ttft += [moved(r) for r in run.ttft_requests]
        offset += n
    return runs[0].model_copy(update={"requests": requests, "ttft_requests": ttft})


OnLook = Callable[[Run, Run, Path, str, str], None]  # (base, head, folder, base sha, head sha): after each look


class Bisector:
    """One bisect's state: the commits, their trees and interpreters, the looks on disk, the search."""

    def __init__(
        self,
        repo: Path,
        good: str,
        bad: str,
        prompts: PromptSet,
        options: RunOptions,
        settings: Settings,
        out: Path,
        *,
        reporter: Any = None,
        stop: Any = None,
        on_look: OnLook | None = None,
        trees: Path | None = None,
        pair: bool = False,
    ) -> None:
        settings.validate()
        options.check()
        settings.design.check_plan(len(prompts.prompts))  # each look is an ab of this plan, held in memory
        self.repo, self.prompts, self.options, self.settings, self.out = repo, prompts, options, settings, out
        # pair: just GOOD and BAD (bisect-step's judge: git bisect checks out commits that need not descend
        # from GOOD, on merged branches or the merge base, and each is judged on its own against GOOD)
        self.shas = _pair(repo, good, bad) if pair else checkout.commits_between(repo, good, bad)
        self.measured_with = measured_with(settings, prompts, options)
        self.reporter, self.stop, self.on_look = reporter, stop, on_look
        self.trees = trees or out / "trees"  # bisect-step's steps share one place
        self.subjects = [checkout.subject(repo, sha) for sha in self.shas]
        self.workers: dict[str, str] = {}
        self.search = rule.Search(self.shas, self._measure, max_looks=settings.max_looks,
                                  max_skips=settings.max_skips, on_change=self.save)  # fmt: skip
        self.t0 = time.perf_counter()
        self._check_folder()

    def _check_folder(self) -> None:
        """A folder that holds another bisect's looks (other GOOD or BAD), or looks measured with other settings
        (worker, build, prompts, run options, design), is refused: its looks would be pooled with this one's."""
        path = self.out / "bisect.json"
        if not path.is_file():
            return
        try:
            old = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            raise UserError(f"{path} can't be read: {e}") from None
        ends = (old.get("good"), old.get("bad")) if isinstance(old, dict) else (None, None)
        if ends not in ((self.shas[0], self.shas[-1]), (None, None)):
            raise UserError(f"{self.out} holds a bisect of {str(old.get('good'))[:12]}..{str(old.get('bad'))[:12]}, "
                            f"not {self.shas[0][:12]}..{self.shas[-1][:12]}: choose another -o")  # fmt: skip
        before = old.get("measured_with") if isinstance(old, dict) else None
        if before != self.measured_with:
            differs = sorted(k for k in self.measured_with if not isinstance(before, dict)
                             or before.get(k) != self.measured_with[k])  # fmt: skip
            what = f"other {', '.join(differs)}" if isinstance(before, dict) else "settings it did not record"
            raise UserError(f"{self.out} holds looks measured with {what}: go on with the same options, or "
                            "choose another -o")  # fmt: skip

    # -------------------------------------------------------------------------------------------- a commit

    def worker(self, sha: str) -> str:
        """The ab side that runs ``sha`` (its tree checked out, built, an interpreter found); CommitFailed."""
        if sha not in self.workers:
            try:
                tree = checkout.ensure_tree(self.repo, sha, self.trees)
                checkout.build(self.settings.build, tree)
                python = checkout.ensure_python(self.repo, sha)
            except (rule.CommitFailed, UserError):
                self._check_stop()  # Ctrl-C reaches the build too: its failure is the interrupt, not a skip
                raise
            self.workers[sha] = checkout.worker_command(python, tree, self.settings.worker)
        self._check_stop()
        return self.workers[sha]

    def _check_stop(self) -> None:
        """RunInterrupted once a stop was asked for (SIGINT, SIGTERM): nothing after it is measured or skipped."""
        if self.stop is not None and self.stop.requested:
            from llmbench.core.errors import RunInterrupted

            raise RunInterrupted([], self.out, str(self.stop.signal))

    def _look(self, folder: Path, base_sha: str, head_sha: str) -> tuple[Run, Run]:
        """One ab of head against base into ``folder`` (kept from an earlier bisect when it is complete there)."""
        from llmbench.drivers.ab import ab
        from llmbench.results.storage import load_run

        if folder.exists():
            try:
                base, head = load_run(folder / "base.json"), load_run(folder / "head.json")
                if base.complete and head.complete:
                    return base, head
            except (OSError, UserError, ValueError):
                pass  # half a pair (one side's file, or none): ab would refuse the folder, and resume never pass it
            folder.rename(folder.with_name(f"{folder.name}.interrupted-{time.time_ns()}"))  # kept, not lost
        try:
            base_side = self.worker(base_sha)
        except (rule.CommitFailed, UserError) as e:
            raise UserError(f"{base_sha[:12]}, the base of every look, can't be set up: {e}") from None
        try:
            head_side = self.worker(head_sha)
        except UserError as e:
            raise rule.CommitFailed(str(e)) from None
        if self.reporter is not None:
            self.reporter.status(f"bisect: {head_sha[:12]} against {base_sha[:12]} -> {folder}")
        try:
            base, head, _ = asyncio.run(ab(self.prompts, base_side, head_side, self.options, folder, stop=self.stop,
                                           reporter=self.reporter, design=self.settings.design))  # fmt: skip
        except UserError as e:
            if not str(e).startswith("head: "):
                raise  # the base side, the machine, the options: nothing a skip would fix
            raise rule.CommitFailed(str(e).removeprefix("head: ")) from None
        if self.on_look is not None:
            self.on_look(base, head, folder, base_sha, head_sha)
        return base, head

    def _pooled(self, looks: list[tuple[Run, Run]]) -> rule.Look:
        from llmbench.analysis.compare import compare_runs

        comp = compare_runs(pool([b for b, _ in looks]), pool([h for _, h in looks]))
        row = comp.row(self.settings.metric, self.settings.stat)
        if row is None:
            raise UserError(f"the runs have no {self.settings.metric} {self.settings.stat} row to bisect on")
        return rule.Look(row.change_pct, row.ci_low_pct, row.ci_high_pct, comp.n_pairs)

    def _measure(self, index: int, look: int) -> rule.Look:
        sha = self.shas[index]
        runs = [self._look(self.out / sha[:12] / f"look-{j}", self.shas[0], sha) for j in range(look + 1)]
        return self._pooled(runs)

    def _verify(self, index: int, look: int) -> rule.Look:
        sha, parent = self.shas[index], self.shas[index - 1]
        if index == 1:  # its parent is GOOD: the search's own looks are this comparison
            return self._measure(index, look)
        runs = [self._look(self.out / sha[:12] / f"own-{j}", parent, sha) for j in range(look + 1)]
        return self._pooled(runs)

    # ---------------------------------------------------------------------------------------------- the run

    def run(self) -> dict[str, Any]:
        """The whole bisect: BAD against GOOD, the search, the verification; the record (also in bisect.json)."""
        try:
            d = self._bad_change()
            if not (d.ci_low > 0 and d.change_pct > self.settings.threshold_pct):
                self.answer = rule.Answer("none", reason=f"BAD against GOOD: {_shown(d)}, not a regression past "
                                                         f"{self.settings.threshold_pct:g}%")  # fmt: skip
            else:
                try:
                    self.answer = rule.bisect(self.search, d, self._verify)
                except rule.TooManySkips as e:
                    raise UserError(str(e)) from None
                self.answer = self._merges_said(self.answer)
            record = self.save()
        except BaseException:  # a failure or an interrupt too: the user's `git worktree list` must not grow
            if not self.settings.keep_trees:
                with contextlib.suppress(UserError):  # git's complaint must not hide why the bisect ended
                    checkout.remove_trees(self.repo, self.trees)
            raise
        if not self.settings.keep_trees:
            checkout.remove_trees(self.repo, self.trees)
        return record

    def _merges_said(self, answer: rule.Answer) -> rule.Answer:
        """The answer, saying which of its commits are merges: the chain takes a merge's branch in one step (the
        merge), so a merge named means the change is its own or came in with the commits it merged; the reason
        says how to look inside."""
        if answer.first is None or answer.last is None:
            return answer
        notes = []
        for i in range(answer.first, answer.last + 1):
            sha, own = self.shas[i], self.shas[i - 1]
            others = [p for p in checkout.parents(self.repo, sha) if p != own]
            if others:
                looks = "; ".join(f"llmbench bisect {checkout.git(self.repo, 'merge-base', own, p)[:12]} {p[:12]}"
                                  for p in others)  # fmt: skip
                notes.append(f"{sha[:12]} is a merge of {len(others) + 1} parents: the change is its own or came in "
                             f"with the commits it merged (to find which: {looks})")  # fmt: skip
        if not notes:
            return answer
        return dataclasses.replace(answer, reason=f"{answer.reason}; {'; '.join(notes)}")

    def _bad_change(self) -> rule.Look:
        """BAD against GOOD, looked at again (up to ``max_looks``) while it is neither clearly past the threshold
        (lo > 0 and the change above it) nor clearly under it (hi below it)."""
        bad, t = self.search.commits[-1], self.settings.threshold_pct
        while True:
            try:
                bad.looks.append(self._measure(len(self.shas) - 1, len(bad.looks)))
            except rule.CommitFailed as e:
                raise UserError(f"BAD ({self.shas[-1][:12]}) can't be measured: {e}") from None
            self.save()
            d = bad.looks[-1]
            decided = (d.ci_low > 0 and d.change_pct > t) or d.ci_high < t or not math.isfinite(d.ci_high)
            if decided or len(bad.looks) >= self.settings.max_looks:
                return d

    def save(self) -> dict[str, Any]:
        """bisect.json as it stands (written whole through a temporary file)."""
        from llmbench.results.storage import write_record

        answer = getattr(self, "answer", None)
        commits = []
        for i, (sha, c) in enumerate(zip(self.shas, self.search.commits, strict=True)):
            own = self.search.own.get(i)
            commits.append({"index": i, "sha": sha, "subject": self.subjects[i],
                            "skipped": c.skipped, "looks": [asdict(x) for x in c.looks],
                            "own": [asdict(x) for x in own.looks] if own else []})  # fmt: skip
        record = {
            "bisect_version": BISECT_VERSION,
            "good": self.shas[0],
            "bad": self.shas[-1],
            "metric": self.settings.metric,
            "stat": self.settings.stat,
            "threshold_pct": self.settings.threshold_pct,
            "measured_with": self.measured_with,
            "bad_change": asdict(self.search.commits[-1].looks[-1]) if self.search.commits[-1].looks else None,
            "decisions": [asdict(x) for x in self.search.decisions],
            "commits": commits,
            "answer": asdict(answer) if answer else None,
            "wall_s": round(time.perf_counter() - self.t0, 1),
        }
        write_record(self.out / "bisect.json", json.loads(json.dumps(record, allow_nan=True), parse_constant=_nan))
        return record


def _pair(repo: Path, good: str, bad: str) -> list[str]:
    """[GOOD, BAD] as full shas, whatever their ancestry (bisect-step's judge)."""
    return [checkout.git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}") for ref in (good, bad)]


def _nan(name: str) -> None:
    """NaN and infinities (an interval a single process can't give) are written as null: JSON has no NaN."""
    return None


def _shown(look: rule.Look) -> str:
    return f"{look.change_pct:+.2f}% [{look.ci_low:+.2f}, {look.ci_high:+.2f}]"


def prepare_folder(out: Path | None, resume: bool, good: str, bad: str, settings: Settings) -> Path:
    """The bisect's folder: new (``results/bisect-<time>`` by default), or with ``resume`` one that holds a bisect
    of the same GOOD, BAD and settings (its finished looks are reused)."""
    from llmbench.results.storage import claim, prepare_driver_dir

    if not resume:
        return prepare_driver_dir(out, "bisect")
    if out is None or not (out / "bisect.json").is_file():
        raise UserError("--resume goes on with a bisect: give its folder with -o (it holds bisect.json)")
    try:
        old = json.loads((out / "bisect.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{out / 'bisect.json'} can't be read: {e}") from None
    if not isinstance(old, dict) or old.get("bisect_version") != BISECT_VERSION:
        raise UserError(f"{out / 'bisect.json'} is not a bisect record of version {BISECT_VERSION}")
    asked = {"metric": settings.metric, "stat": settings.stat, "threshold_pct": settings.threshold_pct}
    differs = [k for k, v in asked.items() if old.get(k) != v]
    if differs:
        raise UserError(f"{out} holds a bisect with other {', '.join(differs)}: resume it with the same options")
    try:
        claim(out / "bisect.json", replace=True)
    except UserError:
        raise UserError(f"{out} is being written by another llmbench bisect") from None
    return out


def step(repo: Path, good: str, bad: str | None, prompts: PromptSet, options: RunOptions, settings: Settings, *,
         reporter: Any = None, stop: Any = None) -> tuple[str, str]:  # fmt: skip
    """``git bisect run``'s judge: the checked-out commit (HEAD) against GOOD at half of ``bad``'s change (measured
    once and kept) or half the threshold; (state, one line). The looks go under the repository's git folder, so
    git's checkouts never touch them, in a folder per GOOD, commit and measuring settings (other settings measure
    again). HEAD need not descend from GOOD (git bisect also checks out merged branches' commits and merge
    bases). Only GOOD's worktree is kept between steps: the others are removed however the step ends."""
    from llmbench.results.storage import prepare_dir

    common = Path(checkout.git(repo, "rev-parse", "--path-format=absolute", "--git-common-dir"))
    head = checkout.git(repo, "rev-parse", "HEAD")
    root = prepare_dir(common / "llmbench-bisect")
    good_sha = checkout.git(repo, "rev-parse", "--verify", f"{good}^{{commit}}")
    key = measured_with_key(settings, prompts, options)
    trees = root / "trees"

    def judge_of(commit: str) -> Bisector:  # each pair in a folder of its own; GOOD's worktree shared by all steps
        sha = checkout.git(repo, "rev-parse", "--verify", f"{commit}^{{commit}}")
        out = prepare_dir(root / f"{good_sha[:12]}-{sha[:12]}-{key}")
        return Bisector(repo, good, sha, prompts, options, settings, out, reporter=reporter, stop=stop,
                        trees=trees, pair=True)  # fmt: skip

    judges: list[Bisector] = []
    try:
        judges.append(judge_of(head))
        cutoff = settings.threshold_pct / 2
        if bad is not None:
            judges.append(judge_of(bad))
            d = judges[-1]._bad_change()  # kept in its folder: measured once for the whole git bisect
            if not (d.ci_low > 0 and d.change_pct > settings.threshold_pct):
                raise UserError(f"BAD against GOOD: {_shown(d)}, not a regression past {settings.threshold_pct:g}%")
            cutoff = d.change_pct / 2
        judge = judges[0]
        decision = judge.search.look_until_decided(len(judge.shas) - 1, cutoff)
    finally:  # git bisect visits many commits: their worktrees must not pile up in `git worktree list`
        for sha in {j.shas[-1] for j in judges} - {good_sha}:
            with contextlib.suppress(UserError):
                checkout.remove_tree(repo, trees / sha[:12])
    c = judge.search.commits[-1]
    shown = _shown(c.last) if c.last else c.skipped
    forced = " (still unsure: skipped)" if decision.forced else ""
    state = "unsure" if decision.forced else decision.state
    return state, f"{head[:12]} against {judge.shas[0][:12]}: {shown} at a cutoff of {cutoff:+.2f}%: {state}{forced}"
