"""What a token costs besides time. Without a GPU: a stand-in NVML module with a known energy counter, known
clocks and scripted clock events gives the arithmetic's ground truth (J per token, a throttle event found and
blamed by compare, a counter that is missing or goes backwards); the CPU's own cost is measured for real.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_telemetry.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from llmbench.machine import telemetry
from llmbench.present import terminal as display
from llmbench.results.schema import MachineState
from tests.helpers import synthetic_run
from tests.unit.test_telemetry import ROOT, stand_in_nvml


def test_an_in_process_run_records_what_its_tokens_cost_the_cpu(tiny_model_dir, prompt_file):
    import llmbench

    run = llmbench.measure(prompt_file, model=str(tiny_model_dir), dtype="float32", threads=1, max_new_tokens=8,
                           ignore_eos=True, warmup=0)  # fmt: skip
    assert all(r.cpu_ms is not None and r.cpu_ms > 0 for r in run.requests)
    cpu = run.cpu
    assert cpu["cpu_ms_per_output_token"] == pytest.approx(sum(r.cpu_ms for r in run.requests) / (3 * 8), rel=1e-3)
    assert 0 < cpu["cores_busy"] <= 4
    if not Path("/sys/class/powercap").is_dir():  # this project's VMs
        assert cpu["energy_j"] is None and "no RAPL zone" in cpu["energy_missing"]
    assert run.machine.gpu is None  # no card here: nothing pretended


@pytest.mark.subprocess
def test_gpu_check_stops_at_once_without_cuda(tmp_path):
    import shutil

    if shutil.which("nvidia-smi"):
        pytest.skip("a CUDA machine: the script runs for real there")
    r = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu_check.sh")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120, env={"PATH": "/usr/bin:/bin", "OUT": str(tmp_path / "out"),
                                         "PYTHON": sys.executable})  # fmt: skip
    lines = [ln for ln in r.stderr.strip().splitlines() if ln.strip()]
    assert r.returncode != 0 and len(lines) == 1 and "no CUDA" in lines[0]


def test_show_draws_power_and_clocks_and_lists_energy_per_token(monkeypatch, tmp_path):
    from llmbench.results.storage import load_run, save_run

    # power ramps 100 -> 300 W, a thermal slowdown in the last two of eight samples
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[0, 64_000], events=[0] * 6 + [0x20, 0x20]))
    reader = telemetry.GpuReader.open("cuda:0")
    reader.start()
    samples = []
    for i in range(8):
        sample = reader.sample()
        sample["power_w"] = 100.0 + i * 200 / 7
        samples.append({"t_s": i * 0.5, **sample})
    reader.stop()
    run = synthetic_run(n=8, noise=0.0, seed=1, tpot_ms=20.0)
    gpu = telemetry.gpu_summary(reader, samples, output_tokens=sum(r.output_tokens for r in run.requests),
                                torch_peaks={})  # fmt: skip
    run.machine = MachineState(gpu=gpu, gpu_samples=samples)
    path = tmp_path / "gpu-run.json"
    save_run(run, path)
    lines = display.machine_lines(load_run(path, scalars_only=True))
    power = next(x for x in lines if "GPU power" in x)
    assert "▁" in power and "█" in power and power.index("▁") < power.index("█") and "100-300 W" in power
    assert next(x for x in lines if "slowed" in x).endswith("!!")
    (cost,) = [x for x in display.cost_lines(run) if x.startswith("GPU")]
    tokens = sum(r.output_tokens for r in run.requests)
    assert gpu["energy_j"] == 64.0 and f"{64.0 / tokens:.4g} J per output token" in cost
    r = subprocess.run([sys.executable, "-m", "llmbench", "show", str(path)], capture_output=True, text=True,
                       timeout=60, cwd=ROOT)  # fmt: skip
    assert r.returncode == 0 and "J per output token" in r.stdout and "SM clock" in r.stdout
