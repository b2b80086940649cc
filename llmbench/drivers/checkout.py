"""A commit's code to measure, for ``llmbench bisect``: its tree as a git worktree, an interpreter that has its
dependencies, and the worker command that runs that tree's llmbench.

The interpreter: when the running one already satisfies every dependency the commit's ``pyproject.toml`` asks
for (``project.dependencies``; the ``[tool.*]`` tables don't count), the commit runs on it, its own code first on
``PYTHONPATH`` (no install at all: the usual case along a bisect). Otherwise a venv is built once per set of
requirements (``~/.cache/llmbench/venvs/<hash>``, under a lock, with the system's packages visible so that
torch isn't installed again) and reused by every commit that asks the same; pip's failure skips the commit
with pip's last line. llmbench itself is never installed: ``PYTHONPATH`` points at the tree, and the worker runs
in the tree, so ``python -m`` finds the tree's package before any installed one and the run records
the tree's commit.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

from llmbench.analysis.bisect import CommitFailed
from llmbench.core.errors import UserError

GIT_TIMEOUT_S = 120


def git(repo: Path, *args: str) -> str:
    """``git args`` in ``repo``; its stdout, stripped. UserError with git's own last line when it fails."""
    try:
        out = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        raise UserError(f"git {args[0]} failed: {e}") from None
    if out.returncode != 0:
        last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
        raise UserError(f"git {' '.join(args[:2])}: {last}")
    return out.stdout.strip()


def commits_between(repo: Path, good: str, bad: str) -> list[str]:
    """[GOOD, c_1, ..., BAD]: full shas of a chain from GOOD to BAD in which each commit's predecessor is one of its
    parents, oldest first: BAD's first-parent line, except where a merge's first parent does not lead back to GOOD
    (GOOD was on the merged branch), where the chain follows the first parent that does. So every c_i contains
    GOOD, and "against its own parent" means its real parent. UserError unless GOOD is an ancestor of BAD with at
    least one commit after it."""
    good_sha, bad_sha = (git(repo, "rev-parse", "--verify", f"{ref}^{{commit}}") for ref in (good, bad))
    try:
        git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha)
    except UserError:
        raise UserError(f"{good} is not an ancestor of {bad}: nothing to bisect between them") from None
    if good_sha == bad_sha:
        raise UserError(f"{good} and {bad} are the same commit: nothing to bisect")
    # --first-parent alone would walk down a mainline that never meets GOOD when GOOD came in by a merge: those
    # commits lack GOOD's code, and a "parent" in the list would not be one. --ancestry-path keeps the commits
    # that descend from GOOD; of each one's parents the first among them (or GOOD itself) is taken.
    lines = git(repo, "rev-list", "--parents", "--ancestry-path", f"{good_sha}..{bad_sha}").splitlines()
    parents = {line.split()[0]: line.split()[1:] for line in lines if line.strip()}
    chain, sha = [], bad_sha
    while sha != good_sha:
        chain.append(sha)
        sha = next(p for p in parents[sha] if p == good_sha or p in parents)
    return [good_sha, *reversed(chain)]


def parents(repo: Path, sha: str) -> list[str]:
    """The commit's parents, first parent first (two or more: a merge)."""
    return git(repo, "rev-list", "--parents", "-n", "1", sha).split()[1:]


def subject(repo: Path, sha: str) -> str:
    """The commit's one-line subject."""
    return git(repo, "log", "-1", "--format=%s", sha)


def ensure_tree(repo: Path, sha: str, root: Path) -> Path:
    """``root/<sha12>``: a detached worktree of ``sha`` (kept and reused if it is already there at that commit).
    A ``worktree add`` that fails (or is interrupted) is undone, so the repository's worktree list does not grow."""
    path = root / sha[:12]
    if path.is_dir():
        try:  # the folder must be a worktree's top, not a stray folder inside some checkout (OUT often is)
            top, head = git(path, "rev-parse", "--show-toplevel", "HEAD").splitlines()
            if Path(top).resolve() == path.resolve() and head == sha:
                return path
        except (UserError, ValueError):
            pass
        remove_tree(repo, path)
    root.mkdir(parents=True, exist_ok=True)
    git(repo, "worktree", "prune")
    try:
        git(repo, "worktree", "add", "--detach", str(path), sha)
    except BaseException:  # a half-made worktree (git leaves it locked "initializing") would stay listed
        remove_tree(repo, path)
        raise
    return path


def remove_tree(repo: Path, path: Path) -> None:
    """One worktree removed: its folder and git's record of it, even when it is locked (a ``worktree add`` cut
    short leaves its lock, and a single ``--force`` refuses a locked worktree) or its folder is no worktree."""
    with contextlib.suppress(UserError):  # not registered, or already gone: the folder and prune do the rest
        git(repo, "worktree", "remove", "--force", "--force", str(path))
    if path.exists():
        shutil.rmtree(path, ignore_errors=True)
    _prune(repo)


