"""Exit codes as a contract (docs/exit-codes.md): every command, driven into every way it can end, exits with the
contract's code and says why in one line on stderr, never a traceback.

Everything runs in this process through the console entry point (:func:`llmbench.cli.main`): the commands that
need a model or a server are driven into their failures by patching the first function their body calls, so
nothing loads, starts or connects. ``bisect-step`` is held to git's contract: only a measured verdict (0 good, 1
bad) or a skip (125) passes; every failure is 128, which aborts ``git bisect run`` instead of marking the commit
bad.
"""

from __future__ import annotations

import contextlib
import errno
import signal
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from llmbench.core.errors import RunInterrupted, UserError
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

GIT_ABORT = 128
INTERNAL = "llmbench: internal error: RuntimeError: boom (set LLMBENCH_DEBUG=1 for the traceback)"
SERVER = "http://127.0.0.1:9/v1"  # never reached: every call below ends before a connection


@dataclass
class Outcome:
    """How one ``llmbench ...`` ended: its exit code and what it printed."""

    code: int
    out: str
    err: str

    @property
    def lines(self) -> list[str]:
        """stderr's non-empty lines."""
        return [line for line in self.err.splitlines() if line.strip()]

    def one_line(self, start: str) -> str:
        """stderr is exactly one line starting with ``start`` (no traceback): that line."""
        assert "Traceback" not in self.err, self.err
        assert len(self.lines) == 1 and self.lines[0].startswith(start), self.err
        return self.lines[0]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Inputs every command can be given: a prompt file, two run files (NEW clearly slower: 12 pairs), a database
    path, and paths that do not exist. Made once: no command below writes them."""
    tmp_path = tmp_path_factory.mktemp("exit-codes")
    prompts = tmp_path / "p.txt"
    prompts.write_text("one\ntwo\n", encoding="utf-8")
    base, slow = tmp_path / "base.json", tmp_path / "slow.json"
    save_run(synthetic_run(n=12, noise=0.05, seed=1), base)
    save_run(synthetic_run(n=12, noise=0.05, seed=2, ttft_ms=200.0, tpot_ms=40.0), slow)
    return {"prompts": prompts, "base": base, "slow": slow, "db": tmp_path / "h.db", "missing": tmp_path / "no.json",
            "out": tmp_path / "out"}  # fmt: skip


@pytest.fixture(scope="module")
def click_app() -> Any:
    """llmbench's click command, built once: typer builds it from the functions' signatures on every call (50 ms,
    most of a failing call's time). The commands are registered at import: every call would build the same one."""
    import typer.main

    from llmbench.cli import app

    return typer.main.get_command(app)


@pytest.fixture
def llmbench(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, click_app: Any
) -> Iterator[Callable[..., Outcome]]:
    """``llmbench(*args)``: the console entry point run here; its exit code and output. main() installs SIGTERM and
    SIGINT handlers (and arms the cold-start clock): all are put back after every call."""
    import typer.main

    from llmbench.cli import app
    from llmbench.core import process

    built = typer.main.get_command
    monkeypatch.setattr(typer.main, "get_command", lambda t: click_app if t is app else built(t))

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for name in ("LLMBENCH_DEBUG", "LLMBENCH_HISTORY"):  # the developer's own would change what is tested
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(process._COLD, "armed", process._COLD["armed"])
    monkeypatch.chdir(tmp_path)  # a default output (quality.json, results/) lands here, never in the checkout
    # a measuring command freezes the heap (a full collection: a second in a test process): nothing here measures
    monkeypatch.setattr(process, "frozen_gc", contextlib.nullcontext)
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}

    def call(*args: object) -> Outcome:
        from llmbench.cli import main

        monkeypatch.setattr(sys, "argv", ["llmbench", *map(str, args)])
        capsys.readouterr()
        try:
            main()
            code: Any = 0
        except SystemExit as e:
            code = e.code
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        out, err = capsys.readouterr()
        assert isinstance(code, int), f"main() must exit with a number, not {code!r}"
        return Outcome(code, out, err)

    yield call
    for sig, handler in saved.items():
        signal.signal(sig, handler)


