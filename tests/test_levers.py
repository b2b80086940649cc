"""The article's last levers, in-process: speculative decoding (prompt lookup, a draft model) with tokens that
arrive in bundles, and a shared prefix's keys and values computed once. Real models: the tiny Qwen2 (random
weights, float32) and the trained SmolLM2 GGUF (on transformers and llama.cpp)."""

from __future__ import annotations

import json
from itertools import pairwise

import numpy as np
import pytest

from llmbench.core.errors import UserError
from llmbench.core.speculative import parse_prefix_cache, parse_speculative
from llmbench.engines.chat import common_prefix_len
from llmbench.results.metrics import bundle_stamps, first_difference, speculative_figures
from llmbench.results.storage import load_run
from tests.helpers import synthetic_run
from tests.test_engines import SMOLLM2, needs, needs_gguf

LONG_SYSTEM = (
    "You are the duty officer of a county environmental inspection team. Answer briefly, in the language of the "
    "question, name the regulation that applies, say what evidence an inspector should collect on site, and "
    "never speculate about facts you were not given. " * 4
)


# ------------------------------------------------------------------------------------------ parsing and sums


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, None),
        ("none", None),
        ("prompt-lookup", ("prompt-lookup", 10, 2, None)),
        ("prompt-lookup:3", ("prompt-lookup", 3, 2, None)),
        ("pld:5:3", ("prompt-lookup", 5, 3, None)),
        ("draft:/models/small", ("draft", 5, None, "/models/small")),
        ("draft:org/model:8", ("draft", 8, None, "org/model")),
        ("draft:C:/odd:path", ("draft", 5, None, "C:/odd:path")),
    ],
)
def test_speculative_spellings_parse(text, expected):
    s = parse_speculative(text)
    assert (s if s is None else (s.method, s.draft_tokens, s.max_ngram, s.draft_model)) == expected
    if s is not None:
        assert parse_speculative(s.label) == s  # the label spells the same setup back


@pytest.mark.parametrize("text", ["prompt-lookup:0", "prompt-lookup:-1", "prompt-lookup:nan", "prompt-lookup:inf",
                                  "prompt-lookup:1e9", "prompt-lookup:999999999999", "prompt-lookup:3:0",
                                  "prompt-lookup:3:2:1", "draft:", "draft: :4", "medusa", "draft:m:0"])  # fmt: skip
def test_bad_speculative_spellings_are_one_clear_error(text):
    with pytest.raises(UserError) as e:
        parse_speculative(text)
    assert "\n" not in str(e.value) and "--speculative" in str(e.value)


def test_prefix_cache_modes():
    assert parse_prefix_cache(None) == "none" and parse_prefix_cache(" System ") == "system"
    with pytest.raises(UserError, match="expected none or system"):
        parse_prefix_cache("everything")


def test_first_difference_bundles_and_common_prefix():
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 9, 3], [1, 2, 3]) == 1
    assert first_difference([1, 2], [1, 2, 3]) == 2 and first_difference([1, 2, 3], [1, 2]) == 2
    assert first_difference([], []) is None
    assert bundle_stamps([10, 20, 30], [1, 3, 2]) == [10, 20, 20, 20, 30, 30]
    with pytest.raises(ValueError):
        bundle_stamps([10, 20], [1])  # a stamp without its bundle size is a bug, not a guess
    assert common_prefix_len([[1, 2, 3, 4], [1, 2, 5], [1, 2, 3]]) == 2
    assert common_prefix_len([[1, 2, 3]]) == 2  # one prompt: all but the token its prefill needs
    assert common_prefix_len([[7, 1], [8, 1]]) == 0 and common_prefix_len([]) == 0


def test_speculative_figures_weigh_every_forward_pass_alike():
    """tokens_per_forward is all tokens over all forward passes (not a mean of per-request ratios), acceptance
    is accepted over drafted summed, and the lossless count covers only checked requests."""
    run = synthetic_run(n=3, ttft_ms=100.0, tpot_ms=10.0, tokens=9)
    a, b, c = run.requests
    a.forwards, a.drafted_tokens, a.accepted_tokens, a.lossless = 9, 0, 0, True  # nothing accepted
    b.forwards, b.drafted_tokens, b.accepted_tokens, b.lossless = 3, 12, 6, False
    c.forwards, c.drafted_tokens, c.accepted_tokens = 3, 8, 6  # not checked (sampling, say)
    f = speculative_figures(run.requests)
    assert f["forwards"] == 15 and f["tokens_per_forward"] == round(27 / 15, 4)
    assert f["acceptance_rate"] == round(12 / 20, 4)  # not the mean of 0, 0.5 and 0.75
    assert f["lossless_checked"] == 2 and f["lossless_mismatches"] == 1
    assert speculative_figures(synthetic_run(n=1).requests) == {}


# ------------------------------------------------------------------------------------------ transformers


def _run(cli, tmp_path, name, *args, tokens=16):
    out = tmp_path / f"{name}.json"
    r = cli("run", *args, "--max-new-tokens", str(tokens), "--threads", "2", "-o", out, "-q")
    assert r.returncode == 0, r.stderr
    return load_run(out)


