"""Process-wide effects, each opt-in: a stop flag that signals can raise, and a frozen garbage collector.

Building a backend or calling :func:`llmbench.measure` changes nothing in the process by itself. The CLI
enters both context managers; a notebook or a library caller chooses:

    with llmbench.stop_on_signals() as stop, llmbench.frozen_gc():
        run = llmbench.measure(prompts, stop=stop)
"""

from __future__ import annotations

import gc
import signal
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Stop:
    """Asks a run to stop. ``request()`` once: the run ends after the token in flight (an endpoint drops its
    in-flight requests), keeping everything finished. Twice: it stops waiting at once.

    Thread-safe to raise from anywhere (a signal handler, another thread, a notebook cell).
    """

    def __init__(self) -> None:
        self.signal: str | None = None  # why: "SIGINT", "SIGTERM" or a caller's word
        self.hard = False
        # a run stopped by a rule (load's over-saturation stop), not a person: the requests a stop drops in flight
        # are recorded as unfinished failures, since leaving them out would keep only the luckier ones
        self.record_dropped = False
        self._callbacks: list[Callable[[], None]] = []
        self._lock = threading.Lock()

    @property
    def requested(self) -> bool:
        """True once a stop was asked for."""
        return self.signal is not None

    def request(self, why: str = "stop", record_dropped: bool = False) -> None:
        """Ask the run to stop (a second call: stop waiting for the request in flight too). ``record_dropped``
        (the first call's): requests dropped in flight are recorded as unfinished, not left out."""
        with self._lock:
            if self.signal is None:
                self.signal = why
                self.record_dropped = record_dropped
            else:
                self.hard = True
            callbacks = list(self._callbacks)
        for cb in callbacks:
            cb()

    def on_request(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from whatever thread asks) on every request; returns a function that removes it."""
        with self._lock:
            self._callbacks.append(callback)

        def remove() -> None:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)

        return remove


@contextmanager
def stop_on_signals(stop: Stop | None = None) -> Iterator[Stop]:
    """SIGINT and SIGTERM raise ``stop`` (a new :class:`Stop` by default) while the block runs.

    The first signal stops the run after the token in flight, the second at once. Main thread only (Python
    delivers signals there); elsewhere the block runs without handlers.
    """
    stop = stop or Stop()
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handle(signum: int, _frame: object) -> None:
        stop.request(signal.Signals(signum).name)

    old = {sig: signal.signal(sig, handle) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield stop
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


_frozen = threading.Event()


@contextmanager
def frozen_gc() -> Iterator[None]:
    """While the block runs, everything alive after a model loads leaves the garbage collector's sight.

    A model, torch and transformers are ~10^6 objects; with them frozen, a full collection scans only new
    objects (measured: gc.collect() 180 ms -> 0.01 ms), so the collection between requests is cheap. (Inside a
    timed request the collector is paused in any case.) On exit the objects are unfrozen.
    """
    _frozen.set()
    freeze_now()
    try:
        yield
    finally:
        _frozen.clear()
        gc.unfreeze()


def freeze_now() -> None:
    """Inside :func:`frozen_gc`: collect, then freeze what is alive (loaders call this after loading)."""
    if _frozen.is_set():
        gc.collect()
        gc.freeze()


_ALLOWED: set[int] = set()  # the CPUs this process could use before its first pin (pinning narrows the mask)


def pin_to_cpu(cpu: int) -> None:
    """Every thread of this process onto ``cpu`` alone (``ab --duet``). ``os.sched_setaffinity(0, ...)`` moves
    the calling thread only (Linux), so each thread in /proc/self/task is moved; one started later inherits the
    mask of the thread that starts it. A thread that ended meanwhile is skipped. ValueError for a CPU this
    process could not use when it started (the first pin's mask: a later pin may move it to another of those)."""
    import os

    if not _ALLOWED:
        _ALLOWED.update(os.sched_getaffinity(0))
    if cpu not in _ALLOWED:
        raise ValueError(f"CPU {cpu} is not one this process may run on")
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), {cpu})
        except (ProcessLookupError, FileNotFoundError):
            continue


# the cold start's clock: armed by a process started for one command (the CLI's entry point), spent by its first
# model made ready. A notebook's or a library's process is not armed: its age says nothing about a load.
_COLD = {"armed": False, "spent": False}


def arm_cold_start() -> None:
    """This process was started for the command it runs (the CLI): its first load is a cold start."""
    _COLD["armed"] = True


def cold_clock(*, ready: bool = False) -> float | None:
    """Seconds since this process started, while its first load is under way (``ready``: that load's model is
    now ready, and later loads, a sweep's next setups, get None); None in a process that wasn't armed."""
    if not _COLD["armed"] or _COLD["spent"]:
        return None
    if ready:
        _COLD["spent"] = True
    return since_process_start()


def since_process_start() -> float | None:
    """Seconds since this process started (the interpreter, imports, loading: what a person waits before the
    first request), from the kernel's record of the start; None where psutil can't say."""
    import time

    import psutil

    try:
        return round(time.time() - psutil.Process().create_time(), 3)
    except psutil.Error:
        return None