# each command as the smallest invocation that reaches its body, and the first function that body calls (patched
# to fail): (name, argv, "module:attribute")
COMMANDS: list[tuple[str, Callable[[dict[str, Path]], list[object]], str]] = [
    ("run", lambda f: ["run", f["prompts"]], "llmbench.drivers.workload:read_trace"),
    ("sweep", lambda f: ["sweep", f["prompts"]], "llmbench.workloads.prompts:load_prompts"),
    ("scan", lambda f: ["scan"], "llmbench.engines:engine_info"),
    ("load", lambda f: ["load", f["prompts"], "--endpoint", SERVER], "llmbench.drivers.load:parse_rates"),
    ("quality", lambda f: ["quality"], "llmbench.cli.quality:model_options"),
    ("serve", lambda f: ["serve"], "llmbench.core.errors:require"),
    ("compare", lambda f: ["compare", f["base"], f["slow"]], "llmbench.analysis.compare:gate_options"),
    ("ab", lambda f: ["ab", f["prompts"], "--base", SERVER, "--head", SERVER],
     "llmbench.analysis.compare:gate_options"),
    ("worker", lambda f: ["worker"], "llmbench.cli.worker:model_options"),
    ("bisect", lambda f: ["bisect", "v0"], "llmbench.cli.bisect:_settings"),
    ("engines", lambda f: ["engines"], "llmbench.engines:status"),
    ("history add", lambda f: ["history", "add", f["base"], "--history", f["db"]],
     "llmbench.history.recording:record_files"),
    ("history list", lambda f: ["history", "list", "--history", f["db"]], "llmbench.history.recording:get_history"),
    ("history show", lambda f: ["history", "show", "1", "--history", f["db"]],
     "llmbench.history.recording:get_history"),
    ("history prune", lambda f: ["history", "prune", "--keep", "1", "--history", f["db"]],
     "llmbench.history.recording:get_history"),
    ("history export", lambda f: ["history", "export", "-o", f["out"], "--history", f["db"]],
     "llmbench.core.errors:require"),
    ("trend", lambda f: ["trend", "tpot_ms", "--history", f["db"]], "llmbench.history.recording:get_history"),
    ("show", lambda f: ["show", f["base"]], "llmbench.results.kinds:kind_of"),
    ("export", lambda f: ["export", f["base"], "-o", f["out"]], "llmbench.core.errors:require"),
    ("report", lambda f: ["report", f["base"], "-o", f["out"]], "llmbench.core.errors:require"),
    ("prompts", lambda f: ["prompts"], "llmbench.workloads.promptsets:shipped"),
]  # fmt: skip
BY_NAME = {name: (argv, target) for name, argv, target in COMMANDS}
NAMES = [name for name, _, _ in COMMANDS]
STEP = (lambda f: ["bisect-step", "v0"], "llmbench.drivers.bisect:step")

# a value each command's body refuses (exit 2, one line), checked before anything loads or connects
USER_ERRORS: dict[str, list[str]] = {
    "run": ["--max-new-tokens", "0"],
    "scan": ["--prompt-tokens", "many"],
    "load": ["--rates", "nope"],
    "quality": ["--max-new-tokens", "0"],
    "compare": ["--fail-on", "nosuch=3"],
    "ab": ["--fail-on", "nosuch=3"],
    "worker": ["--model", "/no/such/folder"],
    "bisect": ["--metric", "nosuch"],
    "history list": ["--kind", "nosuch"],
    "history prune": ["--keep", "0"],
    "trend": ["--stat", "p42"],
}
# a file that is not there: refused in one line too
MISSING_FILE: dict[str, Callable[[dict[str, Path]], list[object]]] = {
    "compare": lambda f: ["compare", f["base"], f["missing"]],
    "show": lambda f: ["show", f["missing"]],
    "export": lambda f: ["export", f["missing"], "-o", f["out"]],
    "report": lambda f: ["report", f["missing"], "-o", f["out"]],
    "sweep": lambda f: ["sweep", f["missing"]],
    "history add": lambda f: ["history", "add", f["missing"], "--history", f["db"]],
    "history show": lambda f: ["history", "show", "1", "--history", f["missing"]],  # no database there
}
# a non-number for a number option: click's usage error
NOT_A_NUMBER: dict[str, list[str]] = {
    "run": ["--repeats", "x"],
    "sweep": ["--rounds", "x"],
    "scan": ["--rounds", "x"],
    "load": ["--seed", "x"],
    "quality": ["--chunk-tokens", "x"],
    "serve": ["--port", "x"],
    "compare": ["--fail-on-regression", "x"],
    "ab": ["--processes", "x"],
    "worker": ["--threads", "x"],
    "bisect": ["--max-looks", "x"],
    "history list": ["--limit", "x"],
    "history prune": ["--keep", "x"],
    "trend": ["--budget", "x"],
}


