"""llmbench sweep and the knobs it turns (attention, static cache, torch.compile, int8), on a tiny real Qwen2.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_sweep.py."""

import json

import pytest

from llmbench.results.storage import load_run


@pytest.mark.slow
def test_sweep_writes_a_run_per_setup_and_ranks_them(cli, tiny_model_dir, prompt_file, tmp_path, probe_on):
    out = tmp_path / "sweep"
    r = cli(
        "sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32,bfloat16", "--threads", "1,2",
        "--max-new-tokens", "4", "--ignore-eos", "--rounds", "2", "-o", out, "-q",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "sweep.json").read_text(encoding="utf-8"))
    assert record["complete"] is True and record["rounds"] == 2
    rows = record["results"]
    assert {(x["dtype"], x["threads"]) for x in rows} == {(d, t) for d in ("float32", "bfloat16") for t in (1, 2)}
    runs = {}
    for row in rows:
        run = load_run(out / row["run_file"])
        runs[row["label"]] = run
        assert run.complete and len(run.requests) == 2 * 3
        assert (run.config.dtype, run.config.threads) == (row["dtype"], row["threads"])
        assert row["tpot_ms_mean"] == pytest.approx(run.summary.tpot_ms.mean)
        assert row["ttft_ms_mean"] == pytest.approx(run.summary.ttft_ms.mean)
        assert row["tpot_efficiency"] is not None and run.machine.probe_before.threads == row["threads"]
    for metric in ("tpot_ms", "ttft_ms"):
        best = min(rows, key=lambda x: x[f"{metric}_mean"])
        assert record["best"][metric]["label"] == best["label"]
        assert record["best_margin"][metric]["runner_up"] != best["label"]
    assert record["pareto"] and record["best"]["tpot_ms"]["label"] in record["pareto"]
    # interleaved: every setup finished round 0 before any started round 1
    first_round_end = max(q.started_s for run in runs.values() for q in run.requests if q.repeat == 0)
    second_round_start = min(q.started_s for run in runs.values() for q in run.requests if q.repeat == 1)
    assert first_round_end < second_round_start
    assert "best TPOT:" in r.stdout and "sweep by TTFT" in r.stdout
    # the runs are ordinary runs: compare tells which setting differs
    a, b = (out / rows[0]["run_file"]), (out / rows[-1]["run_file"])
    c = cli("compare", a, b)
    assert c.returncode == 0 and "setup differs: dtype" in c.stdout and "setup differs: threads" in c.stdout
    assert record["varied"] == ["dtype", "threads"]  # from the schema's list of what compare checks
    # a finished sweep is never overwritten
    again = cli("sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "-o", out, "-q")
    assert again.returncode == 2 and "already holds a sweep" in again.stderr
