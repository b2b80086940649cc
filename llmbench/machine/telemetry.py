"""What a token costs besides time: the GPU's energy, clocks, temperature and memory (NVIDIA's management library,
``nvidia-ml-py``: ``import pynvml``), the CPU's time and, where the kernel exposes it, its package energy (RAPL,
``/sys/class/powercap``).

- **GPU**: :class:`GpuReader` reads one card; the machine sampler calls :meth:`GpuReader.sample` with its own
  samples (power, SM and memory clocks, clock-event reasons, temperature, memory used, utilization, other
  processes on the card). Energy comes from the card's counter (``nvmlDeviceGetTotalEnergyConsumption``, mJ
  since the driver loaded) read at the start and end of the measured window; a card or driver without it gives
  ``energy_j: null`` with the reason, never 0 (the power samples' integral is recorded beside it, named as such).
  A counter that went backwards (wrapped, or the driver reloaded) is not trusted: the power integral is used and
  the record says so.
- **CPU**: this process's CPU time (user + system) over the measured window, per output token and per request,
  and the cores it kept busy; the package energy from RAPL where it can be read; on a VM without powercap (this
  project's machines) ``energy_j: null`` and the reason.

Nothing here imports torch; ``pynvml`` is imported only when a run is on a CUDA device.
"""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# NVML's clock-event (throttle) reasons, by bit; the ones that slow a kernel down are named "slowdown" below
CLOCK_EVENTS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown", 0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}  # fmt: skip
SLOWDOWNS = {"sw_power_cap", "hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"}


def clock_event_names(mask: int) -> list[str]:
    """The named reasons set in an NVML clock-event mask."""
    return [name for bit, name in CLOCK_EVENTS.items() if mask & bit]


@dataclass
class GpuReader:
    """One CUDA card through NVML. ``device_index`` is CUDA's; NVML numbers cards by PCI order, which
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes the same (the common case: one card)."""

    device_index: int = 0
    nvml: Any = None
    handle: Any = None
    name: str | None = None
    missing: dict[str, str] = field(default_factory=dict)  # what this card/driver can't give, and why
    energy_start_mj: int | None = None
    energy_end_mj: int | None = None
    pid: int = field(default_factory=os.getpid)

    @classmethod
    def open(cls, device: str) -> GpuReader | None:
        """The reader for ``device`` ("cuda:N"), or None off CUDA; a reader with ``missing["nvml"]`` when NVML
        can't be used (not installed, no driver)."""
        if not device.startswith("cuda"):
            return None
        index = int(device.split(":")[1]) if ":" in device else 0
        reader = cls(device_index=index)
        try:
            import pynvml
        except ImportError:
            reader.missing["nvml"] = "nvidia-ml-py is not installed: pip install 'llmbench[gpu]'"
            return reader
        try:
            pynvml.nvmlInit()
            reader.handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(reader.handle)
            reader.name = name.decode() if isinstance(name, bytes) else str(name)
        except Exception as e:  # NVMLError and its many subclasses: no driver, no such card
            reader.missing["nvml"] = f"NVML unavailable: {e}"
            return reader
        reader.nvml = pynvml
        return reader

    @property
    def ok(self) -> bool:
        return self.nvml is not None

    def _read(self, key: str, fn: Any, *args: Any) -> Any:
        """One NVML query; None (and the reason, once) when the card or driver does not support it."""
        if key in self.missing:
            return None
        try:
            return fn(self.handle, *args)
        except Exception as e:  # NVMLError_NotSupported, NVMLError_NoPermission, ...
            self.missing[key] = f"{type(e).__name__}: {e}".strip()
            return None

    def energy_mj(self) -> int | None:
        return self._read("energy", self.nvml.nvmlDeviceGetTotalEnergyConsumption) if self.ok else None

    def start(self) -> None:
        """At the start of the measured window: the energy counter."""
        self.energy_start_mj = self.energy_mj()

    def stop(self) -> None:
        self.energy_end_mj = self.energy_mj()

    def sample(self) -> dict[str, Any]:
        """One reading of the card (None where unsupported)."""
        if not self.ok:
            return {}
        n = self.nvml
        power = self._read("power", n.nvmlDeviceGetPowerUsage)
        mem = self._read("memory", n.nvmlDeviceGetMemoryInfo)
        util = self._read("utilization", n.nvmlDeviceGetUtilizationRates)
        reasons = self._read("clock_events", n.nvmlDeviceGetCurrentClocksEventReasons)
        procs = self._read("processes", n.nvmlDeviceGetComputeRunningProcesses)
        return {
            "power_w": power / 1000.0 if power is not None else None,
            "sm_clock_mhz": self._read("sm_clock", n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_SM),
            "mem_clock_mhz": self._read("mem_clock", n.nvmlDeviceGetClockInfo, n.NVML_CLOCK_MEM),
            "clock_events": clock_event_names(int(reasons)) if reasons is not None else None,
            "temperature_c": self._read("temperature", n.nvmlDeviceGetTemperature, n.NVML_TEMPERATURE_GPU),
            "memory_used_bytes": int(mem.used) if mem is not None else None,
            "utilization_pct": float(util.gpu) if util is not None else None,
            "other_processes": sorted({int(p.pid) for p in procs if int(p.pid) != self.pid}) if procs is not None
            else None,
        }  # fmt: skip