def _patch(monkeypatch: pytest.MonkeyPatch, target: str, error: BaseException | Callable[[], None]) -> None:
    """Make ``module:attribute`` raise ``error`` (or call it) when the command calls it."""
    module, _, attribute = target.partition(":")

    def fail(*_args: object, **_kwargs: object) -> Any:
        if isinstance(error, BaseException):
            raise error
        error()

    monkeypatch.setattr(f"{module}.{attribute}", fail)


def _step_returns(monkeypatch: pytest.MonkeyPatch, state: str) -> None:
    """bisect-step's measurement (patched) ends in ``state``, with the line it prints."""
    monkeypatch.setattr("llmbench.drivers.bisect.step", lambda *a, **k: (state, f"{state}: the commit's line"))


# --- success -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        lambda f: ["compare", f["base"], f["slow"]],  # no gate: a report, exit 0 however slow
        lambda f: ["show", f["base"]],
        lambda f: ["prompts"],
        lambda f: ["prompts", "--json"],
        lambda f: ["engines"],
        lambda f: ["--version"],
        lambda f: ["compare", "--help"],
        lambda f: ["bisect-step", "--help"],  # help passes git's contract as 0
    ],
    ids=["compare", "show", "prompts", "prompts-json", "engines", "version", "help", "bisect-step-help"],
)
def test_success_exits_0_and_says_nothing_on_stderr(llmbench, files, argv, monkeypatch):
    # `engines` asks an installed llama.cpp in a child process what its build uses; the child is
    # tests/integration/test_engines.py's, here only the exit and the streams are
    monkeypatch.setattr("llmbench.engines.llama_cpp_build_check", lambda: "build matches this CPU")
    r = llmbench(*argv(files))
    assert r.code == 0 and r.out, r.err
    assert "error" not in r.err and "Traceback" not in r.err


def test_export_success_exits_0(llmbench, files):
    pytest.importorskip("pandas")
    r = llmbench("export", files["base"], "-o", files["out"].with_suffix(".csv"))
    assert r.code == 0 and "wrote 12 rows" in r.out, r.err


# --- regression: a gate that fails ----------------------------------------------------------------------------------


def test_compare_gate_that_fails_exits_1(llmbench, files):
    r = llmbench("compare", files["base"], files["slow"], "--fail-on-regression", "1")
    assert r.code == 1 and "REGRESSION" in r.out, r.err
    assert "Traceback" not in r.err
    assert llmbench("compare", files["base"], files["base"], "--fail-on-regression", "1").code == 0


def test_ab_gate_that_fails_exits_1(llmbench, files, monkeypatch):
    """ab's gate is compare's: its driver (patched: two runs, head clearly slower) and the verdict's exit 1."""
    base, head = synthetic_run(n=12, noise=0.05, seed=1), synthetic_run(n=12, noise=0.05, seed=2, tpot_ms=40.0)

    async def measured(*_args: object, **_kwargs: object) -> tuple[Any, Any, Path]:
        return base, head, files["out"]

    monkeypatch.setattr("llmbench.drivers.ab.ab", measured)
    argv = BY_NAME["ab"][0](files)
    r = llmbench(*argv, "--fail-on-regression", "1", "--repeats", "3", "-q")  # 6 pairs: a median's interval
    assert r.code == 1 and "REGRESSION" in r.out, r.err


