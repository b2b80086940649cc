"""The article's last levers, in-process: speculative decoding (prompt lookup, a draft model) with tokens that
arrive in bundles, and a shared prefix's keys and values computed once. Real models: the tiny Qwen2 (random
weights, float32) and the trained SmolLM2 GGUF (on transformers and llama.cpp).

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_levers.py."""

from __future__ import annotations

import pytest

from tests.unit.test_levers import LONG_SYSTEM, _bundles_are_honest, _run


@pytest.mark.slow
def test_prompt_lookup_on_transformers_stamps_bundles_and_checks_losslessness(cli, tmp_path, prompt_file,
                                                                              tiny_model_dir):  # fmt: skip
    plain = _run(cli, tmp_path, "plain", prompt_file, "-m", tiny_model_dir, "--ignore-eos", "--repeats", "2")
    spec = _run(cli, tmp_path, "pld", prompt_file, "-m", tiny_model_dir, "--ignore-eos", "--repeats", "2",
                "--speculative", "prompt-lookup:4:2")  # fmt: skip
    assert spec.config.speculative == {"method": "prompt-lookup", "draft_tokens": 4, "max_ngram": 2}
    assert plain.config.speculative is None and plain.summary.tokens_per_forward is None
    _bundles_are_honest(spec)
    # the check's verdict is the truth about the outputs: equal to the plain run's, request by request
    truth = {(r.prompt_index, r.repeat): r.output_token_ids_sha256 for r in plain.requests}
    for r in spec.requests:
        assert r.lossless == (r.output_token_ids_sha256 == truth[(r.prompt_index, r.repeat)])
        assert (r.first_difference is None) == r.lossless
    s = spec.summary
    assert s.lossless_checked == len(spec.requests) and s.forwards == sum(r.forwards for r in spec.requests)
    # compare names the method difference and what it did
    r = cli("compare", tmp_path / "plain.json", tmp_path / "pld.json")
    assert r.returncode == 0, r.stderr
    assert "setup differs: speculative" in r.stdout and "new: prompt-lookup:4:2" in r.stdout
    assert "tokens per forward pass" in r.stdout


@pytest.mark.slow
def test_a_draft_model_drafts_what_the_target_accepts(cli, tmp_path, prompt_file, tiny_model_dir):
    """The target as its own draft: every draft is the target's own greedy choice, so nearly all are accepted
    (a verification's batched numerics may differ at a near-tie), and the draft's load is recorded and checked
    as the target's."""
    run = _run(cli, tmp_path, "draft", prompt_file, "-m", tiny_model_dir, "--ignore-eos", "--dtype", "float32",
               "--speculative", f"draft:{tiny_model_dir}:3", tokens=20)  # fmt: skip
    _bundles_are_honest(run)
    assert run.summary.acceptance_rate > 0.8 and run.summary.tokens_per_forward > 2
    draft = run.load.draft
    assert draft["model"] == str(tiny_model_dir) and draft["offload"]["disk"] == [] and draft["weights_bytes"] > 0
    assert all(r.draft_ms > 0 for r in run.requests)


@pytest.mark.slow
def test_prefix_cache_prefills_only_each_requests_own_tokens(tmp_path, prompt_file, tiny_model_dir):
    """Ground truth from the model itself: a forward hook records how many tokens each prefill fed. The cold
    request computes the shared prefix (its first forward is the prefix), the warm ones feed only their own."""
    from llmbench import api

    lm = api.load_model(str(tiny_model_dir), dtype="float32", threads=2)
    fed: list[int] = []
    hook = lm.model.register_forward_pre_hook(lambda m, a, kw: fed.append(kw["input_ids"].shape[-1]),
                                              with_kwargs=True)  # fmt: skip
    try:
        run = api.measure(prompt_file, model=lm, max_new_tokens=4, ignore_eos=True, warmup=1, repeats=2,
                          system_prompt=LONG_SYSTEM, prefix_cache="system")  # fmt: skip
    finally:
        hook.remove()
    reqs = run.requests
    prefix = max(r.cached_tokens for r in reqs)
    assert prefix > 100  # the long system prompt and the template's preamble
    assert [r.cold for r in reqs] == [True] + [False] * (len(reqs) - 1)
    assert reqs[0].cached_tokens == 0 and all(r.cached_tokens == prefix for r in reqs[1:])
    assert all(r.prompt_tokens_computed == r.prompt_tokens - r.cached_tokens for r in reqs)
    assert all(r.lossless for r in reqs) and run.config.prefix_cache == "system"
    prefills = [n for n in fed if n > 1]  # decode steps feed one token; the lossless check's plain runs are full
    assert prefix in prefills  # the cold request computed the prefix on its own
    for r in reqs[1:]:
        assert r.prompt_tokens - prefix in prefills  # a warm request fed only its own tokens
    assert run.summary.ttft_cold_ms.n == 1 and run.summary.ttft_warm_ms.n == len(reqs) - 1


@pytest.mark.slow
def test_the_itl_histogram_shows_the_zero_gaps(cli, tmp_path, prompt_file, tiny_model_dir):
    _run(cli, tmp_path, "draft", prompt_file, "-m", tiny_model_dir, "--ignore-eos", "--dtype", "float32",
         "--speculative", f"draft:{tiny_model_dir}:3", tokens=12)  # fmt: skip
    r = cli("report", tmp_path / "draft.json", "-o", tmp_path / "r.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "zero gaps: bundled tokens" in page and "tokens per forward pass" in page


def test_a_draft_with_another_vocabulary_is_refused_in_one_line(cli, tmp_path, prompt_file, tiny_model_dir,
                                                                qwen_tokenizer):  # fmt: skip
    import torch
    from transformers import AutoModelForCausalLM, Qwen2Config

    from tests.conftest import TINY

    other = tmp_path / "other-vocab"
    torch.manual_seed(2)
    AutoModelForCausalLM.from_config(Qwen2Config(**{**TINY, "vocab_size": 152064})).save_pretrained(other)
    qwen_tokenizer.save_pretrained(other)
    r = cli("run", prompt_file, "-m", tiny_model_dir, "--speculative", f"draft:{other}", "--max-new-tokens", "2",
            "-o", tmp_path / "x.json", "-q")  # fmt: skip
    assert r.returncode == 2 and "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "vocabulary differs" in lines[0], r.stderr
    assert not (tmp_path / "x.json").exists()
