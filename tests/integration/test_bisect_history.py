"""``llmbench bisect`` and ``bisect-step`` in the shapes of history git bisect walks (merges, octopus merges,
commits that must be skipped), what they leave in the user's repository when they fail or are interrupted, and
which saved looks they reuse. Real git in scratch repositories, no measuring: a look is a fake whose change
against GOOD is known (a commit is slow when a planted "slow" commit is in its history), kept on disk per look
folder as the real looks are, so reuse shows as a look not taken again."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from llmbench.analysis import bisect as rule
from llmbench.core.errors import RunInterrupted, UserError
from llmbench.core.process import Stop
from llmbench.drivers import bisect as driver
from llmbench.drivers import checkout
from llmbench.drivers.ab import Design
from llmbench.options import RunOptions
from llmbench.workloads.prompts import PromptSet
from tests.bisect_repo import git

PYPROJECT = '[project]\nname = "x"\nversion = "0"\ndependencies = []\n'
SLOW = 10.0  # percent: every commit that holds a "slow" commit is this much slower than GOOD


class History:
    """A scratch repository built commit by commit; ``sha[name]`` for each commit made."""

    def __init__(self, root: Path) -> None:
        self.repo = root / "repo"
        self.repo.mkdir()
        git(self.repo, "init", "-q", "-b", "main")
        self.sha: dict[str, str] = {}
        self.commit("good", files={"pyproject.toml": PYPROJECT})

    def commit(self, name: str, *, files: dict[str, str] | None = None, slow: bool = False,
               broken: bool = False) -> str:  # fmt: skip
        files = dict(files or {})
        files[f"notes/{name}.txt"] = name
        if slow:
            files[f"slow/{name}"] = "slow"
        if broken:
            files["BROKEN"] = name
        for path, text in files.items():
            (self.repo / path).parent.mkdir(parents=True, exist_ok=True)
            (self.repo / path).write_text(text, encoding="utf-8")
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", name)
        self.sha[name] = git(self.repo, "rev-parse", "HEAD").strip()
        return self.sha[name]

    def mend(self, name: str) -> str:
        (self.repo / "BROKEN").unlink()
        return self.commit(name)

    def branch(self, name: str, at: str) -> None:
        git(self.repo, "checkout", "-q", "-b", name, self.sha.get(at, at))

    def switch(self, name: str) -> None:
        git(self.repo, "checkout", "-q", name)

    def merge(self, name: str, *branches: str, slow: bool = False) -> str:
        git(self.repo, "merge", "-q", "--no-ff", "--no-edit", "-m", name, *branches)
        if slow:  # an "evil merge": the merge commit itself changes the code
            (self.repo / "slow").mkdir(exist_ok=True)
            (self.repo / "slow" / name).write_text("slow", encoding="utf-8")
            git(self.repo, "add", "-A")
            git(self.repo, "commit", "-q", "--amend", "--no-edit")
        self.sha[name] = git(self.repo, "rev-parse", "HEAD").strip()
        return self.sha[name]

    def worktrees(self) -> list[str]:
        return git(self.repo, "worktree", "list", "--porcelain").split("\n\n")

    def refs(self) -> str:
        return git(self.repo, "for-each-ref")


def change(repo: Path, sha: str) -> float:
    """The truth: SLOW when the commit's tree holds a planted slow file, else 0."""
    listing = git(repo, "ls-tree", "-r", "--name-only", sha)
    return SLOW if any(line.startswith("slow/") for line in listing.splitlines()) else 0.0