@pytest.mark.parametrize(("kind", "code"), [("none", 1), ("commit", 0)])
def test_bisect_exits_1_when_bad_is_not_slower(llmbench, files, monkeypatch, kind, code):
    """bisect's 1 is "nothing to find" (BAD is not a regression past --threshold), its 0 an answer."""

    class Found:
        def __init__(self, *_args: object, **_kwargs: object) -> None: ...

        def run(self) -> dict:
            return {"answer": {"kind": kind}}

    monkeypatch.setattr("llmbench.drivers.bisect.prepare_folder", lambda *a, **k: files["out"])
    monkeypatch.setattr("llmbench.drivers.bisect.Bisector", Found)
    monkeypatch.setattr("llmbench.present.bisect.bisect_lines", lambda record: [f"answer: {record['answer']}"])
    r = llmbench("bisect", "v0", "-q")
    assert r.code == code and "answer" in r.out, r.err


@pytest.mark.parametrize(("state", "code"), [("good", 0), ("bad", 1), ("skip", 125), ("unsure", 125)])
def test_bisect_step_verdicts_are_git_bisect_runs(llmbench, files, monkeypatch, state, code):
    _step_returns(monkeypatch, state)
    r = llmbench(*STEP[0](files), "-q")
    assert r.code == code and f"{state}: the commit's line" in r.out, r.err


# --- user error: one line, exit 2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(USER_ERRORS))
def test_a_value_the_body_refuses_exits_2_with_one_line(llmbench, files, name):
    r = llmbench(*BY_NAME[name][0](files), *USER_ERRORS[name])
    assert r.code == 2, r.err
    line = r.one_line("llmbench: error: ")
    assert any(a in line for a in USER_ERRORS[name]), line  # the option, or the value it refuses


@pytest.mark.parametrize("name", list(MISSING_FILE))
def test_a_missing_file_exits_2_with_one_line(llmbench, files, name):
    r = llmbench(*MISSING_FILE[name](files))
    assert r.code == 2, r.err
    assert str(files["missing"]) in r.one_line("llmbench: error: ")


def test_bisect_step_user_error_is_128_with_its_line(llmbench, files):
    r = llmbench(*STEP[0](files), "--metric", "nosuch")
    assert r.code == GIT_ABORT
    assert "--metric" in r.one_line("llmbench: error: ")


# --- usage error from the option parser: 2 (bisect-step: 128) ------------------------------------------------------


@pytest.mark.parametrize("name", [*NAMES, "bisect-step"])
def test_an_unknown_option_is_a_usage_error(llmbench, files, name):
    argv = STEP[0] if name == "bisect-step" else BY_NAME[name][0]
    r = llmbench(*argv(files), "--threshhold", "2")
    # git reads 2 as "bad": `git bisect run llmbench bisect-step GOOD --threshhold 2` marked every commit bad
    assert r.code == (GIT_ABORT if name == "bisect-step" else 2)
    line = r.one_line("llmbench: error: ")
    assert "--threshhold" in line and "--help)" in line


@pytest.mark.parametrize("name", [*NOT_A_NUMBER, "bisect-step"])
def test_a_non_number_is_a_usage_error(llmbench, files, name):
    argv, bad = (STEP[0], ["--max-looks", "x"]) if name == "bisect-step" else (BY_NAME[name][0], NOT_A_NUMBER[name])
    r = llmbench(*argv(files), *bad)
    assert r.code == (GIT_ABORT if name == "bisect-step" else 2)
    assert bad[0] in r.one_line("llmbench: error: ")


