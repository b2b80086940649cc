"""benchmarks/inject's LLMBENCH_INJECT_SLOW_PCT: each outermost causal-LM forward is followed by a busy wait of P%
of its own measured time, and LLMBENCH_INJECT_LOG says what was measured and spun.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_inject.py."""

from __future__ import annotations

import json

import pytest

from tests.helpers import cli
from tests.unit.test_inject import INJECT


@pytest.mark.subprocess
def test_slow_pct_and_its_log_through_the_environment(tiny_model_dir, prompt_file, tmp_path):
    env = {"PYTHONPATH": str(INJECT), "LLMBENCH_INJECT_SLOW_PCT": "20",
           "LLMBENCH_INJECT_LOG": str(tmp_path / "inject-{pid}.json")}  # fmt: skip
    r = cli("run", prompt_file, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1",
            "--max-new-tokens", "4", "--warmup", "0", "-o", tmp_path / "run.json", "-q", env=env,
            process=True)  # fmt: skip
    assert r.returncode == 0, r.stderr
    [log] = tmp_path.glob("inject-*.json")
    s = json.loads(log.read_text(encoding="utf-8"))
    assert s["pct"] == 20 and s["forwards"] == 3 * 4  # three prompts, four tokens each: one forward a token
    assert 0.2 * s["forward_s"] <= s["injected_s"] <= 0.2 * s["forward_s"] + 0.01
    assert not list(tmp_path.glob("*.tmp"))  # written atomically
