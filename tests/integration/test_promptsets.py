"""The prompt sets llmbench ships (llmbench/data/prompts): PROMPTS may name one, a file that exists wins, an
unknown name is one clear error line, and ``llmbench prompts`` lists them.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_promptsets.py."""

from __future__ import annotations

import json

from tests.unit.test_promptsets import SHA256


def test_run_by_name_records_the_shipped_set(cli, tiny_model_dir, tmp_path):
    out = tmp_path / "run.json"
    r = cli("run", "env_violations", "--model", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "2",
            "--warmup", "0", "-q", "-o", out, cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    config = json.loads(out.read_text(encoding="utf-8"))["config"]
    assert config["prompt_file"] == "shipped:env_violations"
    assert config["prompt_sha256"] == SHA256 and config["prompt_count"] == 20
