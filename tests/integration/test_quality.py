"""llmbench quality: KL divergence, top-1 agreement and greedy divergence against a reference setup, on a tiny
real Qwen2 (and, when installed, the trained SmolLM2 GGUF).

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/unit/test_quality.py."""

from __future__ import annotations

import json

import llmbench
from tests.unit.test_quality import (
    _one_line_error,
    text_file,  # noqa: F401 (fixtures)
)


def test_quality_cli_self_reference_and_bfloat16(cli, tiny_model_dir, text_file, prompt_file, tmp_path):
    base = ("quality", "-m", tiny_model_dir, "--device", "cpu", "--threads", "1", "--text", text_file,
            "--prompts", prompt_file, "--max-new-tokens", "6")  # fmt: skip
    r = cli(*base, "--dtype", "float32", "-o", tmp_path / "self.json")
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "self.json").read_text(encoding="utf-8"))
    assert rec["kld_mean"] == 0.0 and rec["top1_agreement"] == 1.0
    assert rec["greedy"]["identical_share"] == 1.0 and rec["greedy"]["prompts"] == 3
    assert any("is the reference setup" in n for n in rec["notes"])
    assert rec["candidate"]["dtype"] == rec["reference"]["dtype"] == "float32"
    assert "KL" in r.stdout and "top-1" in r.stdout

    r = cli(*base, "--dtype", "bfloat16", "-o", tmp_path / "bf16.json", "--reference-cache", tmp_path / "ref.npz")
    assert r.returncode == 0, r.stderr
    rec = json.loads((tmp_path / "bf16.json").read_text(encoding="utf-8"))
    assert rec["candidate"]["dtype"] == "bfloat16" and rec["reference"]["dtype"] == "float32"
    assert rec["kld_mean"] > 0.0 and 0.0 < rec["top1_agreement"] <= 1.0
    assert rec["text"]["tokens"] > 200 and rec["text"]["source"] == str(text_file)
    assert (tmp_path / "ref.npz").exists()
    # the cache is used the next time: the bucketed bound, never above the exact figure
    r = cli(*base, "--dtype", "bfloat16", "-o", tmp_path / "bf16b.json", "--reference-cache", tmp_path / "ref.npz")
    again = json.loads((tmp_path / "bf16b.json").read_text(encoding="utf-8"))
    assert r.returncode == 0 and again["kld_method"].startswith("top-256")
    assert again["kld_mean"] <= rec["kld_mean"] * 1.001
    # an existing output is never overwritten
    r = cli(*base, "--dtype", "bfloat16", "-o", tmp_path / "bf16.json")
    assert r.returncode == 2 and "exists" in r.stderr


def test_bad_quality_input_is_one_line(cli, tiny_model_dir, tiny_copy, tmp_path):
    base = ("quality", "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "1")
    short = tmp_path / "short.txt"
    short.write_text("a", encoding="utf-8")
    r = cli(*base, "--text", short, "-o", tmp_path / "a.json")
    _one_line_error(r)
    assert "at least 2" in r.stderr and not (tmp_path / "a.json").exists()

    r = cli(*base, "--reference-model", tmp_path / "no-such-model", "-o", tmp_path / "b.json")
    _one_line_error(r)
    assert "reference" in r.stderr and "can't be built" in r.stderr

    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_copy)
    tok.add_tokens(["<llmbench-extra-token>"])
    tok.save_pretrained(tiny_copy)
    r = cli(*base, "--reference-model", tiny_copy, "-o", tmp_path / "c.json")
    _one_line_error(r)
    assert "different tokenizers" in r.stderr

    r = cli(*base, "--text", tmp_path / "missing.txt", "-o", tmp_path / "d.json")
    _one_line_error(r)


def test_compare_says_when_quality_can_not_be_compared(tiny_model_dir, prompt_file):
    from llmbench.analysis.compare import compare_runs as compare

    run = llmbench.measure(str(prompt_file), model=str(tiny_model_dir), device="cpu", dtype="float32",
                           max_new_tokens=2, warmup=0)  # fmt: skip
    other = run.model_copy(deep=True)
    other.quality = {"reference": {"dtype": "float32"}, "text_sha256": "x", "kld_mean": 0.1}
    assert "only the new run" in (compare(run, other).quality_note or "")
    run.quality = {**other.quality, "text_sha256": "y"}
    assert "different references" in (compare(run, other).quality_note or "")
    run.quality = dict(other.quality)
    assert compare(run, other).quality["kld_mean"] == [0.1, 0.1]
