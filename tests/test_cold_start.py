"""The cold start (issue 36): a run's load phase by phase, its warm-up and the first request after loading, in its
JSON and on show's and compare's lines; ``ab --fail-on load_s`` over processes, each process one sample. The
slow load is a real one: benchmarks/inject's LLMBENCH_INJECT_LOAD_SLEEP_S makes a causal LM's first eval()
(inside from_pretrained, so inside the load) sleep, and the phases must put it where it happened."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from llmbench.analysis.startup import process_change
from llmbench.results.metrics import cold_start
from llmbench.results.storage import load_run

INJECT = Path(__file__).resolve().parents[1] / "benchmarks" / "inject"
PHASES = ("locate_s", "config_tokenizer_s", "model_code_s", "weights_s", "build_s")


def _worker(tiny_model_dir, *env: str) -> str:
    command = f"{sys.executable} -m llmbench worker -m {tiny_model_dir} --device cpu --dtype float32 --threads 1"
    return f"env PYTHONPATH={INJECT} {' '.join(env)} {command}" if env else command


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


@pytest.mark.subprocess
def test_ab_gates_the_load_over_processes(cli, tiny_model_dir, prompt_file, tmp_path):
    refused = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", _worker(tiny_model_dir),
                  "--fail-on", "load_s=10", "-o", tmp_path / "one")  # fmt: skip
    assert refused.returncode == 2 and "--processes 2 or more" in refused.stderr and not (tmp_path / "one").exists()
    # a tiny model's load is ~4-5 s here (tokenizer and model code imports); +3 s is +60-70%, a gate at 25%
    args = ("--max-new-tokens", "2", "--processes", "4", "--repeats", "2", "-q", "--format", "json")
    same = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", _worker(tiny_model_dir), *args,
               "--fail-on", "load_s=25", "-o", tmp_path / "same")  # fmt: skip
    assert same.returncode == 0, same.stderr
    slow = cli("ab", prompt_file, "--base", _worker(tiny_model_dir),
               "--head", _worker(tiny_model_dir, "LLMBENCH_INJECT_LOAD_SLEEP_S=3"), *args,
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


def _run(*processes: dict) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(engine_settings={"processes": list(processes)}))


def test_the_cold_clock_runs_only_in_a_process_started_for_the_command(monkeypatch):
    from llmbench.core import process

    monkeypatch.setattr(process, "_COLD", {"armed": False, "spent": False})
    assert process.cold_clock() is None  # a notebook's or a library's process: its age is not a cold start
    process.arm_cold_start()
    first = process.cold_clock()
    assert first is not None and first > 0 and process.cold_clock(ready=True) >= first
    assert process.cold_clock() is None  # the next load (a sweep's next setup) is not cold


def test_the_load_row_pairs_processes_and_skips_what_is_not_a_time():
    base = _run({"load_s": 1.0}, {"load_s": 2.0}, {"load_s": float("nan")}, {"load_s": -1}, {"load_s": True})
    new = _run({"load_s": 2.0}, {"load_s": 4.0}, {"load_s": 3.0}, {"load_s": 3.0}, {"load_s": 3.0})
    b, n, change, low, high, k = process_change(base, new, "load_s")
    assert (b, n, k) == (1.5, 3.0, 2) and change == pytest.approx(100.0) and low == high == pytest.approx(100.0)
    assert process_change(_run({"load_s": 1.0}), _run({"load_s": 2.0}), "load_s") is None  # one pair: no interval
    assert process_change(_run(), _run(), "ready_s") is None
    assert process_change(SimpleNamespace(config=None), new, "load_s") is None


def test_the_lean_gguf_reader_agrees_with_ggufs_own(tmp_path):
    """sizes.gguf_tensors skips the metadata instead of decoding it (gguf's reader took ~19 s of every llama.cpp
    cold start for a 151,936-token vocabulary): on a file gguf's writer made, with every kind of metadata and
    tensors stored plain and quantized, both readers give each tensor the same elements and bytes."""
    import gguf
    import numpy as np

    from llmbench.engines.sizes import gguf_sizes, gguf_tensors

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(3000)])
    w.add_array("nested", [[1, 2], [3]])
    w.add_uint8("u8", 1)
    w.add_int64("i64", -2)
    w.add_float64("f64", 0.5)
    w.add_bool("flag", True)
    w.add_string("name", "tiny")
    w.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    w.add_tensor("output.weight", np.ones((64, 32), dtype=np.float16))
    q8 = gguf.GGMLQuantizationType.Q8_0
    block, size = gguf.GGML_QUANT_SIZES[q8]
    w.add_tensor("blk.0.ffn.weight", np.zeros((4, 64 // block * size), dtype=np.uint8), raw_dtype=q8)  # 4 x 64
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    theirs = {t.name: (int(t.n_elements), int(t.n_bytes)) for t in gguf.GGUFReader(str(path)).tensors}
    assert gguf_tensors(path) == theirs and len(theirs) == 3
    params, total, decode = gguf_sizes(path)
    assert params == 64 * 32 * 2 + 256 and decode == total - 64 * 32 * 4  # untied: the embedding is gathered
    (tmp_path / "no.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="not a GGUF"):
        gguf_tensors(tmp_path / "no.gguf")
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="ends early"):
        gguf_tensors(tmp_path / "cut.gguf")