class FakeLooks:
    """Replaces the ab of a look: the commits' trees are set up for real (worktree, --build), the look's change is
    the truth, and a look folder that holds a finished look is reused, as the real looks are."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, fail: Exception | None = None, fail_after: int = 0) -> None:
        self.taken: list[tuple[str, str]] = []
        self.fail, self.fail_after = fail, fail_after
        fake = self

        def look(self: driver.Bisector, folder: Path, base_sha: str, head_sha: str) -> tuple[str, str]:
            if (folder / "done").exists():
                return base_sha, head_sha
            try:
                self.worker(base_sha)
            except (rule.CommitFailed, UserError) as e:
                raise UserError(f"the base can't be set up: {e}") from None
            try:
                self.worker(head_sha)
            except UserError as e:
                raise rule.CommitFailed(str(e)) from None
            if fake.fail is not None and len(fake.taken) >= fake.fail_after:
                raise fake.fail
            fake.taken.append((base_sha, head_sha))
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "done").write_text("")
            return base_sha, head_sha

        def pooled(self: driver.Bisector, looks: list[tuple[str, str]]) -> rule.Look:
            base, head = looks[0]
            d = change(self.repo, head) - change(self.repo, base)
            return rule.Look(d, d - 0.5, d + 0.5, 20)

        monkeypatch.setattr(driver.Bisector, "_look", look)
        monkeypatch.setattr(driver.Bisector, "_pooled", pooled)


def settings(**kw) -> driver.Settings:
    base = dict(worker="--weights random", design=Design(processes=1, repeats=1), max_looks=1, max_skips=5,
                build="test ! -e BROKEN", threshold_pct=2.0)  # fmt: skip
    return driver.Settings(**{**base, **kw})


PROMPTS = PromptSet.from_list(["hello"], name="test")


def bisector(h: History, good: str, bad: str, out: Path, **kw) -> driver.Bisector:
    stop = kw.pop("stop", None)
    return driver.Bisector(h.repo, h.sha.get(good, good), h.sha.get(bad, bad), PROMPTS, RunOptions(max_new_tokens=4),
                           settings(**kw), out, stop=stop)  # fmt: skip


def named(b: driver.Bisector, record: dict) -> list[str]:
    a = record["answer"]
    return b.shas[a["first"] : a["last"] + 1]


# ---------------------------------------------------------------------------------------------- the chain


def test_the_chain_from_a_good_on_a_merged_branch_is_made_of_real_parents(tmp_path):
    """GOOD on a branch merged into main: BAD's first-parent line runs down main, commits that lack GOOD's code
    and whose listed predecessor is not their parent. The chain follows the parent that leads to GOOD."""
    h = History(tmp_path)
    h.commit("base")
    h.branch("feat", "base")
    h.sha["GOOD"] = h.commit("f1")
    h.commit("f2")
    h.switch("main")
    h.commit("m1")
    h.commit("m2")
    h.merge("M", "feat")
    h.commit("after")
    shas = checkout.commits_between(h.repo, h.sha["GOOD"], h.sha["after"])
    assert shas == [h.sha[n] for n in ("f1", "f2", "M", "after")]
    for parent, child in itertools.pairwise(shas):
        assert parent in checkout.parents(h.repo, child)


def test_a_regression_on_a_merged_branch_names_the_merge_and_how_to_look_inside(tmp_path, monkeypatch):
    h = History(tmp_path)
    h.branch("feat", "good")
    h.commit("b1")
    h.commit("b2", slow=True)
    h.commit("b3")
    h.switch("main")
    h.commit("m1")
    h.commit("m2")
    h.merge("M", "feat")
    h.commit("c1")
    FakeLooks(monkeypatch)
    b = bisector(h, "good", "c1", tmp_path / "out")
    record = b.run()
    assert named(b, record) == [h.sha["M"]] and record["answer"]["kind"] == "commit"
    reason = record["answer"]["reason"]
    assert "is a merge of 2 parents" in reason and f"llmbench bisect {h.sha['good'][:12]} {h.sha['b3'][:12]}" in reason
    # and that bisect, inside the branch, names the commit itself
    inner = bisector(h, "good", "b3", tmp_path / "inner")
    record = inner.run()
    assert named(inner, record) == [h.sha["b2"]] and "merge" not in record["answer"]["reason"]


def test_an_octopus_merge_names_every_merged_branch(tmp_path, monkeypatch):
    h = History(tmp_path)
    for name in ("x", "y"):
        h.branch(name, "good")
        h.commit(f"{name}1", slow=name == "y")
        h.switch("main")
    h.commit("m1")
    h.merge("O", "x", "y")
    h.commit("c1")
    FakeLooks(monkeypatch)
    b = bisector(h, "good", "c1", tmp_path / "out")
    record = b.run()
    assert named(b, record) == [h.sha["O"]]
    reason = record["answer"]["reason"]
    assert "is a merge of 3 parents" in reason
    assert h.sha["x1"][:12] in reason and h.sha["y1"][:12] in reason


def test_an_evil_merge_is_named_as_the_first_bad_commit(tmp_path, monkeypatch):
    h = History(tmp_path)
    h.branch("feat", "good")
    h.commit("b1")
    h.switch("main")
    h.commit("m1")
    h.merge("M", "feat", slow=True)
    h.commit("c1")
    h.commit("c2")
    FakeLooks(monkeypatch)
    b = bisector(h, "good", "c2", tmp_path / "out")
    record = b.run()
    assert named(b, record) == [h.sha["M"]] and record["answer"]["kind"] == "commit"


def test_commits_that_fail_to_build_are_skipped_and_the_answer_is_honest(tmp_path, monkeypatch):
    """Broken commits around the regression (and a merge among them): each step measures or skips; the answer is
    the commit when the skips don't hide it, else the range of candidates that holds it."""
    h = History(tmp_path)
    h.commit("c1")
    h.commit("c2", broken=True)
    h.commit("c3", slow=True)  # still broken: its build fails too
    h.mend("c4")
    h.branch("feat", "c4")
    h.commit("b1")
    h.switch("main")
    h.merge("M", "feat")
    h.commit("c5")
    worktrees, refs = h.worktrees(), h.refs()
    FakeLooks(monkeypatch)
    b = bisector(h, "good", "c5", tmp_path / "out")
    record = b.run()
    skipped = [c["sha"] for c in record["commits"] if c["skipped"]]
    assert set(skipped) <= {h.sha["c2"], h.sha["c3"]} and skipped
    assert record["answer"]["kind"] in ("commit", "candidates") and h.sha["c3"] in named(b, record)
    assert h.worktrees() == worktrees and h.refs() == refs and not (tmp_path / "out" / "trees").exists()


