"""Exact-length synthetic prompts and llmbench scan: controlled inputs, interleaved points, fitted curves."""

from __future__ import annotations

import numpy as np
import pytest

import llmbench
from llmbench.core.errors import UserError
from llmbench.drivers.scan import fit_batch, fit_depth, fit_length, kv_bytes_per_token
from llmbench.workloads.synthetic import SyntheticSpec, corpus_text, make


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)


def _counter(lm, system_prompt=None):
    from llmbench.backends.inprocess import InProcessBackend

    return InProcessBackend(None, llmbench.RunOptions(system_prompt=system_prompt), loaded=lm).count_prompt_tokens


@pytest.mark.parametrize("tokens", [30, 31, 64, 100, 257])
def test_synthetic_prompts_have_exactly_the_length_asked(tiny, tokens):
    count = _counter(tiny)
    prompts = make(SyntheticSpec(tokens, 4, seed=3), tiny.tokenizer, count)
    assert [count(p) for p in prompts.prompts] == [tokens] * 4
    assert len(set(prompts.prompts)) == 4  # different prompts, cut from different places
    for p in prompts.prompts:
        ids = tiny.tokenizer(p, add_special_tokens=False)["input_ids"]
        assert len(set(ids)) > len(ids) // 4  # varied text, not one token repeated
    again = make(SyntheticSpec(tokens, 4, seed=3), tiny.tokenizer, count)
    assert again.prompts == prompts.prompts and again.sha256 == prompts.sha256  # reproducible from the seed
    other = make(SyntheticSpec(tokens, 4, seed=4), tiny.tokenizer, count)
    assert other.sha256 != prompts.sha256 and prompts.path == f"synthetic:{tokens}x4:seed3"


def test_the_length_counts_the_system_prompt_and_template_too(tiny):
    count = _counter(tiny, system_prompt="You are terse.")
    prompts = make(SyntheticSpec(80, 2), tiny.tokenizer, count)
    assert [count(p) for p in prompts.prompts] == [80, 80]
    assert all(len(tiny.tokenizer(p)["input_ids"]) < 80 for p in prompts.prompts)  # the text alone is shorter


def test_a_length_no_cut_can_hit_at_one_place_is_found_one_token_later(tiny):
    """A count that jumps over the target wherever a window starts at the first offset (as SmolLM2's tokenizer
    did at 64 tokens): the prompt comes from the next window, exact, and the same every time."""
    real = _counter(tiny)
    first = make(SyntheticSpec(41, 1, seed=5), tiny.tokenizer, real).prompts[0]
    head = first[:12]

    def jumpy(text: str) -> int:  # even counts only for texts from the first window: 41 is unreachable there
        n = real(text)
        return 2 * (n // 2) if text.startswith(head) else n

    shifted = make(SyntheticSpec(41, 1, seed=5), tiny.tokenizer, jumpy).prompts[0]
    assert not shifted.startswith(head) and jumpy(shifted) == 41 == real(shifted)
    assert make(SyntheticSpec(41, 1, seed=5), tiny.tokenizer, jumpy).prompts[0] == shifted
    with pytest.raises(UserError, match="can't reach that count"):
        make(SyntheticSpec(41, 1, seed=5), tiny.tokenizer, lambda t: 2 * (real(t) // 2))


def test_bad_synthetic_specs_are_one_line():
    for bad in ("100", "x5", "100x0", "0x5", "ten x five"):
        with pytest.raises(UserError, match="--synthetic"):
            SyntheticSpec.parse(bad)
    assert SyntheticSpec.parse(" 512X20 ", seed=7) == SyntheticSpec(512, 20, 7)
    assert "River" in corpus_text() or "river" in corpus_text()


def test_fits_recover_known_curves():
    rng = np.random.default_rng(0)
    lengths = [16, 64, 256, 1024, 4096] * 6
    data = [(n, 20 + 0.05 * n + 2e-5 * n * n + rng.normal(0, 0.5)) for n in lengths]
    f = fit_length(data)
    assert f["r2"] > 0.999 and abs(f["b_ms_per_token"] - 0.05) < 0.002 and f["prefill_ms_per_1k_tokens"] > 45
    assert f["ci95"]["b_ms_per_token"][0] < 0.05 < f["ci95"]["b_ms_per_token"][1]
    # 2e-5 L^2 = 20 + 0.05 L at L = (2500 + sqrt(2500^2 + 4e6)) / 2 = 2851
    assert f["quadratic_half_at_tokens"] == pytest.approx(2851, rel=0.05)
    flatter = fit_length([(n, 20 + 0.05 * n + 2e-6 * n * n) for n in lengths])
    assert flatter["quadratic_half_at_tokens"] is None  # at ~25,400 tokens: outside the range measured
    d = fit_depth(
        [(n, 40 + 0.002 * n + rng.normal(0, 0.1)) for n in [10, 512, 2048, 8192] * 5], 1_000_000_000, 24_576, 20.0
    )
    assert abs(d["ms_per_1k_context_tokens"] - 2.0) < 0.1 and d["roofline_tpot_ms"]["10"] == pytest.approx(
        50.01, abs=0.02
    )
    b = fit_batch([{"kind": "batch", "value": v, "aggregate_decode_tokens_per_s": t, "tpot_ms_mean": v * 1000 / t}
                   for v, t in ((1, 20.0), (2, 39.0), (4, 70.0), (8, 74.0))], None, None, None, 128, 16)  # fmt: skip
    assert b["saturation_batch"] == 4  # 8 adds only 6% over 4
    assert fit_length(data[:2]) is None  # two lengths can't carry a quadratic


def test_kv_bytes_per_token_follow_the_config(tiny):
    # 2 (K, V) x 2 layers x 2 key/value heads x 16 head dim x 4 bytes
    assert kv_bytes_per_token(tiny.model.config, "float32") == 2 * 2 * 2 * 16 * 4


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--prompt-tokens", "600"), "context of 512"),
        (("--depth", "510"), "context of 512"),
        (("--batch", "0"), "--batch 0: must be at least 1"),
        (("--prompt-tokens", ""), "nothing to measure"),
        (("--prompt-tokens", "a,b"), "not a whole number"),
        # was: 10**20 prompts made one by one before the first batch could run
        (("--batch", str(10**20)), "--batch 100000000000000000000: more than any model batches"),
        # was: refused after the model loaded, as "--synthetic -5x2"
        (("--batch", "2", "--batch-prompt-tokens", "-5"), "--batch-prompt-tokens must be at least 1"),
        # each was accepted and silently ignored: no point used it
        (("--batch-prompt-tokens", "64"), "--batch-prompt-tokens is the length of a batch point's prompts"),
        (("--max-new-tokens", "9"), "--max-new-tokens: length points generate 2 tokens"),
        # was: a plan of a million requests built, then measured for days
        (("--rounds", "1000000", "--prompts-per-point", "11"), "33,000,000 requests, more than a plan holds"),
        (("--rounds", "1000001"), "--rounds must be 1 to 1,000,000"),
    ],
)
def test_bad_scans_are_one_line(cli, tiny_model_dir, tmp_path, args, message):
    r = cli("scan", "-m", tiny_model_dir, "--device", "cpu", "--depth", "", "--batch", "", *args,
            "-o", tmp_path / "s", "-q")  # fmt: skip
    assert r.returncode == 2 and message in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