def gpu_summary(reader: GpuReader, samples: list[dict[str, Any]], output_tokens: int,
                torch_peaks: dict[str, int | None], runs_in_window: int = 1) -> dict[str, Any]:  # fmt: skip
    """The run's GPU record: energy (J) with its method, J per output token and tokens per J, power and clock
    ranges, the clock events seen, temperature, memory peaks (the card's and torch's), other processes.
    ``runs_in_window`` > 1: the counter spanned runs measured together (see :func:`share_window`)."""
    energy = method = None
    reason = reader.missing.get("nvml")
    s, e = reader.energy_start_mj, reader.energy_end_mj
    integral = _power_integral(samples)
    if reader.ok and s is not None and e is not None and e >= s:
        energy, method = (e - s) / 1000.0, "counter (nvmlDeviceGetTotalEnergyConsumption)"
    elif reader.ok and s is not None and e is not None:
        reason = "the energy counter went backwards (wrapped, or the driver reloaded): not trusted"
        if integral is not None:
            energy, method = integral, "integral of the power samples (the counter went backwards)"
    elif reader.ok:
        reason = "this card or driver has no energy counter: " + reader.missing.get("energy", "unsupported")
    events = sorted({name for x in samples for name in (x.get("clock_events") or [])})
    others = sorted({pid for x in samples for pid in (x.get("other_processes") or [])})

    def values(key: str) -> list[float]:
        return [x[key] for x in samples if x.get(key) is not None]

    power, sm = values("power_w"), values("sm_clock_mhz")
    record = {
        "name": reader.name,
        "energy_j": round(energy, 3) if energy is not None else None,
        "energy_method": method,
        "energy_missing": None if energy is not None else (reason or "no samples"),
        "power_integral_j": round(integral, 3) if integral is not None else None,
        "j_per_output_token": round(energy / output_tokens, 6) if energy and output_tokens else None,
        "output_tokens_per_j": round(output_tokens / energy, 4) if energy else None,
        "power_w_mean": round(sum(power) / len(power), 2) if power else None,
        "power_w_max": max(power) if power else None,
        "sm_clock_mhz_min": min(sm) if sm else None,
        "sm_clock_mhz_max": max(sm) if sm else None,
        "clock_events": events,
        "slowdowns": [x for x in events if x in SLOWDOWNS],
        "temperature_c_max": max(values("temperature_c"), default=None),
        "memory_used_max_bytes": int(max(values("memory_used_bytes"))) if values("memory_used_bytes") else None,
        "torch_max_allocated_bytes": torch_peaks.get("allocated"),
        "torch_max_reserved_bytes": torch_peaks.get("reserved"),
        "other_processes": others,
        "unsupported": dict(reader.missing),
    }
    return share_window(record, runs_in_window)


def share_window(gpu: dict[str, Any], runs: int) -> dict[str, Any]:
    """``gpu`` (changed in place) when its energy counter spanned a window that ``runs`` runs shared (a sweep's
    setups, a scan's points, measured interleaved on one card): the joules are every run's, so dividing them by
    one run's tokens would charge it the others' work. The window's energy is kept as ``window_energy_j``;
    ``energy_j`` and the per-token figures are null with the reason, as :func:`cpu_record` does for RAPL.
    Idempotent (``machine.state`` applies it again from ``shared_by_runs``)."""
    if runs <= 1 or "window_energy_j" in gpu:
        return gpu
    gpu["shared_by_runs"] = runs
    if gpu.get("energy_j") is None:  # nothing measured: the reason it wasn't stays
        return gpu
    gpu["window_energy_j"] = gpu["energy_j"]
    gpu.update(energy_j=None, j_per_output_token=None, output_tokens_per_j=None,
               energy_missing=f"the GPU energy was the window's, shared by {runs} runs (window_energy_j): one run's "
               "share of it isn't measured")  # fmt: skip
    return gpu


def _power_integral(samples: list[dict[str, Any]]) -> float | None:
    """Trapezoid integral (J) of the power samples over their times (``t_s``)."""
    pts = [(x["t_s"], x["power_w"]) for x in samples if x.get("power_w") is not None and x.get("t_s") is not None]
    if len(pts) < 2:
        return None
    return float(sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in itertools.pairwise(pts)))