# ------------------------------------------------------------------------------------- what is left behind


@pytest.mark.parametrize("fail", [RunInterrupted([], None, "SIGTERM"), UserError("the machine is gone")])
def test_a_failed_or_interrupted_bisect_leaves_no_worktree(tmp_path, monkeypatch, fail):
    h = History(tmp_path)
    for i in range(4):
        h.commit(f"c{i}", slow=i == 2)
    worktrees, refs = h.worktrees(), h.refs()
    FakeLooks(monkeypatch, fail=fail, fail_after=1)
    b = bisector(h, "good", "c3", tmp_path / "out")
    with pytest.raises(type(fail)):
        b.run()
    assert h.worktrees() == worktrees and h.refs() == refs


def test_an_interrupted_build_is_an_interrupt_not_a_skip(tmp_path, monkeypatch):
    h = History(tmp_path)
    for i in range(4):
        h.commit(f"c{i}", slow=i == 2)
    stop = Stop()
    real_build = checkout.build

    def build(command, tree):
        if tree.name == h.sha["c1"][:12]:  # Ctrl-C reaches the build too, which dies of it
            stop.request("SIGINT")
            raise rule.CommitFailed("--build failed (exit 130): interrupted")
        real_build(command, tree)

    monkeypatch.setattr(checkout, "build", build)
    FakeLooks(monkeypatch)
    b = bisector(h, "good", "c3", tmp_path / "out", stop=stop)
    with pytest.raises(RunInterrupted):
        b.run()
    record = json.loads((tmp_path / "out" / "bisect.json").read_text())
    assert not any(c["skipped"] for c in record["commits"])  # a resume tries it again


def test_locked_and_stray_worktrees_are_removed(tmp_path):
    """A ``worktree add`` cut short leaves its worktree locked, which one --force does not remove; a folder left
    where a tree goes (its record pruned) must not make the commit fail forever."""
    h = History(tmp_path)
    h.commit("c1")
    before = h.worktrees()
    root = tmp_path / "trees"
    tree = checkout.ensure_tree(h.repo, h.sha["c1"], root)
    git(h.repo, "worktree", "lock", str(tree))
    checkout.remove_trees(h.repo, root)
    assert h.worktrees() == before and not root.exists()
    # locked, and its folder deleted by hand: prune alone keeps a locked record forever
    tree = checkout.ensure_tree(h.repo, h.sha["c1"], root)
    git(h.repo, "worktree", "lock", str(tree))
    shutil.rmtree(tree)
    checkout.remove_trees(h.repo, root)
    assert h.worktrees() == before
    stray = root / h.sha["c1"][:12]
    stray.mkdir(parents=True)
    (stray / "junk").write_text("x")
    tree = checkout.ensure_tree(h.repo, h.sha["c1"], root)
    assert git(tree, "rev-parse", "HEAD").strip() == h.sha["c1"]
    checkout.remove_trees(h.repo, root)
    assert h.worktrees() == before


