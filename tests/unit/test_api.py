"""The public Python API: what a notebook or a CI script calls, and the shape of the package behind it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import llmbench
from tests.helpers import synthetic_run

PACKAGE = Path(llmbench.__file__).parent


@pytest.mark.parametrize("seed", [1, 2])
def test_gate_is_the_decision_the_cli_exit_code_reports(cli, tmp_path, seed):
    base = synthetic_run(n=20, noise=0.1, seed=seed)
    for name, tpot in (("same", 20.0), ("slow", 24.0)):
        new = synthetic_run(n=20, noise=0.1, seed=seed + 10, tpot_ms=tpot)
        llmbench.save_run(base, tmp_path / "base.json")
        llmbench.save_run(new, tmp_path / f"{name}.json")
        comp = llmbench.compare_runs(
            llmbench.load_run(tmp_path / "base.json"), llmbench.load_run(tmp_path / f"{name}.json")
        )
        cases = (
            ({"fail_on_regression": 10}, ["--fail-on-regression", "10"]),
            ({"fail_on": {"tpot_ms": 5}}, ["--fail-on", "tpot_ms=5"]),
            ({"fail_on_regression": 10, "stat": "p50"}, ["--fail-on-regression", "10", "--gate-stat", "p50"]),
        )
        for kw, args in cases:
            regressions = comp.gate(**kw)
            r = cli("compare", tmp_path / "base.json", tmp_path / f"{name}.json", *args)
            assert r.returncode == (1 if regressions else 0), (name, kw, r.stdout)
            assert all(isinstance(c, llmbench.GateCheck) and c.regression for c in regressions)
        assert bool(comp.gate(fail_on_regression=10)) == (name == "slow")


def test_flags_of_the_other_mode_are_refused_both_ways(cli, prompt_file):
    r = cli("run", prompt_file, "--concurrency", "4", "--api-key-env", "X", "--tokenizer", "t", "--weights", "random")
    assert (
        r.returncode == 2 and "--api-key-env, --concurrency, --tokenizer: options of --endpoint runs only" in r.stderr
    )
    r = cli("run", prompt_file, "--endpoint", "http://127.0.0.1:9", "--allow-pickle", "--trust-remote-code",
            "--allow-offload", "--quantize", "int8")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    for flag in ("--allow-pickle", "--trust-remote-code", "--allow-offload", "--quantize"):
        assert flag in r.stderr


def _imports(tree, package: Path) -> set[str]:
    """The llmbench modules a module imports at run time (``if TYPE_CHECKING:`` blocks never run)."""
    out: set[str] = set()
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            continue
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "llmbench":
            subs = [f"{node.module}.{a.name}" for a in node.names]
            real = [m for m in subs if (package.parent / m.replace(".", "/")).with_suffix(".py").exists()]
            out |= set(real) if real else {node.module}
        else:
            out |= _imports(node, package)
    return out


def _functions(tree):
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node


def test_the_package_is_typed():
    assert (PACKAGE / "py.typed").is_file()
