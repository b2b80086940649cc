"""--dtype auto chooses the same dtype on every invocation on one machine, and every automatic choice is
recorded: the decision rule on fixed timings, the cache, and real runs.

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_autodtype.py."""

from __future__ import annotations

from llmbench.results.storage import load_run


def test_runs_of_the_same_command_record_the_same_setup(cli, tiny_model_dir, prompt_file, tmp_path):
    env = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    base = ["run", prompt_file, "-m", tiny_model_dir, "--device", "cpu", "--max-new-tokens", "2", "--warmup", "0"]
    runs = []
    for i, threads in enumerate(("", "", "1", "1")):
        out = tmp_path / f"r{i}.json"
        r = cli(*base, *(["--threads", threads] if threads else []), "-o", out, "-q", env=env)
        assert r.returncode == 0, r.stderr
        runs.append(load_run(out))
    dtypes = [r.config.dtype for r in runs]
    assert dtypes[0] == dtypes[1] and dtypes[2] == dtypes[3]
    if "no native" in runs[0].config.dtype_reason:  # a CPU without bfloat16/float16: float32, nothing to probe
        assert all(r.config.dtype == "float32" and r.config.dtype_reason == runs[0].config.dtype_reason for r in runs)
    else:  # the probe ran once per thread count; the second run of each reused its decision
        assert "cached from" in runs[1].config.dtype_reason and "cached from" in runs[3].config.dtype_reason
    # every automatic choice is recorded, as what was used, and is the same again
    assert (
        set(runs[0].config.auto) == {"dtype", "threads", "attn_implementation"} and "threads" not in runs[2].config.auto
    )
    for field in ("dtype", "threads", "attn_implementation", "device"):
        assert getattr(runs[0].config, field) == getattr(runs[1].config, field)
    r = cli("compare", tmp_path / "r0.json", tmp_path / "r1.json", "--strict")
    assert r.returncode == 0, r.stderr
    r = cli(*base, "--dtype", "float32", "--reprobe", "-o", tmp_path / "x.json", "-q", env=env)
    assert r.returncode == 2 and "--reprobe" in r.stderr
