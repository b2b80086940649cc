"""The cold start (issue 36): a run's load phase by phase, its warm-up and the first request after loading, in its
JSON and on show's and compare's lines; ``ab --fail-on load_s``'s row over processes, each process one sample. The
slow load is a real one: benchmarks/inject's LLMBENCH_INJECT_LOAD_SLEEP_S makes a causal LM's first eval()
(inside from_pretrained, so inside the load) sleep, and the phases must put it where it happened.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_cold_start.py."""

from __future__ import annotations

import math

import pytest

from llmbench.results.metrics import cold_start
from llmbench.results.storage import load_run
from tests.helpers import INJECT
from tests.unit.test_cold_start import PHASES


@pytest.mark.subprocess
def test_a_run_records_its_cold_start_phase_by_phase(cli, tiny_model_dir, prompt_file, tmp_path):
    common = ("-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1",
              "--max-new-tokens", "3", "-q")  # fmt: skip
    slow = cli("run", prompt_file, *common, "-o", tmp_path / "slow.json", process=True,
               env={"PYTHONPATH": str(INJECT), "LLMBENCH_INJECT_LOAD_SLEEP_S": "0.8"})  # fmt: skip
    assert slow.returncode == 0, slow.stderr
    run = load_run(tmp_path / "slow.json")
    phases = run.load.phases
    assert all(phases[k] is not None and phases[k] >= 0 for k in PHASES)
    # the phases add up to the load (each rounded to a millisecond), and the sleep is in the weights' phase
    assert math.isclose(sum(phases[k] for k in PHASES), run.load.seconds, abs_tol=0.005)
    assert phases["weights_s"] >= 0.8 and run.load.seconds >= 0.8
    assert phases["before_load_s"] > 0  # the interpreter and imports came first
    assert run.load.startup_s >= phases["before_load_s"] + run.load.seconds
    # one warm-up (the default): its time and its TTFT, the first request the loaded model served
    assert phases["warmup_s"] > 0 and phases["first_ttft_ms"] == run.warmup_requests[0].ttft_ms
    c = cold_start(run)
    assert c["ready_s"] == run.load.startup_s and c["load_s"] == run.load.seconds
    assert c["first_ttft_ms"] == run.warmup_requests[0].ttft_ms

    plain = cli("run", prompt_file, *common, "--warmup", "0", "-o", tmp_path / "plain.json", process=True)
    assert plain.returncode == 0, plain.stderr
    cold = load_run(tmp_path / "plain.json")
    assert cold.load.phases["weights_s"] < 0.8 and cold.load.phases.get("warmup_s") is None
    assert cold_start(cold)["first_ttft_ms"] == cold.requests[0].ttft_ms  # no warm-up: the first measured one

    shown = cli("show", tmp_path / "slow.json")
    line = next(x for x in shown.stdout.splitlines() if x.startswith("cold start:"))
    assert "weights" in line and "warm-up" in line and "the first request's TTFT" in line
    compared = cli("compare", tmp_path / "plain.json", tmp_path / "slow.json")
    assert compared.returncode == 0, compared.stderr
    assert "cold start (each run's first process, information): ready" in compared.stdout
    assert "load s" not in compared.stdout  # one process a side: no row over processes, so no gate on it
    ungated = cli("compare", tmp_path / "plain.json", tmp_path / "slow.json", "--fail-on", "load_s=10")
    assert ungated.returncode == 2 and "lack 2 or more processes" in ungated.stderr
    assert len(ungated.stderr.strip().splitlines()) == 1
