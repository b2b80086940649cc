"""The public Python API: what a notebook or a CI script calls, and the shape of the package behind it."""

from __future__ import annotations

import ast
import asyncio
import gc
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import llmbench
from tests.delayed_model import delayed_loaded
from tests.helpers import synthetic_run

PACKAGE = Path(llmbench.__file__).parent


@pytest.mark.subprocess
def test_import_is_light_and_names_load_on_use():
    code = (
        "import sys, llmbench\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules and 'pydantic' not in sys.modules\n"
        "llmbench.compare_runs, llmbench.load_run, llmbench.Run, llmbench.RunOptions, llmbench.Stop\n"
        "assert 'torch' not in sys.modules, 'reading and comparing runs imported torch'\n"
        "assert set(llmbench.__all__) <= set(dir(llmbench))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_measure_a_list_of_prompts_writes_no_file(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    handlers = (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM))
    frozen = gc.get_freeze_count()
    run = llmbench.measure(["one", "two", "three"], model=str(tiny_model_dir), device="cpu", dtype="float32",
                           threads=1, max_new_tokens=4, ignore_eos=True)  # fmt: skip
    assert isinstance(run, llmbench.Run) and len(run.requests) == 3 and run.summary.requests == 3
    assert all(r.output_tokens == 4 for r in run.requests) and run.complete
    assert list(tmp_path.iterdir()) == []  # no output asked, none written
    # no process-wide side effect unless asked for (stop_on_signals, frozen_gc)
    assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == handlers
    assert gc.get_freeze_count() == frozen


@pytest.mark.slow
def test_measure_random_weights_as_the_issue_asks():
    run = llmbench.measure(["Why is the sky blue?", "你好"], weights="random", max_new_tokens=4, device="cpu",
                           dtype="bfloat16")  # fmt: skip
    assert len(run.requests) == 2 and run.summary is not None and run.config.weights == "random"
    assert all(r.output_tokens == 4 for r in run.requests)  # random weights: fixed length by default


def test_ameasure_inside_a_running_loop_against_serve(qwen_tokenizer, tmp_path):
    from llmbench.serve import create_app
    from tests.servers import BackgroundServer

    lm = delayed_loaded(qwen_tokenizer, prefill_ms=30.0, decode_ms=10.0)
    with BackgroundServer(create_app(lm, max_queue=2)) as url:

        async def notebook_cell():
            ticks = 0

            async def ticker():  # the notebook's own loop stays responsive while the run measures
                nonlocal ticks
                while True:
                    await asyncio.sleep(0.01)
                    ticks += 1

            t = asyncio.ensure_future(ticker())
            run = await llmbench.ameasure(["hi", "there"], endpoint=url, max_new_tokens=6, ignore_eos=True,
                                          output=tmp_path / "ep.json")  # fmt: skip
            # the blocking face works inside a running loop too (it uses a helper thread)
            again = llmbench.measure(["hi"], endpoint=url, max_new_tokens=3, ignore_eos=True, warmup=0)
            t.cancel()
            return run, again, ticks

        run, again, ticks = asyncio.run(notebook_cell())
    assert run.config.mode == "endpoint" and len(run.requests) == 2 and run.complete
    assert again.requests[0].output_tokens == 3 and ticks > 5
    assert llmbench.load_run(tmp_path / "ep.json").run_id == run.run_id


def test_an_in_process_run_leaves_the_event_loop_free(qwen_tokenizer):
    lm = delayed_loaded(qwen_tokenizer, prefill_ms=40.0, decode_ms=20.0)

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.005)
                ticks += 1

        t = asyncio.ensure_future(ticker())
        run = await llmbench.ameasure(["a prompt"], model=lm, max_new_tokens=10, ignore_eos=True, warmup=0)
        t.cancel()
        return run, ticks

    run, ticks = asyncio.run(main())
    # generate() ran on the generation thread: the loop ticked all through the ~220 ms of forward passes
    assert run.requests[0].output_tokens == 10 and ticks >= 10


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
        r.returncode == 2 and "--concurrency, --api-key-env, --tokenizer: options of --endpoint runs only" in r.stderr
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