def gpu_warnings(gpu: dict[str, Any] | None) -> list[str]:
    """Loud notes for what makes a GPU run's time not the code's: clocks slowed down, another process on the card."""
    if not gpu:
        return []
    out = []
    if gpu.get("slowdowns"):
        out.append(f"the GPU's clocks were slowed during the run ({', '.join(gpu['slowdowns'])}; SM clock "
                   f"{gpu.get('sm_clock_mhz_min')}-{gpu.get('sm_clock_mhz_max')} MHz): timings include it")  # fmt: skip
    if gpu.get("other_processes"):
        out.append(f"other processes used the GPU during the run (pids {gpu['other_processes'][:5]}): timings "
                   "include sharing it")  # fmt: skip
    return out


# -------------------------------------------------------------------------------------------------- the CPU


RAPL = Path("/sys/class/powercap")


class CpuEnergy:
    """The CPU packages' energy counters (RAPL through powercap), where the kernel exposes them."""

    def __init__(self, root: Path = RAPL) -> None:
        self.zones = sorted(p for p in root.glob("intel-rapl:*") if ":" in p.name and p.name.count(":") == 1) if (
            root.is_dir()) else []  # fmt: skip
        self.start_uj: list[int] | None = None
        self.reason: str | None = None
        if not self.zones:
            self.reason = f"no CPU energy counter: {root} has no RAPL zone (a VM, or powercap not exposed)"

    def _read(self) -> list[int] | None:
        try:
            return [int((z / "energy_uj").read_text()) for z in self.zones]
        except (OSError, ValueError) as e:
            self.reason = f"RAPL unreadable: {e}"
            return None

    def start(self) -> None:
        self.start_uj = self._read() if self.zones else None

    def stop(self) -> float | None:
        """Joules since :meth:`start` over every package (a counter that wrapped adds its range)."""
        end = self._read() if self.zones else None
        if self.start_uj is None or end is None:
            return None
        total = 0
        for z, a, b in zip(self.zones, self.start_uj, end, strict=True):
            if b < a:
                try:
                    b += int((z / "max_energy_range_uj").read_text())
                except (OSError, ValueError):
                    return None
            total += b - a
        return total / 1e6


def cpu_record(requests: list[Any], machine_summary: Any, energy_j: float | None, energy_reason: str | None,
               runs_in_window: int = 1) -> dict[str, Any]:  # fmt: skip
    """What a run's tokens cost the CPU, from its requests' own CPU time (``cpu_ms``: this process, user + system,
    read before and after each request on the generating thread): {cpu_s, busy_s, cores_busy, cpu_ms_per_output_token,
    cpu_ms_per_request, freq_mhz_mean, energy_j, energy_missing, j_per_output_token}. The package energy (RAPL) is
    the measured window's, shared by every run measured in it (a sweep's setups)."""
    timed = [r for r in requests if r.cpu_ms is not None]
    cpu_ms = sum(r.cpu_ms for r in timed)
    busy_ms = sum(r.e2e_ms for r in timed)
    tokens = sum(r.output_tokens for r in timed)
    alone = runs_in_window == 1
    return {
        "cpu_s": round(cpu_ms / 1000, 4),
        "busy_s": round(busy_ms / 1000, 4),  # the requests' own wall time (end to end)
        "cores_busy": round(cpu_ms / busy_ms, 3) if busy_ms > 0 else None,
        "cpu_ms_per_output_token": round(cpu_ms / tokens, 4) if tokens else None,
        "cpu_ms_per_request": round(cpu_ms / len(timed), 3) if timed else None,
        "freq_mhz_mean": getattr(machine_summary, "freq_mhz_mean", None),
        "energy_j": round(energy_j, 3) if energy_j is not None and alone else None,
        "energy_missing": None if energy_j is not None and alone else (
            energy_reason or f"the CPU energy was the window's, shared by {runs_in_window} runs"),
        "j_per_output_token": round(energy_j / tokens, 6) if energy_j is not None and alone and tokens else None,
    }  # fmt: skip


def thread_sched() -> tuple[int, int] | None:
    """The calling thread's scheduler record so far: (ns it was ready to run but waited for a CPU, times it got
    one), from ``/proc/thread-self/schedstat`` (Linux with schedstats); None where it can't be read."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            _, wait, runs = (int(v) for v in f.read().split()[:3])
    except (OSError, ValueError):
        return None
    return wait, runs


def process_cpu_ms() -> float:
    """This process's CPU time so far (user + system, every thread), in ms: read before and after a request."""
    return _cpu_seconds() * 1000.0


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system
