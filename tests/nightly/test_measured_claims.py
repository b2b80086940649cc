"""The nightly tier: measurement-style tests whose claim a benchmark shows, kept runnable but out of CI's path
(`python -m pytest tests/nightly`, or `nox -s nightly_tests`). Each says which benchmark shows its claim and which
faster test covers its logic. Real `llmbench worker` processes on the tiny model: minutes together."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmbench.results.storage import load_run
from tests.bisect_repo import bisect_args, bisect_env, scratch
from tests.helpers import check_a_budgeted_design, real_worker

pytestmark = [pytest.mark.slow, pytest.mark.subprocess]


@pytest.mark.slow
def test_an_a_a_run_under_a_load_that_comes_and_goes_stays_green(cli, tiny_model_dir, tmp_path):
    """Shown by benchmarks/ab_noise.py (real Qwen2.5-0.5B, a burner toggling every 15 s; benchmarks/README.md,
    "ab_noise.py"); ab's pairing logic against ground truth: tests/integration/test_ab_logic_on_fake_workers.py.

    A CPU burner switches on and off every 2 s: ab's pairs see it alike and the gate stays green; two runs one
    after the other, one of them beside the burner, fail the same gate. Two threads on two cores: a burner then
    makes the model's two OpenMP threads wait on each other (3x slower here), as on a shared CI runner."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"prompt number {i} about a river\n" for i in range(24)), encoding="utf-8")
    stop_burner = threading.Event()

    def toggle() -> None:
        while not stop_burner.is_set():
            burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            stop_burner.wait(2.0)
            burner.kill()
            burner.wait()
            stop_burner.wait(2.0)

    common = ("--max-new-tokens", "12", "-q")
    t = threading.Thread(target=toggle, daemon=True)
    t.start()
    try:
        worker = real_worker(tiny_model_dir, threads=2)
        r = cli("ab", prompts, "--base", worker, "--head", worker, *common, "--repeats", "2", "-o", tmp_path / "ab",
                "--fail-on-regression", "10")  # fmt: skip
    finally:
        stop_burner.set()
        t.join()
    assert r.returncode == 0, r.stdout + r.stderr
    run = ("run", prompts, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "2", *common)
    assert cli(*run, "-o", tmp_path / "quiet.json").returncode == 0
    # the control: the same gate on two runs one after the other, the second beside two spinners (both cores
    # busy: several times slower, so it fails even if the "quiet" run shared the machine with something else)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        assert cli(*run, "-o", tmp_path / "busy.json").returncode == 0
    finally:
        for b in burners:
            b.kill()
    r = cli("compare", tmp_path / "quiet.json", tmp_path / "busy.json", "--fail-on-regression", "10")
    assert r.returncode == 1 and "REGRESSION" in r.stdout


@pytest.mark.subprocess
def test_a_budget_chooses_the_design_says_so_and_records_it(cli, tiny_model_dir, prompt_file, tmp_path):
    """75 s of real workers. Shown by benchmarks/gate_study.py (the regression job's `--budget 5m`, benchmarks/README.md
    "gate_study.py"); the planner's logic: tests/unit/test_ab_design.py, the design it records on fake workers:
    tests/integration/test_ab_logic_on_fake_workers.py."""
    r = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir), "--budget",
            "75s", "--max-new-tokens", "4", "--warmup", "1", "-o", tmp_path / "b")  # fmt: skip
    check_a_budgeted_design(r, tmp_path / "b", "75s", 75)


