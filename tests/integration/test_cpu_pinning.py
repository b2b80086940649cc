"""ab's design: processes one after another with setups of their own, TTFT-only pairs, the duet and the budget.
The plan and the planner are checked as functions; the rest with real `llmbench worker` processes on a tiny Qwen2.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_ab_design.py."""

from __future__ import annotations

import subprocess
import sys

import pytest


@pytest.mark.subprocess
def test_pinning_moves_every_thread_of_the_process():
    code = (
        "import os, threading, time\n"
        "from llmbench.core.process import pin_to_cpu\n"
        "ev = threading.Event()\n"
        "ts = [threading.Thread(target=ev.wait) for _ in range(3)]\n"
        "[t.start() for t in ts]\n"
        "cpus = sorted(os.sched_getaffinity(0))\n"
        "pin_to_cpu(cpus[0])\n"
        "cpu = cpus[-1]\n"
        "pin_to_cpu(cpu)  # from one pinned CPU to another: a duet swaps them pair by pair\n"
        "masks = {tid: sorted(os.sched_getaffinity(int(tid))) for tid in os.listdir('/proc/self/task')}\n"
        "ev.set()\n"
        "print(cpu, len(masks), all(m == [cpu] for m in masks.values()))\n"
        "try:\n    pin_to_cpu(10**6)\nexcept ValueError as e:\n    print('refused', e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split("\n")
    _cpu, n, ok = out[0].split()
    assert int(n) >= 4 and ok == "True"
    assert out[1].startswith("refused CPU 1000000")