def _prune(repo: Path) -> None:
    """``git worktree prune``, with the records of missing folders that are locked unlocked first (prune keeps a
    locked record forever; ours are never locked on purpose)."""
    with contextlib.suppress(UserError):
        listing = git(repo, "worktree", "list", "--porcelain")
        for block in listing.split("\n\n"):
            fields = {line.partition(" ")[0]: line.partition(" ")[2] for line in block.splitlines() if line}
            where = fields.get("worktree")
            if where and "locked" in fields and not Path(where).exists():
                git(repo, "worktree", "unlock", where)
    git(repo, "worktree", "prune")


def remove_trees(repo: Path, root: Path) -> None:
    """Every worktree under ``root`` removed (the folder too, when empty)."""
    for path in sorted(root.glob("*")) if root.is_dir() else []:
        remove_tree(repo, path)
    _prune(repo)
    if root.is_dir() and not any(root.iterdir()):
        root.rmdir()


def requirements(repo: Path, sha: str) -> list[str]:
    """The commit's ``project.dependencies``, read from git without a checkout. CommitFailed when its
    pyproject.toml can't be read."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - the dependency's marker brings tomli to 3.10
        import tomli as tomllib
    try:
        text = git(repo, "show", f"{sha}:pyproject.toml")
        project = tomllib.loads(text).get("project", {})
    except (UserError, tomllib.TOMLDecodeError) as e:
        raise CommitFailed(f"its pyproject.toml can't be read: {e}") from None
    deps = project.get("dependencies", [])
    return [str(d) for d in deps] if isinstance(deps, list) else []


def unmet(reqs: list[str]) -> list[str]:
    """The requirements the running interpreter does not satisfy (a requirement that can't be parsed counts)."""
    from importlib import metadata

    from packaging.requirements import InvalidRequirement, Requirement

    missing = []
    for text in reqs:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            missing.append(text)
            continue
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            missing.append(text)
            continue
        if req.specifier and not req.specifier.contains(version, prereleases=True):
            missing.append(text)
    return missing


def venv_root() -> Path:
    """Where bisect's per-requirements venvs live (``$LLMBENCH_CACHE/venvs`` or the user cache's)."""
    from llmbench.core.settings import settings

    return settings().build_cache_root / "venvs"


def ensure_python(repo: Path, sha: str) -> str:
    """The interpreter to run ``sha`` with: this one when it has the commit's dependencies, else the venv of that
    set of requirements (built once, under a lock). CommitFailed when it can't be built."""
    reqs = requirements(repo, sha)
    if not unmet(reqs):
        return sys.executable
    import fcntl

    # The venv is made from, and sees the packages of, this interpreter: another one (another Python version,
    # another environment's torch) must not reuse it.
    interpreter = f"{os.path.realpath(sys.executable)}|{sys.version}|{sys.prefix}"
    key = hashlib.sha256("\n".join([interpreter, *sorted(reqs)]).encode()).hexdigest()[:16]
    venv = venv_root() / key
    python = venv / "bin" / "python"
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two bisects needing the same venv build it once
        if (venv / ".complete").exists():
            return str(python)
        steps = [[sys.executable, "-m", "venv", "--clear", "--system-site-packages", str(venv)],
                 [str(python), "-m", "pip", "install", "-q", *reqs]]  # fmt: skip
        for step in steps:
            out = subprocess.run(step, capture_output=True, text=True)
            if out.returncode != 0:
                last = (out.stderr.strip().splitlines() or [f"exit {out.returncode}"])[-1]
                raise CommitFailed(f"its dependencies can't be installed ({shlex.join(step[2:5])}): {last}")
        (venv / ".complete").touch()
    return str(python)


def build(command: str | None, tree: Path) -> None:
    """``--build``'s command in the tree (a shell line); CommitFailed with its last line when it fails."""
    if not command:
        return
    out = subprocess.run(command, shell=True, cwd=tree, capture_output=True, text=True)
    if out.returncode != 0:
        text = (out.stderr.strip() or out.stdout.strip()).splitlines()
        raise CommitFailed(f"--build failed (exit {out.returncode}): {text[-1] if text else 'no output'}")


def worker_command(python: str, tree: Path, worker_args: str) -> str:
    """The ab side that runs ``tree``'s llmbench worker on ``python``: started in the tree (POSIX sh, which then
    execs the interpreter: the worker keeps the pid ab pins and signals), the tree first on its path."""
    tree = tree.resolve()
    return shlex.join(["sh", "-c", 'cd "$1" && shift && export PYTHONPATH="$PWD" && exec "$@"', "sh", str(tree), python,
                       "-m", "llmbench", "worker", *shlex.split(worker_args)])  # fmt: skip