@pytest.mark.parametrize("argv", [["compare"], ["nosuch-command"], ["history", "nosuch"], ["bisect"]])
def test_a_missing_argument_or_unknown_command_is_a_usage_error(llmbench, argv):
    r = llmbench(*argv)
    assert r.code == 2
    r.one_line("llmbench: error: ")


# --- internal error: 1 (bisect-step: 128) ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", [*NAMES, "bisect-step"])
def test_a_bug_is_an_internal_error_in_one_line(llmbench, files, monkeypatch, name):
    argv, target = STEP if name == "bisect-step" else BY_NAME[name]
    _patch(monkeypatch, target, RuntimeError("boom"))
    r = llmbench(*argv(files), *(["-q"] if name == "bisect-step" else []))
    assert r.code == (GIT_ABORT if name == "bisect-step" else 1)
    assert r.one_line("llmbench: internal error: ") == INTERNAL


@pytest.mark.parametrize("name", ["compare", "bisect-step"])
def test_with_llmbench_debug_the_traceback_is_printed_and_the_code_kept(llmbench, files, monkeypatch, name):
    argv, target = STEP if name == "bisect-step" else BY_NAME[name]
    _patch(monkeypatch, target, RuntimeError("boom"))
    monkeypatch.setenv("LLMBENCH_DEBUG", "1")
    r = llmbench(*argv(files))
    assert r.code == (GIT_ABORT if name == "bisect-step" else 1)
    assert "Traceback" in r.err and "RuntimeError: boom" in r.err


def test_a_library_s_sys_exit_keeps_its_code_and_says_its_message(llmbench, files, monkeypatch):
    """sys.exit("why") in a library would print "why" and exit 1 in a plain script: here too, as one line."""
    argv, target = BY_NAME["compare"]
    _patch(monkeypatch, target, SystemExit("why"))
    r = llmbench(*argv(files))
    assert r.code == 1 and r.one_line("llmbench: internal error: ") == "llmbench: internal error: SystemExit: why"
    _patch(monkeypatch, target, SystemExit(3))
    assert llmbench(*argv(files)).code == 3


# --- the machine: a full disk, a read-only folder are the user's to fix (2) -----------------------------------------


FULL_DISK = [("compare", False), ("export", False), ("history add", False), ("bisect-step", False), ("compare", True),
             ("bisect-step", True)]  # fmt: skip


@pytest.mark.parametrize(("name", "debug"), FULL_DISK)
def test_a_full_disk_exits_2_with_one_line(llmbench, files, monkeypatch, name, debug):
    argv, target = STEP if name == "bisect-step" else BY_NAME[name]
    _patch(monkeypatch, target, OSError(errno.ENOSPC, "No space left on device", "/full/disk/x.json"))
    if debug:  # the traceback is extra: the code stays the contract's
        monkeypatch.setenv("LLMBENCH_DEBUG", "1")
    r = llmbench(*argv(files))
    assert r.code == (GIT_ABORT if name == "bisect-step" else 2)
    expected = "llmbench: error: cannot write /full/disk/x.json: No space left on device"
    if debug:
        assert expected in r.lines and "Traceback" in r.err
    else:
        assert r.one_line("llmbench: error: ") == expected


# --- interrupt: 130 (SIGINT), 143 (SIGTERM); bisect-step: 128 -------------------------------------------------------


@pytest.mark.parametrize("name", [*NAMES, "bisect-step"])
def test_ctrl_c_exits_130_with_one_line(llmbench, files, monkeypatch, name):
    argv, target = STEP if name == "bisect-step" else BY_NAME[name]
    _patch(monkeypatch, target, KeyboardInterrupt())
    r = llmbench(*argv(files), *(["-q"] if name == "bisect-step" else []))
    assert r.code == (GIT_ABORT if name == "bisect-step" else 130)
    r.one_line("llmbench: interrupted")


def _sigterm() -> None:
    """SIGTERM delivered to this process while main()'s own handler is in place (not a measuring command's stop
    flag): the handler raises, the command unwinds."""
    from llmbench.cli import _on_sigterm

    assert signal.getsignal(signal.SIGTERM) is _on_sigterm, "only main()'s handler may receive this signal"
    signal.raise_signal(signal.SIGTERM)


