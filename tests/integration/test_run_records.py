"""What a run records is what it measured (issue 66), on the tiny model: a list passed to measure() is recorded as
such, and a replay of it is refused in one line (tests/unit/test_run_records.py has the rest)."""

from __future__ import annotations

import llmbench
from llmbench.spec import RunSpec
from tests.helpers import cli


def test_measure_records_a_list_in_memory_as_such(tiny_model_dir, tmp_path, prompt_file):
    spec = RunSpec.of({"prompts": prompt_file, "max_new_tokens": 2, "warmup": 0})
    run = llmbench.measure(["one", "two"], spec, model=str(tiny_model_dir))
    assert run.config.prompt_file == "<list>" and run.config.prompt_count == 2
    assert "prompts" not in run.config.spec["prompts"] and run.config.spec["requests"]["max_new_tokens"] == 2
    out = tmp_path / "run.json"
    llmbench.save_run(run, out)
    r = cli("run", "--config-from", out, "-o", tmp_path / "again.json")
    assert r.returncode == 2 and "prompts passed in memory" in r.stderr, r.stderr


def test_a_run_of_a_model_loaded_before_records_what_was_loaded(tiny_model_dir, prompt_file):
    loaded = llmbench.load_model(str(tiny_model_dir), dtype="float32", threads=1)
    # the spec's loading settings don't apply to a loaded model: the record says what it was, not the spec's
    spec = RunSpec.of({"prompts": prompt_file, "max_new_tokens": 2, "warmup": 0, "dtype": "bfloat16"})
    run = llmbench.measure(None, spec, model=loaded)
    recorded = run.config.spec["model"]
    assert recorded["model"] == run.config.model and run.config.model.endswith(tiny_model_dir.name), recorded
    assert recorded["dtype"] == "float32" == run.config.dtype and recorded["threads"] == 1, recorded
