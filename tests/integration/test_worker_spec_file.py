"""A worker llmbench starts from its own install gets its setup as a spec file, not as flags rebuilt one by one
(issue 60): the file crosses the process boundary, the worker reads it as strictly as any config file, and the
run it measures records it (``config.engine_settings.worker_spec``)."""

from __future__ import annotations

import asyncio

import pytest
import tomllib

from llmbench.backends import worker_main
from llmbench.backends.worker import WorkerBackend
from llmbench.core.errors import BackendUnavailable, UserError
from llmbench.options import ModelOptions, RunOptions
from llmbench.workloads.prompts import PromptSet


def test_the_setup_crosses_as_a_spec_file_and_the_run_records_it(tiny_model_dir, tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    spec = ModelOptions(model=str(tiny_model_dir), weights="random", dtype="float32", threads=1)
    argv = worker_main.command(spec, folder)
    assert argv[-3:] == ["worker", "--config", str(folder / "worker.toml")]
    assert "--threads" not in argv and "--dtype" not in argv  # no flag rebuilt by hand
    tables = tomllib.loads((folder / "worker.toml").read_text(encoding="utf-8"))
    assert tables["model"]["threads"] == 1 and tables["model"]["dtype"] == "float32"
    assert tables["model"]["quantize"] == "none" and tables["model"]["model"] == str(tiny_model_dir)

    async def prepared():
        backend = WorkerBackend(argv, RunOptions(max_new_tokens=2, warmup=0), spec_dir=folder)
        prompts = PromptSet.from_list(["hi"])
        try:
            await backend.start(prompts)
            return backend.new_run(prompts)
        finally:
            await backend.close()

    run = asyncio.run(prepared())
    recorded = (run.config.engine_settings or {})["worker_spec"]["model"]
    assert recorded["threads"] == 1 and recorded["dtype"] == "float32" and recorded["weights"] == "random"
    assert run.config.threads == 1 and run.config.dtype == "float32"  # what the worker loaded is what it was given
    assert not folder.exists()  # the spec file's folder goes with the worker


def test_a_spec_file_the_worker_cannot_read_is_its_one_line(tmp_path):
    folder = tmp_path / "w"
    folder.mkdir()
    spec = ModelOptions(model="no/such-model-here", weights="random")
    argv = worker_main.command(spec, folder)
    (folder / "worker.toml").write_text('[model]\nthreads = "two"\n', encoding="utf-8")

    async def start():
        backend = WorkerBackend(argv, RunOptions(max_new_tokens=2, warmup=0), spec_dir=folder)
        try:
            await backend.start(PromptSet.from_list(["hi"]))
        finally:
            await backend.close()

    with pytest.raises((UserError, BackendUnavailable)) as e:
        asyncio.run(start())
    assert "worker.toml: [model] threads: expected an integer, not 'two'" in str(e.value), e.value
