"""The cold start (issue 36): a run's load phase by phase, its warm-up and the first request after loading, in its
JSON and on show's and compare's lines; ``ab --fail-on load_s``'s row over processes, each process one sample. The
slow load is a real one: benchmarks/inject's LLMBENCH_INJECT_LOAD_SLEEP_S makes a causal LM's first eval()
(inside from_pretrained, so inside the load) sleep, and the phases must put it where it happened."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from llmbench.analysis.startup import process_change

PHASES = ("locate_s", "config_tokenizer_s", "model_code_s", "weights_s", "build_s")


def _run(*processes: dict) -> SimpleNamespace:
    return SimpleNamespace(config=SimpleNamespace(engine_settings={"processes": list(processes)}))


def test_the_cold_clock_runs_only_in_a_process_started_for_the_command(monkeypatch):
    from llmbench.core import process

    monkeypatch.setattr(process, "_COLD", {"armed": False, "spent": False})
    assert process.cold_clock() is None  # a notebook's or a library's process: its age is not a cold start
    process.arm_cold_start()
    first = process.cold_clock()
    assert first is not None and first > 0 and process.cold_clock(ready=True) >= first
    assert process.cold_clock() is None  # the next load (a sweep's next setup) is not cold


def test_the_load_row_pairs_processes_and_skips_what_is_not_a_time():
    base = _run({"load_s": 1.0}, {"load_s": 2.0}, {"load_s": float("nan")}, {"load_s": -1}, {"load_s": True})
    new = _run({"load_s": 2.0}, {"load_s": 4.0}, {"load_s": 3.0}, {"load_s": 3.0}, {"load_s": 3.0})
    b, n, change, low, high, k = process_change(base, new, "load_s")
    assert (b, n, k) == (1.5, 3.0, 2) and change == pytest.approx(100.0) and low == high == pytest.approx(100.0)
    assert process_change(_run({"load_s": 1.0}), _run({"load_s": 2.0}), "load_s") is None  # one pair: no interval
    assert process_change(_run(), _run(), "ready_s") is None
    assert process_change(SimpleNamespace(config=None), new, "load_s") is None


def test_the_lean_gguf_reader_agrees_with_ggufs_own(tmp_path):
    """sizes.gguf_tensors skips the metadata instead of decoding it (gguf's reader took ~19 s of every llama.cpp
    cold start for a 151,936-token vocabulary): on a file gguf's writer made, with every kind of metadata and
    tensors stored plain and quantized, both readers give each tensor the same elements and bytes."""
    import gguf
    import numpy as np

    from llmbench.engines.sizes import gguf_sizes, gguf_tensors

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_array("tokenizer.ggml.tokens", [f"tok{i}" for i in range(3000)])
    w.add_array("tokenizer.ggml.scores", [float(i) for i in range(3000)])
    w.add_array("nested", [[1, 2], [3]])
    w.add_uint8("u8", 1)
    w.add_int64("i64", -2)
    w.add_float64("f64", 0.5)
    w.add_bool("flag", True)
    w.add_string("name", "tiny")
    w.add_tensor("token_embd.weight", np.ones((64, 32), dtype=np.float32))
    w.add_tensor("output.weight", np.ones((64, 32), dtype=np.float16))
    q8 = gguf.GGMLQuantizationType.Q8_0
    block, size = gguf.GGML_QUANT_SIZES[q8]
    w.add_tensor("blk.0.ffn.weight", np.zeros((4, 64 // block * size), dtype=np.uint8), raw_dtype=q8)  # 4 x 64
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    theirs = {t.name: (int(t.n_elements), int(t.n_bytes)) for t in gguf.GGUFReader(str(path)).tensors}
    assert gguf_tensors(path) == theirs and len(theirs) == 3
    params, total, decode = gguf_sizes(path)
    assert params == 64 * 32 * 2 + 256 and decode == total - 64 * 32 * 4  # untied: the embedding is gathered
    (tmp_path / "no.gguf").write_bytes(b"not a gguf at all")
    with pytest.raises(ValueError, match="not a GGUF"):
        gguf_tensors(tmp_path / "no.gguf")
    (tmp_path / "cut.gguf").write_bytes(path.read_bytes()[:200])
    with pytest.raises(ValueError, match="ends early"):
        gguf_tensors(tmp_path / "cut.gguf")