def _bundles_are_honest(run):
    """Every request's stamps: the zero gaps are exactly the tokens after the first of each bundle, TPOT keeps
    its formula, and the two independent counts of accepted drafts agree (the streamer's bundles, the candidate
    generator's matches)."""
    for r in run.requests:
        gaps = np.diff(r.token_times_ms)
        assert 1 <= r.forwards <= r.output_tokens
        assert int((gaps == 0).sum()) == r.output_tokens - r.forwards
        assert r.accepted_tokens == r.output_tokens - r.forwards
        assert 0 <= r.accepted_tokens <= r.drafted_tokens
        assert r.tpot_ms == pytest.approx((r.token_times_ms[-1] - r.token_times_ms[0]) / (r.output_tokens - 1),
                                          abs=1e-3)  # fmt: skip
        assert all(b >= a for a, b in pairwise(r.token_times_ms))


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


@pytest.mark.parametrize("args", [["--speculative", "prompt-lookup:0"], ["--prefix-cache", "all"],
                                  ["--speculative", "pld", "--prefix-cache", "system"],
                                  ["--speculative", "pld", "--cache", "static"]])  # fmt: skip
def test_bad_lever_options_exit_2_in_one_line(cli, tmp_path, prompt_file, tiny_model_dir, args):
    r = cli("run", prompt_file, "-m", tiny_model_dir, *args, "--max-new-tokens", "2", "-o", tmp_path / "x.json", "-q")
    assert r.returncode == 2 and "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "x.json").exists()


def test_levers_are_refused_for_a_server(cli, prompt_file):
    r = cli("run", prompt_file, "--endpoint", "http://127.0.0.1:9/v1", "--speculative", "pld", "-q")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr


@needs("llama.cpp")
def test_an_engine_without_the_method_says_so_in_one_line(cli, tmp_path, prompt_file, tiny_model_dir):
    r = cli("run", prompt_file, "-m", tiny_model_dir, "--engine", "llama.cpp", "--speculative", "draft:x",
            "--max-new-tokens", "2", "-q")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "llama.cpp has no such method (it has prompt-lookup)" in r.stderr


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


def test_a_mismatch_keeps_a_setup_from_being_best(tmp_path):
    """sweep's rows: a lever setup whose greedy output differs from the plain run's is excluded from best."""
    from llmbench.drivers.sweep import Setup, Sweep, SweepEntry
    from llmbench.options import ModelOptions, RunOptions
    from llmbench.results.metrics import summarize
    from llmbench.workloads.prompts import PromptSet

    fast, slow = synthetic_run(n=2, ttft_ms=50.0, tpot_ms=5.0), synthetic_run(n=2, ttft_ms=80.0, tpot_ms=9.0)
    for r in fast.requests:
        r.forwards, r.lossless, r.first_difference = 3, False, 2
    fast.summary = summarize(fast.requests)
    sweep = Sweep([Setup("float32", 2, speculative="prompt-lookup:3:2"), Setup("float32", 2)], ModelOptions(),
                  RunOptions(), tmp_path)  # fmt: skip
    for setup, run in zip(sweep.setups, (fast, slow), strict=True):
        entry = SweepEntry(setup, None, tmp_path / f"{setup.slug()}.json")
        entry.track = type("T", (), {"run": run})()
        sweep.entries.append(entry)
    record = sweep.record(PromptSet("p.txt", "0" * 64, ("a", "b"), (1, 2)), complete=True)
    assert record["excluded_by_lossless"] == ["float32 2t prompt-lookup:3:2"]
    assert record["best"]["tpot_ms"]["label"] == "float32 2t"


@pytest.mark.slow
def test_the_itl_histogram_shows_the_zero_gaps(cli, tmp_path, prompt_file, tiny_model_dir):
    _run(cli, tmp_path, "draft", prompt_file, "-m", tiny_model_dir, "--ignore-eos", "--dtype", "float32",
         "--speculative", f"draft:{tiny_model_dir}:3", tokens=12)  # fmt: skip
    r = cli("report", tmp_path / "draft.json", "-o", tmp_path / "r.html")
    assert r.returncode == 0, r.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "zero gaps: bundled tokens" in page and "tokens per forward pass" in page


# ------------------------------------------------------------------------------------------ the trained GGUF


@pytest.fixture
def copy_prompts(tmp_path):
    """Three of the shipped copy-task prompts (rewrite, correct, extract: the answer copies the prompt)."""
    from llmbench.workloads import promptsets

    lines = [x for x in promptsets.find("copy_edit").read_text(encoding="utf-8").splitlines() if x and x[0] != "#"]
    p = tmp_path / "copy.txt"
    p.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    return p


@pytest.mark.slow
@needs_gguf
@pytest.mark.parametrize("engine", ["transformers", pytest.param("llama.cpp", marks=needs("llama.cpp"))])
def test_prompt_lookup_on_a_copy_task_accepts_drafts_losslessly(copy_prompts, engine):
    """The trained SmolLM2 copies the paragraph it is asked to edit: prompt lookup finds its n-grams, several
    tokens arrive per forward pass, and greedy output equals a plain run's (the run checks; so does this). One
    model loaded for both runs (the API), so the test pays one load."""
    from llmbench import api

    extra = {"dtype": "float32"} if engine == "transformers" else {"engine": engine}
    lm = api.load_model(str(SMOLLM2), threads=2, **extra)
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
