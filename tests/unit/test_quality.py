"""llmbench quality: KL divergence, top-1 agreement and greedy divergence against a reference setup, on a tiny
real Qwen2 (and, when installed, the trained SmolLM2 GGUF)."""

from __future__ import annotations

import copy
import math

import pytest
import torch

import llmbench
from llmbench.core.errors import UserError
from llmbench.engines import quality as q


@pytest.fixture(scope="module")
def tiny(tiny_model_dir):
    return llmbench.load_model(str(tiny_model_dir), device="cpu", dtype="float32", threads=1)


@pytest.fixture
def text_file(tmp_path):
    p = tmp_path / "eval.txt"
    p.write_text(q.default_text()[:1500], encoding="utf-8")
    return p


def _perturbed(lm, std: float):
    """A copy of the model with Gaussian noise of ``std`` added to one layer's MLP weights."""
    torch.manual_seed(0)
    model = copy.deepcopy(lm.model)
    w = model.model.layers[0].mlp.down_proj.weight
    with torch.no_grad():
        w.add_(torch.randn_like(w) * std)
    return model


def test_kl_matches_a_direct_computation_on_hand_built_distributions():
    pl, rl = [[0.5, 0.25, 0.25], [0.1, 0.2, 0.7]], [[0.25, 0.5, 0.25], [0.1, 0.2, 0.7]]
    direct = [sum(a * math.log(a / b) for a, b in zip(pr, rr, strict=True)) for pr, rr in zip(pl, rl, strict=True)]
    p, r = torch.tensor(pl, dtype=torch.float64), torch.tensor(rl, dtype=torch.float64)
    got = q.kl_divergence(p.log(), r.log())
    assert got.tolist() == pytest.approx(direct, abs=1e-6)
    assert direct[0] == pytest.approx(0.25 * math.log(2), abs=1e-9) and got[1] == 0.0  # the same distribution: 0
    # the top-1 bucket merges tokens 1 and 2: KL of the merged distributions, never above the exact one
    idx = torch.tensor([[0], [2]])
    bucketed = q.bucketed_kl(idx, p.log().gather(-1, idx), r.log())
    merged = [0.5 * math.log(0.5 / 0.25) + 0.5 * math.log(0.5 / 0.75), 0.0]
    assert bucketed.tolist() == pytest.approx(merged, abs=1e-6)
    assert all(b <= e + 1e-7 for b, e in zip(bucketed.tolist(), direct, strict=True))
    # top-K covering the whole vocabulary: exact
    full = torch.tensor([[0, 1, 2], [2, 1, 0]])
    assert q.bucketed_kl(full, p.log().gather(-1, full), r.log()).tolist() == pytest.approx(direct, abs=1e-5)


def test_the_reference_against_itself_scores_kld_0_and_agreement_1(tiny, text_file):
    ref = q.build_reference(tiny.model, tiny.tokenizer, text_file.read_text(encoding="utf-8"), "cpu", {}, 128)
    assert len(ref.chunks) >= 2 and all(2 <= len(c) <= 128 for c in ref.chunks)  # chunked to the size asked
    stats = q.teacher_forced(ref, tiny.model, "cpu")
    assert stats["kld_mean"] == 0.0 and stats["kld_max"] == 0.0 and stats["top1_agreement"] == 1.0
    assert stats["positions"] == sum(len(c) - 1 for c in ref.chunks)
    assert stats["perplexity_candidate"] == pytest.approx(stats["perplexity_reference"])
    assert stats["kld_method"] == "exact"


def test_a_larger_perturbation_gives_a_larger_divergence(tiny, text_file):
    ref = q.build_reference(tiny.model, tiny.tokenizer, text_file.read_text(encoding="utf-8"), "cpu", {}, 256)
    small = q.teacher_forced(ref, _perturbed(tiny, 1e-3), "cpu")
    large = q.teacher_forced(ref, _perturbed(tiny, 0.5), "cpu")
    assert 0.0 < small["kld_mean"] < large["kld_mean"] / 10
    assert small["kld_p99"] <= small["kld_max"] and large["kld_mean"] <= large["kld_max"]
    assert large["top1_agreement"] < 1.0 and small["top1_agreement"] >= large["top1_agreement"]


