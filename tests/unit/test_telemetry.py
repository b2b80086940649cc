"""What a token costs besides time. Without a GPU: a stand-in NVML module with a known energy counter, known
clocks and scripted clock events gives the arithmetic's ground truth (J per token, a throttle event found and
blamed by compare, a counter that is missing or goes backwards); the CPU's own cost is measured for real."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path

import pytest

from llmbench.analysis.compare import compare_runs
from llmbench.machine import telemetry
from llmbench.present import terminal as display
from llmbench.results.schema import MachineState
from llmbench.runner.loop import execute, new_track, round_robin
from tests.helpers import synthetic_run
from tests.unit.test_loop import PROMPTS, FakeBackend

ROOT = Path(__file__).resolve().parents[2]


class NotSupported(Exception):
    pass


def stand_in_nvml(*, energy_mj: list[int] | None, power_mw: int = 250_000, events: list[int] | None = None,
                  others: tuple[int, ...] = ()) -> types.ModuleType:  # fmt: skip
    """A pynvml with scripted readings: the energy counter returns ``energy_mj`` in turn (None: unsupported),
    power and clocks are constant, clock-event masks come from ``events`` in turn (then 0)."""
    m = types.ModuleType("pynvml")
    energy = list(energy_mj) if energy_mj is not None else None
    masks = list(events or [])
    m.NVML_CLOCK_SM, m.NVML_CLOCK_MEM, m.NVML_TEMPERATURE_GPU = 1, 2, 0
    m.nvmlInit = lambda: None
    m.nvmlDeviceGetHandleByIndex = lambda i: f"card{i}"
    m.nvmlDeviceGetName = lambda h: b"Stand-in H200"

    def total_energy(h):
        if energy is None:
            raise NotSupported("NVML_ERROR_NOT_SUPPORTED")
        return energy.pop(0) if len(energy) > 1 else energy[0]

    m.nvmlDeviceGetTotalEnergyConsumption = total_energy
    m.nvmlDeviceGetPowerUsage = lambda h: power_mw
    m.nvmlDeviceGetClockInfo = lambda h, which: 1980 if which == 1 else 3200
    m.nvmlDeviceGetCurrentClocksEventReasons = lambda h: masks.pop(0) if masks else 0
    m.nvmlDeviceGetTemperature = lambda h, which: 61
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=3 << 30)
    m.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=97, memory=40)
    m.nvmlDeviceGetComputeRunningProcesses = lambda h: [types.SimpleNamespace(pid=p) for p in others]
    return m


def test_joules_per_token_come_from_the_energy_counter(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[1_000_000, 1_050_000]))
    reader = telemetry.GpuReader.open("cuda:0")
    assert reader.ok and reader.name == "Stand-in H200"
    reader.start()
    samples = [{"t_s": t, **reader.sample()} for t in (0.5, 1.0, 1.5)]
    reader.stop()
    gpu = telemetry.gpu_summary(reader, samples, output_tokens=100, torch_peaks={})
    assert gpu["energy_j"] == 50.0 and gpu["j_per_output_token"] == 0.5 and gpu["output_tokens_per_j"] == 2.0
    assert gpu["energy_method"].startswith("counter") and gpu["energy_missing"] is None
    assert gpu["power_w_mean"] == 250.0 and gpu["power_integral_j"] == 250.0  # 250 W over the 1 s of samples
    assert gpu["sm_clock_mhz_min"] == 1980 and gpu["clock_events"] == [] and telemetry.gpu_warnings(gpu) == []


def test_a_card_without_a_counter_records_null_with_the_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=None))
    reader = telemetry.GpuReader.open("cuda")
    reader.start()
    samples = [{"t_s": t, **reader.sample()} for t in (0.0, 2.0)]
    reader.stop()
    gpu = telemetry.gpu_summary(reader, samples, output_tokens=10, torch_peaks={})
    assert gpu["energy_j"] is None and gpu["j_per_output_token"] is None  # never 0
    assert "no energy counter" in gpu["energy_missing"] and "NOT_SUPPORTED" in gpu["energy_missing"]
    assert gpu["power_integral_j"] == 500.0 and "energy" in gpu["unsupported"]


def test_a_machine_without_the_nvidia_driver_records_null_with_the_reason():
    pytest.importorskip("pynvml")  # the real binding (the dev extra); this machine has no driver library
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("an NVIDIA driver is loaded here")
    reader = telemetry.GpuReader.open("cuda:0")
    assert not reader.ok and "NVML unavailable" in reader.missing["nvml"]
    reader.start()
    reader.stop()
    gpu = telemetry.gpu_summary(reader, [], output_tokens=10, torch_peaks={"allocated": 5, "reserved": 8})
    assert gpu["energy_j"] is None and gpu["energy_missing"].startswith("NVML unavailable")
    assert gpu["torch_max_allocated_bytes"] == 5 and gpu["torch_max_reserved_bytes"] == 8


def test_a_counter_that_goes_backwards_is_not_trusted(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[5_000, 1_000]))
    reader = telemetry.GpuReader.open("cuda:0")
    reader.start()
    samples = [{"t_s": t, **reader.sample()} for t in (0.0, 0.4)]
    reader.stop()
    gpu = telemetry.gpu_summary(reader, samples, output_tokens=20, torch_peaks={})
    assert gpu["energy_j"] == 100.0 and gpu["energy_method"].startswith("integral of the power samples")
    assert gpu["j_per_output_token"] == 5.0


def test_a_throttle_event_warns_and_compare_blames_it(monkeypatch):
    # 0x20: software thermal slowdown, in the second of three samples
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[0, 9_000], events=[0, 0x20, 0], others=(7,)))
    reader = telemetry.GpuReader.open("cuda:0")
    reader.start()
    samples = [{"t_s": t, **reader.sample()} for t in (0.0, 0.5, 1.0)]
    reader.stop()
    gpu = telemetry.gpu_summary(reader, samples, output_tokens=30, torch_peaks={})
    assert gpu["slowdowns"] == ["sw_thermal_slowdown"] and gpu["other_processes"] == [7]
    warnings = telemetry.gpu_warnings(gpu)
    assert any("clocks were slowed" in w for w in warnings) and any("other processes" in w for w in warnings)
    base = synthetic_run(n=30, noise=0.02, seed=1, tpot_ms=20.0)
    new = synthetic_run(n=30, noise=0.02, seed=2, tpot_ms=24.0)  # 20% slower per token
    base.machine, new.machine = MachineState(gpu={"slowdowns": []}), MachineState(gpu=gpu)
    notes = [n for n in compare_runs(base, new).machine if n.metric == "tpot_ms"]
    assert notes and "the GPU's clocks were slowed (sw_thermal_slowdown" in notes[0].explanation


def test_the_loop_records_the_card_on_a_gpu_run(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[100_000, 112_000]))
    backend = FakeBackend(tokens=4, delay_s=0.3)
    backend.gpu_device = "cuda:0"
    track = new_track(backend, PROMPTS, None)
    (run,) = asyncio.run(execute([track], round_robin([track], PROMPTS, 1), PROMPTS))
    gpu = run.machine.gpu
    assert gpu["energy_j"] == 12.0 and gpu["j_per_output_token"] == 12.0 / (4 * 4)  # 4 requests of 4 tokens
    assert run.machine.gpu_samples and run.machine.gpu_samples[0]["sm_clock_mhz"] == 1980


def test_runs_sharing_one_window_are_not_charged_the_windows_joules(monkeypatch):
    # a sweep's setups (a scan's points) measured interleaved on one card: 12 J over both runs' 32 tokens
    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[100_000, 112_000]))
    tracks = []
    for label in ("a: ", "b: "):
        backend = FakeBackend(label=label, tokens=4, delay_s=0.05)
        backend.gpu_device = "cuda:0"
        tracks.append(new_track(backend, PROMPTS, None))
    runs = asyncio.run(execute(tracks, round_robin(tracks, PROMPTS, 1), PROMPTS))
    for run in runs:
        gpu = run.machine.gpu
        # was 12 J / this run's 16 tokens = 0.75 J per token: both runs charged every joule, twice the card's
        assert gpu["j_per_output_token"] is None and gpu["output_tokens_per_j"] is None and gpu["energy_j"] is None
        assert gpu["window_energy_j"] == 12.0 and gpu["shared_by_runs"] == 2
        assert "shared by 2 runs" in gpu["energy_missing"]
        (line,) = [x for x in display.cost_lines(run) if x.startswith("GPU")]
        assert "shared by 2 runs" in line and "J per output token" not in line
    alone = telemetry.gpu_summary(telemetry.GpuReader.open("cuda:0"), [], 10, {}, runs_in_window=1)
    assert "window_energy_j" not in alone and "shared_by_runs" not in alone


def test_report_draws_power_and_clocks_beside_the_timeline(monkeypatch):
    import matplotlib

    matplotlib.use("Agg")
    from llmbench.present.html import build_report, machine_svg

    monkeypatch.setitem(sys.modules, "pynvml", stand_in_nvml(energy_mj=[0, 32_000], events=[0, 0, 0x4, 0]))
    reader = telemetry.GpuReader.open("cuda:0")
    reader.start()
    samples = [{"t_s": t, **reader.sample()} for t in (0.5, 1.0, 1.5, 2.0)]
    reader.stop()
    run = synthetic_run(n=4, tpot_ms=20.0)
    tokens = sum(r.output_tokens for r in run.requests)
    run.machine = MachineState(gpu=telemetry.gpu_summary(reader, samples, tokens, {}), gpu_samples=samples)
    svg = machine_svg(run)
    assert svg is not None and "GPU power, W" in svg and "GPU SM clock, MHz" in svg and "clock event" in svg
    html = build_report([("gpu-run", run)])
    assert html.index("token timeline") < html.index("GPU power, W")  # the machine beside the tokens
    assert f"{32.0 / tokens:.4g} J per output token" in html
