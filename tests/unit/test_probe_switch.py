"""LLMBENCH_PROBE: the calibration probe, on unless switched off (the suite switches it off; its tests switch it
on). Off, the loop asks no backend for a probe and the run records none; compare then says nothing of one."""

from __future__ import annotations

import pytest

from llmbench.analysis.compare import compare_runs
from llmbench.machine import probe
from llmbench.results.schema import Probe
from llmbench.runner.loop import new_track, round_robin
from tests.unit.test_loop import PROMPTS, FakeBackend, _run


class ProbedBackend(FakeBackend):
    """A backend whose probe is known and counted."""

    def __init__(self) -> None:
        super().__init__()
        self.probes = 0

    def probe_key(self):
        return ("probed", id(self))

    async def probe(self):
        self.probes += 1
        return Probe(mem_read_gbps=20.0 + self.probes, matmul_gflops=100.0, threads=1, seconds=0.0)


@pytest.mark.parametrize(
    ("value", "on"),
    [
        (None, True),
        ("on", True),
        ("1", True),
        ("off", False),
        ("0", False),
        (" OFF ", False),
        ("false", False),
        ("no", False),
    ],
)
def test_the_switch_reads_the_environment(monkeypatch, value, on):
    if value is None:
        monkeypatch.delenv("LLMBENCH_PROBE", raising=False)
    else:
        monkeypatch.setenv("LLMBENCH_PROBE", value)
    assert probe.enabled() is on


def test_off_no_probe_is_taken_or_recorded_and_compare_says_nothing_of_one(monkeypatch, tmp_path):
    runs = {}
    for state in ("on", "off"):
        monkeypatch.setenv("LLMBENCH_PROBE", state)
        b = ProbedBackend()
        t = new_track(b, PROMPTS, tmp_path / f"{state}.json")
        [runs[state]] = _run([t], round_robin([t], PROMPTS, 1))
        assert b.probes == (2 if state == "on" else 0)  # before and after the requests, or never
    on, off = runs["on"].machine, runs["off"].machine
    assert on.probe_before.mem_read_gbps == 21.0 and on.probe_after.mem_read_gbps == 22.0
    assert off.probe_before is None and off.probe_after is None and runs["off"].complete
    seen = compare_runs(runs["on"], runs["on"]).probes["mem_read_gbps"]
    assert seen == {"base": 21.5, "new": 21.5}  # the mean of before and after, set against the other run's
    unseen = compare_runs(runs["off"], runs["off"]).probes
    assert all(v == {"base": None, "new": None} for v in unseen.values())  # nothing to set, nothing said
