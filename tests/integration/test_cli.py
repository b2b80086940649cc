"""The command line as a user meets it: outputs, defaults, one-line errors, and what it must not import.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_cli.py."""

import json


def test_run_on_a_local_folder_writes_the_json(cli, tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "sub" / "run.json"
    r = cli("run", prompt_file, "--model", tiny_model_dir, "--device", "cpu", "--dtype", "float32",
            "--max-new-tokens", "4", "--ignore-eos", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "TTFT (ms)" in r.stdout and "TPOT (ms)" in r.stdout and f"wrote {out}" in r.stdout.replace("\n", "")
    data = json.loads(out.read_text(encoding="utf-8"))
    assert data["complete"] and len(data["requests"]) == 3
    assert data["config"]["model"] == str(tiny_model_dir) and data["config"]["model_source"] == "folder"


def test_default_output_goes_to_results(cli, tiny_model_dir, prompt_file, tmp_path):
    r = cli("run", prompt_file, "--model", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "2",
            "--warmup", "0", "-q", cwd=tmp_path)  # fmt: skip
    assert r.returncode == 0, r.stderr
    files = list((tmp_path / "results").glob("*.json"))
    assert len(files) == 1 and files[0].name.endswith(f"-{tiny_model_dir.name}-cpu.json")
    assert f"wrote {files[0].relative_to(tmp_path)}" in r.stdout.replace("\n", "")