def test_a_worktree_add_that_fails_is_undone(tmp_path, monkeypatch):
    h = History(tmp_path)
    h.commit("c1")
    before = h.worktrees()
    real = checkout.git

    def failing_git(repo, *args):
        if args[:2] == ("worktree", "add"):
            real(repo, *args)  # made, then "interrupted" before git could finish (and unlock) it
            real(repo, "worktree", "lock", str(args[-2]))
            raise UserError("git worktree: interrupted")
        return real(repo, *args)

    monkeypatch.setattr(checkout, "git", failing_git)
    with pytest.raises(UserError):
        checkout.ensure_tree(h.repo, h.sha["c1"], tmp_path / "trees")
    monkeypatch.setattr(checkout, "git", real)
    assert h.worktrees() == before


# -------------------------------------------------------------------------------------------- saved looks


def test_a_resumed_bisect_refuses_looks_measured_with_other_settings(tmp_path, monkeypatch):
    h = History(tmp_path)
    for i in range(3):
        h.commit(f"c{i}", slow=i == 1)
    FakeLooks(monkeypatch, fail=RunInterrupted([], None), fail_after=2)
    out = tmp_path / "out"
    with pytest.raises(RunInterrupted):
        bisector(h, "good", "c2", out).run()
    for kw in ({"worker": "--weights random --dtype float32"}, {"build": None},
               {"design": Design(processes=2, repeats=1)}):  # fmt: skip
        with pytest.raises(UserError, match="holds looks measured with other"):
            bisector(h, "good", "c2", out, **kw)
    with pytest.raises(UserError, match="holds looks measured with other options"):
        driver.Bisector(h.repo, h.sha["good"], h.sha["c2"], PROMPTS, RunOptions(max_new_tokens=8), settings(), out)
    with pytest.raises(UserError, match="holds looks measured with other prompts"):
        driver.Bisector(h.repo, h.sha["good"], h.sha["c2"], PromptSet.from_list(["bye"], name="test"),
                        RunOptions(max_new_tokens=4), settings(), out)  # fmt: skip
    bisector(h, "good", "c2", out)  # the same settings go on
    # a record from before the settings were kept: nothing says what its looks measured
    record = json.loads((out / "bisect.json").read_text())
    del record["measured_with"]
    (out / "bisect.json").write_text(json.dumps(record))
    with pytest.raises(UserError, match="settings it did not record"):
        bisector(h, "good", "c2", out)


def in_repo(h: History, commit: str) -> None:
    git(h.repo, "checkout", "-q", "--detach", h.sha[commit])


def step(h: History, **kw) -> tuple[str, str]:
    return driver.step(h.repo, h.sha["good"], kw.pop("bad", None), PROMPTS, RunOptions(max_new_tokens=4),
                       settings(max_skips=1, keep_trees=True, **kw))  # fmt: skip


def test_bisect_step_judges_commits_that_do_not_descend_from_good(tmp_path, monkeypatch):
    """git bisect checks out the commits of merged branches that forked before GOOD, and merge bases: each is
    judged against GOOD, never an error that aborts git bisect run."""
    h = History(tmp_path)
    h.commit("base")
    h.branch("old", "base")
    h.commit("o1", slow=True)
    h.switch("main")
    h.sha["good"] = h.commit("g")
    h.merge("M", "old")
    FakeLooks(monkeypatch)
    before = h.worktrees()
    in_repo(h, "o1")  # reachable from BAD (M), not from GOOD, no descendant of GOOD
    assert step(h)[0] == "bad"
    in_repo(h, "base")  # the merge base git tests when GOOD is not an ancestor of BAD
    assert step(h)[0] == "good"
    # only GOOD's worktree is kept between the steps
    trees = [b for b in h.worktrees() if "llmbench-bisect" in b]
    assert len(h.worktrees()) == len(before) + 1 and len(trees) == 1 and h.sha["good"] in trees[0]


