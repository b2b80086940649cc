"""benchmarks/regroup.py: the pairs it reads from a study's runs, and the floor it hands the planner."""

from __future__ import annotations

import importlib.util
import json
import math
import random
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "regroup.py"


@pytest.fixture(scope="module")
def regroup():
    spec = importlib.util.spec_from_file_location("llmbench_regroup_test", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _req(i: int, tpot: float, ttft: float, process: int = 0) -> dict:
    return {"process": process, "prompt_index": i, "repeat": 0, "tpot_ms": tpot, "ttft_ms": ttft}


def test_extract_pairs_requests_by_process_prompt_and_repeat_and_centres_each_run(regroup, tmp_path):
    run = tmp_path / "study" / "run-000"
    run.mkdir(parents=True)
    plan = {"start_s": 4.0, "pair_s": 4.0, "ttft_pair_s": 0.2, "spent_s": 20.0, "warmup_s": 3.0}
    base = {"config": {"ab": {"budget_plan": plan}}, "environment": {"cpu_model": "X"},
            "requests": [_req(0, 100.0, 10.0), _req(1, 100.0, 10.0), _req(2, 100.0, 10.0)],
            "ttft_requests": [_req(0, 0.0, 10.0)]}  # fmt: skip
    # the head is 3% slower per token, one pair 10% more; listed in another order, with a pair base lacks
    head = {"requests": [_req(2, 113.3, 10.0), _req(0, 103.0, 10.0), _req(1, 103.0, 10.0), _req(5, 1.0, 1.0)],
            "ttft_requests": [_req(0, 0.0, 11.0)]}  # fmt: skip
    (run / "base.json").write_text(json.dumps(base))
    (run / "head.json").write_text(json.dumps(head))
    (tmp_path / "study" / "run-001").mkdir()  # a run whose files are gone: skipped
    data = regroup.extract([tmp_path / "study"])
    assert len(data["runs"]) == 1
    r = data["runs"][0]
    assert r["run"] == "study/run-000" and r["cpu"] == "X" and r["costs"]["ttft_pair_s"] == 0.2
    # 100 ln(head/base) less the run's median (the slowdown): 0, 0 and the outlier pair's extra
    assert r["tpot"][:2] == [0.0, 0.0] and r["tpot"][2] == pytest.approx(100 * math.log(1.133 / 1.03), abs=1e-3)
    assert len(r["ttft"]) == 3 and r["ttft_only"] == [pytest.approx(100 * math.log(1.1), abs=1e-3)]


def test_the_floor_reaches_the_planner(regroup):
    rng = random.Random(0)
    pairs = [rng.gauss(0, 2) for _ in range(60)]
    run = {"costs": {"start_s": 0.5, "pair_s": 4.0, "ttft_pair_s": 0.2, "spent_s": 20.0}, "tpot": pairs,
           "ttft": pairs, "ttft_only": []}  # fmt: skip
    designs = [regroup.regrouped(run, floor, random.Random(1), draws=5) for floor in (2, 5)]
    for d, floor in zip(designs, (2, 5), strict=True):
        assert d["pairs"] // d["processes"] >= floor and d["tpot_mdc_pct"] > 0
    assert designs[1]["processes"] < designs[0]["processes"]  # a higher floor: fewer processes of more pairs
