"""The key of ``quality --reference-cache`` (:func:`llmbench.drivers.quality.reference_identity`): cached reference
logits are read back only for the very reference they are of. The end-to-end run on the tiny model is
tests/e2e/test_quality_reference_key.py."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

from llmbench.drivers import quality as driver
from llmbench.engines import quality as q
from llmbench.options import ModelOptions


def test_the_reference_cache_key_covers_files_weights_dtype_and_device(tmp_path, monkeypatch):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    weights = folder / "model.safetensors"
    weights.write_bytes(b"a" * 10)
    built: list[dict] = []

    def build(model, tokenizer, text, device, setup, size):
        built.append(setup)
        return q.Reference(setup, hashlib.sha256(text.encode()).hexdigest(), size, [[1, 2]])

    monkeypatch.setattr(q, "build_reference", build)
    lm = SimpleNamespace(dtype="float32", device="cpu", model=None, tokenizer=None)
    spec = ModelOptions(model=str(folder), dtype="float32")

    def reference(spec=spec, lm=lm, cached=None):
        return driver._reference(lm, "text", driver.reference_identity(spec, lm), 64, None, cached)

    first = reference()
    assert reference(cached=first) is first and len(built) == 1  # the same reference: read back
    weights.write_bytes(b"b" * 11)  # re-saved in place: other weights at the same path
    assert reference(cached=first) is not first
    weights.write_bytes(b"a" * 10)
    first = reference()
    for other_spec, other_lm in [
        (ModelOptions(model=str(folder), dtype="float32", weights="random"), lm),
        (spec, SimpleNamespace(**{**vars(lm), "dtype": "bfloat16"})),  # --reference-dtype auto resolved otherwise
        (spec, SimpleNamespace(**{**vars(lm), "device": "cuda:0"})),
    ]:
        n = len(built)
        assert reference(other_spec, other_lm, first) is not first and len(built) == n + 1
