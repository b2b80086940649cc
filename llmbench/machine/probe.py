"""Is it the machine or the model? A calibration probe and a sampler of machine state during a run.

The seed measured the same code twice and got +25% from machine state alone. A run therefore records:
- a probe before and after its requests: memory read bandwidth (what bounds decoding) and a fixed float32
  matmul (what bounds prefill), each a fraction of a second, on the run's own thread count;
- samples every half second: CPU busy, this process's CPU, everyone else's CPU, steal time (on a virtual
  machine, the hypervisor's share: often the hidden cause), load average, frequency, RSS, swap.
compare puts the probe's change beside the metrics' change.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np
import psutil

from llmbench.results.schema import MachineSample, MachineState, MachineSummary, Probe

_PROBE_BYTES = 256 << 20  # larger than any last-level cache, so the sum reads memory


def enabled() -> bool:
    """Whether runs take the calibration probe: yes unless ``LLMBENCH_PROBE`` is ``off`` (or 0, false, no).

    Off, a run records no probe (``probe_before``/``probe_after`` null) and compare says nothing of the probe's
    change. It costs 0.4-2.8 s a run, before and after; the test suite turns it off for the hundreds of runs whose
    subject is not the probe (its own tests turn it on). Read at each run, so a worker inherits the parent's.
    """
    from llmbench.core.settings import settings

    return settings().probe


def probe(threads: int | None = None, device: str = "cpu") -> Probe:
    """Memory read bandwidth (GB/s) and float32 matmul GFLOP/s on the run's device and threads.

    Bandwidth: a float32 ``sum`` over 256 MB (1 GB on a GPU), more than any cache, median of 7; it is the
    read speed the roofline's TPOT bound uses. Matmul: 256x1024 @ 1024x1024, median of 25. Medians, not
    minima: the probe must see contention (a best-of picks the moment the neighbour paused).
    """
    import torch

    t0 = time.perf_counter()
    dev = torch.device(device)
    old = torch.get_num_threads()
    if threads:
        torch.set_num_threads(threads)
    try:
        nbytes = (1 << 30) if dev.type == "cuda" else _PROBE_BYTES
        a = torch.full((nbytes // 4,), 0.5, dtype=torch.float32, device=dev)
        mem_gbps = nbytes / _median_seconds(a.sum, 2, 7, dev) / 1e9
        del a  # free the 256 MB before the matmul
        x = torch.full((256, 1024), 0.5, device=dev)
        w = torch.full((1024, 1024), 0.01, device=dev)
        gflops = 2 * 256 * 1024 * 1024 / _median_seconds(lambda: x @ w, 5, 25, dev) / 1e9
        used = torch.get_num_threads()
    finally:
        torch.set_num_threads(old)
    return Probe(
        mem_read_gbps=round(mem_gbps, 3),
        matmul_gflops=round(gflops, 3),
        threads=used,
        seconds=round(time.perf_counter() - t0, 3),
    )


def _median_seconds(fn, warmup: int, reps: int, dev) -> float:
    for _ in range(warmup):  # wake the thread pool, settle the clocks
        fn()
    times = []
    for _ in range(reps):
        if dev is not None:
            _sync(dev)
        t = time.perf_counter()
        fn()
        if dev is not None:
            _sync(dev)
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def _sync(dev) -> None:
    # GPUs run kernels asynchronously: without a sync the clock would time the launch, not the work
    if dev.type == "cuda":
        import torch

        torch.cuda.synchronize(dev)
    elif dev.type == "mps":
        import torch

        torch.mps.synchronize()


def probe_numpy() -> Probe:
    """The same two figures with numpy on one thread, for a process without torch (the endpoint client).

    Recorded as ``method: numpy``: compare sets such probes only against probes made the same way.
    """
    t0 = time.perf_counter()
    a = np.full(_PROBE_BYTES // 4, 0.5, dtype=np.float32)
    mem_gbps = _PROBE_BYTES / _median_seconds(a.sum, 2, 7, None) / 1e9
    del a
    x = np.full((256, 1024), 0.5, dtype=np.float32)
    w = np.full((1024, 1024), 0.01, dtype=np.float32)
    gflops = 2 * 256 * 1024 * 1024 / _median_seconds(lambda: x @ w, 5, 25, None) / 1e9
    return Probe(
        method="numpy",
        mem_read_gbps=round(mem_gbps, 3),
        matmul_gflops=round(gflops, 3),
        threads=1,
        seconds=round(time.perf_counter() - t0, 3),
    )


def state(
    swap0: Any, before: Probe | None, after: Probe | None, sampler: Sampler, gpu: dict | None = None
) -> MachineState:
    """The machine record of a run: swap activity since ``swap0`` (``psutil.swap_memory()`` at the start),
    the probes, and the sampler's samples and summary. A GPU record marked ``shared_by_runs`` (the loop's mark of
    a window several runs shared) carries no per-run joules: see :func:`llmbench.machine.telemetry.share_window`."""
    if gpu is not None:
        from llmbench.machine.telemetry import share_window

        gpu = share_window(gpu, int(gpu.get("shared_by_runs") or 1))
    s = psutil.swap_memory()
    return MachineState(
        swap_in_bytes=max(0, s.sin - swap0.sin) if swap0 is not None else 0,
        swap_out_bytes=max(0, s.sout - swap0.sout) if swap0 is not None else 0,
        process_swap_bytes=_process_swap_bytes(),
        probe_before=before,
        probe_after=after,
        summary=sampler.summary(),
        samples=list(sampler.samples),
        gpu=gpu,
        gpu_samples=list(sampler.gpu_samples) if gpu is not None else [],
    )


def swap_warnings(m: MachineState | None) -> list[str]:
    """A warning when the machine swapped while the run measured: timings then include waiting on disk."""
    if m and (m.swap_in_bytes or m.swap_out_bytes or m.process_swap_bytes):
        return [
            f"the machine swapped during the run (in {m.swap_in_bytes} B, out {m.swap_out_bytes} B; this "
            f"process has {m.process_swap_bytes} B in swap): timings include waiting on disk"
        ]
    return []


def _process_swap_bytes() -> int:
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("VmSwap:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


class Sampler:
    """Samples machine state on a daemon thread every ``interval`` s (each sample ~0.7 ms of CPU here, recorded
    per run as ``summary.sampler_cpu_ms``)."""

    def __init__(self, interval: float = 0.5, gpu: Any = None) -> None:
        self.interval = interval
        self.samples: list[MachineSample] = []
        self.gpu = gpu  # a telemetry.GpuReader: the card is read with every sample
        self.gpu_samples: list[dict] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._proc = psutil.Process()
        self._t0 = time.perf_counter()
        self.cpu_s = 0.0  # the sampling thread's own CPU time (time.thread_time), every read included
        self._span: list[float] = []  # [start, stop] perf_counter times

    def __enter__(self) -> Sampler:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def start(self) -> None:
        """Start sampling (and the card's energy counter, when there is a card)."""
        if self.gpu is not None and self.gpu.ok:
            self.gpu.start()
        self._span = [time.perf_counter()]
        self._thread = threading.Thread(target=self._loop, name="llmbench-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop sampling (takes at most one interval)."""
        if self._stop.is_set():
            return
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._span.append(time.perf_counter())
        if self.gpu is not None and self.gpu.ok:
            self.gpu.stop()

    def _loop(self) -> None:
        # Deltas of the raw counters between samples (psutil's *_percent helpers keep global state).
        ncpu = psutil.cpu_count() or 1
        last = (psutil.cpu_times(), self._proc.cpu_times(), time.perf_counter())
        while not self._stop.wait(self.interval):
            cpu0 = time.thread_time()
            last = self._sample(ncpu, last)
            self.cpu_s += time.thread_time() - cpu0

    def _sample(self, ncpu: int, last: tuple[Any, Any, float]) -> tuple[Any, Any, float]:
        """One sample (and the card's) appended; the counters the next delta starts from."""
        last_sys, last_own, last_t = last
        now_sys, now_own, now_t = psutil.cpu_times(), self._proc.cpu_times(), time.perf_counter()
        total = sum(now_sys) - sum(last_sys)
        if total <= 0:
            return last
        idle = (now_sys.idle - last_sys.idle) + (getattr(now_sys, "iowait", 0) - getattr(last_sys, "iowait", 0))
        steal = getattr(now_sys, "steal", 0) - getattr(last_sys, "steal", 0)
        busy = 100.0 * max(0.0, total - idle) / total
        own_s = (now_own.user - last_own.user) + (now_own.system - last_own.system)
        own = min(100.0, 100.0 * own_s / ((now_t - last_t) * ncpu))  # % of the whole machine, like busy
        freq = psutil.cpu_freq() if hasattr(psutil, "cpu_freq") else None
        if self.gpu is not None and self.gpu.ok:
            self.gpu_samples.append({"t_s": round(now_t - self._t0, 3), **self.gpu.sample()})
        self.samples.append(
            MachineSample(
                t_s=round(now_t - self._t0, 3),
                cpu_busy_pct=round(busy, 1),
                own_cpu_pct=round(own, 1),
                other_cpu_pct=round(max(0.0, busy - own), 1),
                steal_pct=round(100.0 * steal / total, 1),
                load1=round(psutil.getloadavg()[0], 2),
                freq_mhz=round(freq.current, 0) if freq else None,
                rss_bytes=self._proc.memory_info().rss,
                swap_used_bytes=psutil.swap_memory().used,
            )
        )
        return now_sys, now_own, now_t

    def _wall_s(self) -> float:
        if not self._span:
            return 0.0
        return (self._span[1] if len(self._span) > 1 else time.perf_counter()) - self._span[0]

    def summary(self) -> MachineSummary | None:
        """Means and maxima over the samples; None when the run was shorter than one interval."""
        s = self.samples
        if not s:
            return None

        def mean(key: str) -> float:
            return round(float(np.mean([getattr(x, key) for x in s])), 2)

        freqs = [x.freq_mhz for x in s if x.freq_mhz]
        return MachineSummary(
            samples=len(s),
            cpu_busy_pct_mean=mean("cpu_busy_pct"),
            own_cpu_pct_mean=mean("own_cpu_pct"),
            other_cpu_pct_mean=mean("other_cpu_pct"),
            other_cpu_pct_max=max(x.other_cpu_pct for x in s),
            steal_pct_mean=mean("steal_pct"),
            steal_pct_max=max(x.steal_pct for x in s),
            load1_max=max(x.load1 for x in s),
            freq_mhz_mean=round(float(np.mean(freqs)), 0) if freqs else None,
            rss_max_bytes=max(x.rss_bytes for x in s),
            swap_used_max_bytes=max(x.swap_used_bytes for x in s),
            sampler_cpu_ms=round(self.cpu_s * 1000, 3),
            sampler_cpu_pct_of_wall=round(100 * self.cpu_s / wall, 4) if (wall := self._wall_s()) > 0 else None,
        )