@pytest.mark.subprocess
def test_ab_gates_the_load_over_processes(cli, tiny_model_dir, prompt_file, tmp_path):
    """A real worker's load, 3 s slower through benchmarks/inject. Load times per engine: benchmarks/cold_start.py;
    the load gate's logic against known loads: tests/integration/test_ab_logic_on_fake_workers.py."""
    refused = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir),
                  "--fail-on", "load_s=10", "-o", tmp_path / "one")  # fmt: skip
    assert refused.returncode == 2 and "--processes 2 or more" in refused.stderr and not (tmp_path / "one").exists()
    # a tiny model's load is ~4-5 s here (tokenizer and model code imports); +3 s is +60-70%, a gate at 25%
    args = ("--max-new-tokens", "2", "--processes", "4", "--repeats", "2", "-q", "--format", "json")
    same = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir), "--head", real_worker(tiny_model_dir), *args,
               "--fail-on", "load_s=25", "-o", tmp_path / "same")  # fmt: skip
    assert same.returncode == 0, same.stderr
    slow = cli("ab", prompt_file, "--base", real_worker(tiny_model_dir),
               "--head", real_worker(tiny_model_dir, "LLMBENCH_INJECT_LOAD_SLEEP_S=3"), *args,
               "--fail-on", "load_s=25", "-o", tmp_path / "slow")  # fmt: skip
    assert slow.returncode == 1, slow.stderr
    comp = json.loads(slow.stdout)[0]
    [gated] = [c for c in comp["gate"] if c["metric"] == "load_s"]
    assert gated["regression"] and gated["ci_low_pct"] > 0 and gated["change_pct"] > 25
    [row] = [r for r in comp["rows"] if r["metric"] == "load_s"]
    assert row["processes"] == 4 and row["new"] - row["base"] >= 2
    head = load_run(tmp_path / "slow" / "head.json")
    assert all(p["load_s"] >= 3 for p in head.config.engine_settings["processes"])
    # the same files through compare gate alike; a threshold that isn't a number is one line
    again = cli("compare", tmp_path / "slow" / "base.json", tmp_path / "slow" / "head.json", "--fail-on", "load_s=25")
    assert again.returncode == 1 and "REGRESSION" in again.stdout
    one = cli("compare", tmp_path / "slow" / "base.json", tmp_path / "slow" / "head.json", "--fail-on", "ready_s=nan")
    assert one.returncode == 2 and "finite number" in one.stderr and "Traceback" not in one.stderr


def test_no_commit_is_blamed_when_bad_is_not_slower(cli, tiny_model_dir, prompt_file, tmp_path):
    """Shown by benchmarks/bisect_bench.py (16 commits); the search's rule on a simulated measurer with known truth:
    tests/unit/test_bisect_rule.py."""
    repo, shas = scratch(tmp_path, ["ok", "ok"])
    r = cli("bisect", shas[0], shas[-1], "--repo", repo, "-o", tmp_path / "b", "-q",
            *bisect_args(tiny_model_dir, prompt_file), env=bisect_env(tmp_path))  # fmt: skip
    assert r.returncode == 1, r.stderr
    assert "nothing to bisect: BAD against GOOD" in r.stdout and "first bad commit" not in r.stdout


def test_git_bisect_run_ends_on_the_same_commit(tiny_model_dir, prompt_file, tmp_path):
    """bisect-step as git's judge, over a real repository (minutes). bisect-step's exit codes:
    tests/integration/test_bisect_inputs.py."""
    repo, shas = scratch(tmp_path, ["ok", "slow", "ok", "ok"])
    # the judge is this checkout's installed llmbench (a console script: never the checked-out tree's package,
    # which `python -m` from the repository's folder would import instead)
    judge = [str(Path(sys.executable).parent / "llmbench"), "bisect-step", shas[0], "-q",
             *bisect_args(tiny_model_dir, prompt_file)]  # fmt: skip
    env = {**os.environ, **bisect_env(tmp_path)}
    subprocess.run(["git", "-C", str(repo), "bisect", "start", shas[-1], shas[0]], check=True, capture_output=True)
    out = subprocess.run(["git", "-C", str(repo), "bisect", "run", *judge], capture_output=True, text=True, env=env,
                         cwd=repo, timeout=900)  # fmt: skip
    assert f"{shas[2]} is the first bad commit" in out.stdout, out.stdout + out.stderr
