"""The article's last levers, in-process: speculative decoding (prompt lookup, a draft model) with tokens that
arrive in bundles, and a shared prefix's keys and values computed once. Real models: the tiny Qwen2 (random
weights, float32) and the trained SmolLM2 GGUF (on transformers and llama.cpp)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest

from llmbench.core.errors import UserError
from llmbench.core.speculative import parse_prefix_cache, parse_speculative
from llmbench.engines.chat import common_prefix_len
from llmbench.results.metrics import bundle_stamps, first_difference, speculative_figures
from llmbench.results.storage import load_run
from tests.helpers import synthetic_run

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


# ------------------------------------------------------------------------------------------ the trained GGUF


@pytest.fixture
def copy_prompts(tmp_path):
    """Three of the shipped copy-task prompts (rewrite, correct, extract: the answer copies the prompt)."""
    from llmbench.workloads import promptsets

    lines = [x for x in promptsets.find("copy_edit").read_text(encoding="utf-8").splitlines() if x and x[0] != "#"]
    p = tmp_path / "copy.txt"
    p.write_text("\n".join(lines[:3]) + "\n", encoding="utf-8")
    return p
