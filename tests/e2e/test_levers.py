"""The article's last levers, in-process: speculative decoding (prompt lookup, a draft model) with tokens that
arrive in bundles, and a shared prefix's keys and values computed once. Real models: the tiny Qwen2 (random
weights, float32) and the trained SmolLM2 GGUF (on transformers and llama.cpp).

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_levers.py."""

from __future__ import annotations

import json

import pytest

from llmbench.results.storage import load_run
from tests.helpers import SMOLLM2, needs, needs_gguf
from tests.unit.test_levers import (
    LONG_SYSTEM,
    _bundles_are_honest,
    _run,
    copy_prompts,  # noqa: F401 (fixtures)
)


@needs("llama.cpp")
def test_an_engine_without_the_method_says_so_in_one_line(cli, tmp_path, prompt_file, tiny_model_dir):
    r = cli("run", prompt_file, "-m", tiny_model_dir, "--engine", "llama.cpp", "--speculative", "draft:x",
            "--max-new-tokens", "2", "-q")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "llama.cpp has no such method (it has prompt-lookup)" in r.stderr


@pytest.mark.slow
def test_sweep_crosses_levers_and_names_the_best_per_metric(cli, tmp_path, prompt_file, tiny_model_dir):
    out = tmp_path / "sweep"
    r = cli("sweep", prompt_file, "-m", tiny_model_dir, "--dtype", "float32", "--threads", "2", "--speculative",
            "none,prompt-lookup:3", "--rounds", "1", "--max-new-tokens", "8", "--ignore-eos", "--quality", "-o",
            out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    record = json.loads((out / "sweep.json").read_text())
    labels = sorted(row["label"] for row in record["results"])
    assert labels == ["float32 2t", "float32 2t prompt-lookup:3:2"]
    spec_row = next(row for row in record["results"] if row["speculative"])
    assert spec_row["tokens_per_forward"] >= 1 and spec_row["lossless_mismatches"] is not None
    assert "speculative" in record["varied"]
    assert record["best"]["ttft_ms"]["label"] in labels and record["best"]["tpot_ms"]["label"] in labels
    assert spec_row["excluded_by_lossless"] == bool(spec_row["lossless_mismatches"])


@pytest.mark.slow
@needs_gguf
@pytest.mark.parametrize("engine", ["transformers", pytest.param("llama.cpp", marks=needs("llama.cpp"))])
def test_prompt_lookup_on_a_copy_task_accepts_drafts_losslessly(copy_prompts, engine, request):
    """The trained SmolLM2 copies the paragraph it is asked to edit: prompt lookup finds its n-grams, several
    tokens arrive per forward pass, and greedy output equals a plain run's (the run checks; so does this). One
    model loaded for both runs (the API), so the test pays one load."""
    from llmbench import api

    if engine == "transformers":  # the test run's one float32 load of the .gguf
        lm = request.getfixturevalue("smollm2")
    else:
        lm = api.load_model(str(SMOLLM2), threads=2, engine=engine)
    common = {"max_new_tokens": 40, "ignore_eos": True, "warmup": 0}
    plain = api.measure(copy_prompts, model=lm, **common)
    spec = api.measure(copy_prompts, model=lm, speculative="prompt-lookup:8:3", **common)
    _bundles_are_honest(spec)
    assert spec.summary.tokens_per_forward > 1.3 and spec.summary.acceptance_rate > 0
    truth = {r.prompt_index: r.output_token_ids_sha256 for r in plain.requests}
    assert all(r.lossless == (r.output_token_ids_sha256 == truth[r.prompt_index]) for r in spec.requests)
    assert spec.summary.lossless_mismatches <= 1  # a near-tie may flip once; the run says where
    if engine == "llama.cpp":  # its own counters mislead with drafts: not reported
        assert all(r.engine_tpot_ms is None for r in spec.requests)


@pytest.mark.slow
@needs_gguf
@needs("llama.cpp")
def test_llama_cpp_prefix_cache_evaluates_only_the_suffix(cli, tmp_path, prompt_file):
    """The engine's own counter is the ground truth: a warm request evaluates prompt - cached tokens."""
    run = _run(cli, tmp_path, "lc-prefix", prompt_file, "-m", SMOLLM2, "--engine", "llama.cpp", "--ignore-eos",
               "--system-prompt", LONG_SYSTEM, "--prefix-cache", "system", "--repeats", "2", tokens=4)  # fmt: skip
    reqs = run.requests
    assert [r.cold for r in reqs] == [True] + [False] * (len(reqs) - 1)
    prefix = reqs[1].cached_tokens
    assert prefix > 100 and reqs[0].engine_prompt_tokens_evaluated == reqs[0].prompt_tokens  # it computed it all
    for r in reqs[1:]:
        assert r.engine_prompt_tokens_evaluated == r.prompt_tokens - prefix == r.prompt_tokens_computed
    assert all(r.lossless for r in reqs)
    assert run.summary.prompt_reuse_requests == 0 and not any("PREFIX REUSED" in w for w in run.warnings)


@pytest.mark.slow
@pytest.mark.subprocess
def test_ab_puts_a_speculative_worker_against_a_plain_one(cli, tmp_path, prompt_file, tiny_model_dir):
    """A worker's own --speculative: one side of ab decodes speculatively, the other plainly, the same ids."""
    import sys

    worker = f"{sys.executable} -m llmbench worker -m {tiny_model_dir} --device cpu --dtype float32 --threads 1"
    out = tmp_path / "ab"
    r = cli("ab", prompt_file, "--base", worker, "--head", f"{worker} --speculative draft:{tiny_model_dir}:3",
            "--max-new-tokens", "8", "--ignore-eos", "--repeats", "1", "-o", out, "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert base.config.speculative is None and head.config.speculative["method"] == "draft"
    assert head.summary.tokens_per_forward > 1 and all(q.lossless is not None for q in head.requests)
    assert "setup differs: speculative" in r.stdout
