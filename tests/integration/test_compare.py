"""compare on real runs of the tiny model: paired, the same greedy tokens, probes recorded; a thread count that
differs is a setup difference (the statistics themselves: tests/unit/test_compare.py)."""

import json

import pytest

from llmbench.analysis.compare import compare_runs


@pytest.mark.slow
def test_real_tiny_model_runs(tiny_model_dir, prompt_file, tmp_path, cli, probe_on):
    """Two real runs of the same setup: paired, same greedy tokens, probes recorded; 1 vs 2 threads is a setup
    difference. (The gate on real timings is checked with the 0.5B model in benchmarks/README.md.)"""
    import llmbench

    lm = llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)
    for name in ("a", "b"):
        llmbench.measure(prompt_file, model=lm, max_new_tokens=6, ignore_eos=True, warmup=1, repeats=2,
                         output=tmp_path / f"{name}.json")  # fmt: skip
    a, b = llmbench.load_run(tmp_path / "a.json"), llmbench.load_run(tmp_path / "b.json")
    assert a.machine.probe_before.mem_read_gbps > 0 and a.machine.probe_after.matmul_gflops > 0
    assert a.machine.probe_before.threads == 1
    comp = compare_runs(a, b)
    assert comp.paired and comp.n_pairs == 6
    assert comp.outputs_compared == 6 and comp.outputs_changed == 0 and not comp.config_diffs
    r = cli("compare", tmp_path / "a.json", tmp_path / "b.json", "--format", "json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["probes"]["mem_read_gbps"]["base"] > 0