def test_a_cached_reference_gives_the_bucketed_lower_bound(tiny, text_file, tmp_path):
    ref = q.build_reference(tiny.model, tiny.tokenizer, text_file.read_text(encoding="utf-8"), "cpu",
                            {"dtype": "float32"}, 256)  # fmt: skip
    path = tmp_path / "ref.npz"
    q.save_reference(ref, path)
    back = q.load_reference(path)
    assert back.setup == {"dtype": "float32"} and back.chunks == ref.chunks and not back.exact
    cand = _perturbed(tiny, 0.5)
    exact, bound = q.teacher_forced(ref, cand, "cpu"), q.teacher_forced(back, cand, "cpu")
    assert 0.0 < bound["kld_mean"] <= exact["kld_mean"] * 1.001
    assert bound["kld_method"].startswith("top-256") and bound["perplexity_reference"] is None
    assert q.teacher_forced(back, tiny.model, "cpu")["kld_mean"] < 1e-3  # itself, up to float16 storage
    path.with_suffix(".txt").write_text("nonsense")
    with pytest.raises(UserError, match="not a reference file"):
        q.load_reference(path.with_suffix(".txt"))


def test_a_reference_cache_is_kept_at_exactly_the_path_given(tiny, text_file, tmp_path):
    ref = q.build_reference(tiny.model, tiny.tokenizer, text_file.read_text(encoding="utf-8"), "cpu", {}, 128)
    path = tmp_path / "reference.cache"
    q.save_reference(ref, path)
    # was: numpy wrote reference.cache.npz, so every later run, looking at reference.cache, computed it again
    assert path.is_file() and not (tmp_path / "reference.cache.npz").exists()
    assert q.load_reference(path).chunks == ref.chunks
    assert [f.name for f in tmp_path.iterdir() if f.name != "eval.txt"] == ["reference.cache"]  # no temporary left
    # a damaged file: one line, never numpy's or zipfile's own error
    damaged = tmp_path / "damaged.npz"
    damaged.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    (tmp_path / "not-a-zip.npz").write_bytes(b"PK\x03\x04 no zip after all")
    for bad in (damaged, tmp_path / "not-a-zip.npz"):
        with pytest.raises(UserError, match="not a reference file"):
            q.load_reference(bad)


def test_quality_input_that_would_fail_after_loading_is_refused_before(cli, tiny_model_dir, tmp_path, monkeypatch):
    from llmbench.engines.hf import models

    def no_loading(*a, **kw):
        raise AssertionError("a model was loaded before the input was checked")

    monkeypatch.setattr(models, "load_model", no_loading)
    (tmp_path / "empty.txt").write_text("  \n", encoding="utf-8")
    (tmp_path / "bad.npz").write_bytes(b"PK\x03\x04 no zip after all")
    (tmp_path / "a-file").write_text("x", encoding="utf-8")
    (tmp_path / "data.csv").write_text("prompt\nhello\n", encoding="utf-8")
    base = ("quality", "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1")
    for args, said in (
        # each was an internal error once both models had loaded (range() of step 0, torch.cat of nothing)
        (("--chunk-tokens", "0"), "--chunk-tokens must be at least 2"),
        (("--chunk-tokens", "1"), "--chunk-tokens must be at least 2"),
        # was: greedy continuations generated far past the model's context of 512, for hours
        (("--max-new-tokens", "600"), "leaves no room in the model's context of 512"),
        # was: refused only after loading both models
        (("--text", tmp_path / "empty.txt"), "the evaluation text is empty"),
        (("--reference-cache", tmp_path / "bad.npz"), "not a reference file"),  # was: internal error (BadZipFile)
        # was: an internal error (FileNotFoundError) writing it, after every figure was computed
        (("--reference-cache", tmp_path / "a-file" / "ref.npz"), "a-file is a file"),
        # was: each line of the CSV a prompt, the header included
        (("--prompts", tmp_path / "data.csv"), "is a dataset (.csv), not a prompt list"),
    ):
        r = cli(*base, *args, "-o", tmp_path / "q.json")
        _one_line_error(r)
        assert said in r.stderr and not (tmp_path / "q.json").exists(), (args, r.stderr)


def test_first_divergence_and_its_summary():
    assert q.first_divergence([1, 2, 3], [1, 2, 3]) is None
    assert q.first_divergence([1, 2, 3], [1, 5, 3]) == 1
    assert q.first_divergence([1, 2], [1, 2, 3]) == 2  # one stopped early: they part where it stopped
    s = q.greedy_summary([None, 1, 3, None], 8)
    assert s["identical_share"] == 0.5 and s["first_divergence_median"] == 5.5  # identical ones count as 8


def _one_line_error(r):
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_random_weights_say_kld_is_only_a_smoke_test():
    from llmbench.drivers.quality import notes

    assert any("RANDOM WEIGHTS" in n for n in notes(llmbench.ModelOptions(weights="random"), same=False))
    assert notes(llmbench.ModelOptions(), same=False) == []
