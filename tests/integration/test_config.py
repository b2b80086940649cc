"""A committed config file and a recorded run repeat a measurement exactly: the same setup (the history's config
hash), the same recorded spec, and compare pairs the runs request by request (a real tiny model, in-process CLI)."""

from __future__ import annotations

import json

from llmbench.history.records import setup_of, short_hash
from llmbench.results.storage import load_run


def test_flags_a_config_file_and_config_from_measure_the_same_setup(cli, tiny_model_dir, prompt_file, tmp_path):
    flags = [str(prompt_file), "--model", str(tiny_model_dir), "--device", "cpu", "--dtype", "float32", "--threads",
             "1", "--max-new-tokens", "4", "--ignore-eos", "--warmup", "0", "--repeats", "2", "--quiet"]  # fmt: skip
    first = cli("run", *flags, "-o", tmp_path / "flags.json")
    assert first.returncode == 0, first.stderr
    printed = cli("run", *flags, "--print-config")
    (tmp_path / "bench.toml").write_text(printed.stdout, encoding="utf-8")
    from_file = cli("run", "--config", tmp_path / "bench.toml", "-o", tmp_path / "file.json", "--quiet")
    again = cli("run", "--config-from", tmp_path / "flags.json", "-o", tmp_path / "again.json", "--quiet")
    assert from_file.returncode == 0 and again.returncode == 0, from_file.stderr + again.stderr
    runs = [load_run(tmp_path / f"{n}.json") for n in ("flags", "file", "again")]
    hashes = {short_hash(setup_of(r.config.model_dump())) for r in runs}
    assert len(hashes) == 1
    assert runs[0].config.spec == runs[1].config.spec == runs[2].config.spec
    assert runs[0].config.spec["requests"]["max_new_tokens"] == 4 and "outputs" not in runs[0].config.spec
    r = cli("compare", tmp_path / "flags.json", tmp_path / "again.json", "--format", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)[0]["paired"] and not json.loads(r.stdout)[0]["config_diffs"]


def test_measure_takes_a_committed_spec_with_turns_and_records_into_the_history(cli, tiny_model_dir, prompt_file,
                                                                                tmp_path):  # fmt: skip
    """measure() had no turns (run --turns had): now every setting of run, from a config file or by keyword."""
    import llmbench
    from llmbench.history import db

    printed = cli(
        "run",
        prompt_file,
        "--model",
        tiny_model_dir,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--threads",
        "1",
        "--max-new-tokens",
        "3",
        "--ignore-eos",
        "--warmup",
        "0",
        "--turns",
        "2",
        "--print-config",
    )
    (tmp_path / "bench.toml").write_text(printed.stdout, encoding="utf-8")  # fmt: skip
    history = tmp_path / "h.db"
    run = llmbench.measure(spec=llmbench.load_spec(tmp_path / "bench.toml"), think_time_s=0.01, history=str(history),
                           output=tmp_path / "run.json")  # fmt: skip
    assert run.config.sessions["turns"] == 2 and run.config.sessions["think_time_s"] == 0.01
    assert run.config.spec["requests"]["turns"] == 2 and run.config.spec["requests"]["think_time_s"] == 0.01
    assert len(run.requests) == 2 * 3  # three prompts, two turns each
    h = db.open_history(str(history), create=False)
    assert h is not None
    try:
        assert [r["kind"] for r in h.list()] == ["run"]
    finally:
        h.close()