@pytest.mark.parametrize("name", ["compare", "history list", "prompts", "run"])
def test_sigterm_exits_143_with_one_line(llmbench, files, monkeypatch, name):
    argv, target = BY_NAME[name]
    _patch(monkeypatch, target, _sigterm)
    r = llmbench(*argv(files))
    assert r.code == 143
    r.one_line("llmbench: terminated by SIGTERM")


@pytest.mark.parametrize(("signal_name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_measuring_command_stopped_by_its_stop_flag_says_so(llmbench, files, monkeypatch, signal_name, code):
    """A signal under a stop flag ends the run early (RunInterrupted): its line says what was kept and how to resume."""
    saved = files["out"] / "run.json"

    async def stopped(*_args: object, **_kwargs: object) -> None:
        raise RunInterrupted([synthetic_run(n=2)], saved, signal_name)

    monkeypatch.setattr("llmbench.drivers.run.run", stopped)
    r = llmbench("run", files["prompts"], "--endpoint", SERVER, "-q")
    assert r.code == code and "Traceback" not in r.err
    first, resume = r.lines
    assert first.startswith(f"llmbench: interrupted by {signal_name}: 2 requests saved in {saved}"), r.err
    assert resume.strip().startswith("llmbench run") and resume.strip().endswith(f"--resume {saved}")


@pytest.mark.parametrize("signal_name", ["SIGINT", "SIGTERM"])
def test_bisect_step_stopped_by_a_signal_aborts_the_bisect(llmbench, files, monkeypatch, signal_name):
    _patch(monkeypatch, STEP[1], RunInterrupted([], None, signal_name))
    r = llmbench(*STEP[0](files), "-q")
    assert r.code == GIT_ABORT and "Traceback" not in r.err and len(r.lines) <= 1, r.err


# --- bisect-step: 1-127 only for a measured verdict or a skip -------------------------------------------------------


FAILURES: dict[str, tuple[list[str], BaseException | None]] = {
    "usage: unknown option": (["--threshhold", "2"], None),
    "usage: not a number": (["--max-looks", "x"], None),
    "usage: missing GOOD": (["--bad", "HEAD"], None),
    "user error": (["--metric", "nosuch"], None),
    "user error in the step": ([], UserError("BAD against GOOD: not a regression")),
    "internal error": ([], RuntimeError("boom")),
    "full disk": ([], OSError(errno.ENOSPC, "No space left on device", "/full/x")),
    "Ctrl-C": ([], KeyboardInterrupt()),
    "SIGINT stop": ([], RunInterrupted([], None, "SIGINT")),
    "SIGTERM stop": ([], RunInterrupted([], None, "SIGTERM")),
    "a library's sys.exit(3)": ([], SystemExit(3)),
    "a library's sys.exit('why')": ([], SystemExit("why")),
}
DEBUG_CHANGES = ("internal error", "full disk", "user error in the step")  # what LLMBENCH_DEBUG prints more of


@pytest.mark.parametrize("failure", [*FAILURES, *(f"{f} with LLMBENCH_DEBUG" for f in DEBUG_CHANGES)])
def test_bisect_step_never_exits_1_to_127_but_for_a_verdict_or_a_skip(llmbench, files, monkeypatch, failure):
    failure, debug = failure.removesuffix(" with LLMBENCH_DEBUG"), failure.endswith(" with LLMBENCH_DEBUG")
    extra, error = FAILURES[failure]
    # without GOOD, click refuses the line before the body runs
    argv = ["bisect-step", *extra] if failure == "usage: missing GOOD" else [*STEP[0](files), "-q", *extra]
    if error is not None:
        _patch(monkeypatch, STEP[1], error)
    if debug:
        monkeypatch.setenv("LLMBENCH_DEBUG", "1")
    r = llmbench(*argv)
    assert r.code == GIT_ABORT, (r.code, r.err)