def test_bisect_step_skips_a_commit_that_fails_to_build_and_keeps_no_tree_of_it(tmp_path, monkeypatch):
    h = History(tmp_path)
    h.commit("c1", broken=True)
    FakeLooks(monkeypatch)
    in_repo(h, "c1")
    state, line = step(h)
    assert state == "skipped" and "--build failed" in line
    assert not any(f"trees/{h.sha['c1'][:12]}" in b for b in h.worktrees())


def test_bisect_step_measures_again_with_other_settings(tmp_path, monkeypatch):
    h = History(tmp_path)
    h.commit("c1", slow=True)
    fake = FakeLooks(monkeypatch)
    in_repo(h, "c1")
    step(h)
    step(h)
    assert len(fake.taken) == 1  # the same settings: the look is kept
    step(h, worker="--weights random --dtype float32")
    assert len(fake.taken) == 2  # another worker: measured again, never the other's look


def test_bisect_step_as_git_bisect_run_in_a_merged_history(tmp_path):
    """``git bisect run`` with a judge of exit codes that bisect-step gives (here a script reading the truth):
    a history with a merged branch holding the regression and a commit that can't be built. git's walk, not
    ours, so this only pins that such a history needs the judge to accept any commit git checks out."""
    h = History(tmp_path)
    h.commit("base")
    h.branch("feat", "base")
    h.commit("f1")
    h.commit("f2", slow=True)
    h.switch("main")
    h.sha["good"] = h.commit("g")
    h.merge("M", "feat")
    h.commit("c1")
    checked: list[str] = []
    judge = tmp_path / "judge.sh"
    judge.write_text(f'#!/bin/sh\ngit rev-parse HEAD >> {tmp_path}/visited\n'
                     'git ls-tree -r --name-only HEAD | grep -q "^slow/" && exit 1\nexit 0\n')  # fmt: skip
    judge.chmod(0o755)
    git(h.repo, "bisect", "start", h.sha["c1"], h.sha["good"])
    out = subprocess.run(["git", "-C", str(h.repo), "bisect", "run", str(judge)], capture_output=True, text=True)
    git(h.repo, "bisect", "reset")
    checked = (tmp_path / "visited").read_text().split()
    assert f"{h.sha['f2']} is the first bad commit" in out.stdout
    # git visited commits that don't descend from GOOD: the judge must answer for them, not abort
    descends = [subprocess.run(["git", "-C", str(h.repo), "merge-base", "--is-ancestor", h.sha["good"], c]).returncode
                == 0 for c in checked]  # fmt: skip
    assert not all(descends)


def test_a_look_folder_left_half_written_is_set_aside_and_measured_again(tmp_path, monkeypatch):
    """An interrupted look may leave one side's file, or one cut short: ab refuses a folder that holds either, so
    the look is moved aside (kept) and taken again instead of failing every resume."""
    from llmbench.drivers import ab as ab_module

    h = History(tmp_path)
    h.commit("c1")
    b = bisector(h, "good", "c1", tmp_path / "out")
    taken: list[Path] = []

    async def ab(prompts, base, head, options, out, **kw):
        ab_module.prepare_ab_dir(out, False)  # the real refusal of a folder that holds a run
        taken.append(out)
        return "base", "head", out

    monkeypatch.setattr(ab_module, "ab", ab)
    for leftover in ({"base.json": "{}"}, {"base.json": '{"schema_version": 1, "requ', "head.json": "{"}):
        folder = tmp_path / "out" / h.sha["c1"][:12] / "look-0"
        folder.mkdir(parents=True)
        for name, text in leftover.items():
            (folder / name).write_text(text)
        assert b._look(folder, h.sha["good"], h.sha["c1"]) == ("base", "head")
        assert taken[-1] == folder
        shutil.rmtree(folder)
    assert len(list((tmp_path / "out" / h.sha["c1"][:12]).glob("look-0.interrupted-*"))) == 2
