import pytest
import torch

from llmbench.core.errors import UserError
from llmbench.engines.hf import models
from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions as ModelSpec

DISK_MAP = {
    "model.embed_tokens": "cpu",
    "model.layers.0": "disk",
    "model.layers.1": "cpu",
    "model.norm": "cpu",
    "model.rotary_emb": "cpu",
    "lm_head": "cpu",
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA; the refusal is for machines without")
def test_cuda_without_cuda_is_a_user_error():
    with pytest.raises(UserError, match="no CUDA device"):
        models.resolve_device("cuda")
    with pytest.raises(UserError, match="no CUDA device"):
        models.resolve_device("cuda:1")


@pytest.mark.parametrize("bad", ["gpu", "cuda:x", "tpu", ""])
def test_unknown_device(bad):
    if bad == "":
        assert models.resolve_device(bad) in ("cpu", "cuda:0", "mps")  # empty means auto
        return
    with pytest.raises(UserError, match="--device"):
        models.resolve_device(bad)


def test_dtypes():
    assert models.resolve_dtype("bf16", "cpu") == ("bfloat16", "asked")
    assert models.resolve_dtype("float32", "cpu")[0] == "float32"
    with pytest.raises(UserError, match="unknown --dtype 'int3'"):
        models.resolve_dtype("int3", "cpu")
    assert models.resolve_dtype("auto", "cuda:0", probe=False)[0] == "bfloat16"


def test_auto_dtype_on_cpu_goes_through_the_stable_choice(monkeypatch, tmp_path):
    from llmbench.engines.hf import autodtype

    monkeypatch.setattr(autodtype, "cache_path", lambda: tmp_path / "dtype-auto.json")
    monkeypatch.setattr(models, "cpu_native_dtypes", lambda: {"bfloat16"})
    seen = []

    def fake_measure(candidates, rounds=autodtype.ROUNDS):
        seen.append(candidates)
        return {"float32": [9.0] * rounds, "bfloat16": [4.0] * rounds}, {d: [1.0] * rounds for d in candidates}

    monkeypatch.setattr(autodtype, "measure", fake_measure)
    warnings: list[str] = []
    dtype, reason = models.resolve_dtype("auto", "cpu", warnings=warnings)
    assert dtype == "bfloat16" and "float32 9.0 ms" in reason and "bfloat16 4.0 ms" in reason and not warnings
    assert seen == [("float32", "bfloat16")]
    assert models.resolve_dtype("auto", "cpu")[1].endswith("(--reprobe)") and len(seen) == 1  # from the cache
    assert models.resolve_dtype("auto", "cpu", reprobe=True)[0] == "bfloat16" and len(seen) == 2
    assert models.resolve_dtype("auto", "cpu", probe=False) == ("bfloat16", "auto (not probed)")
    monkeypatch.setattr(models, "cpu_native_dtypes", lambda: set())
    assert models.resolve_dtype("auto", "cpu")[0] == "float32" and len(seen) == 2  # nothing native: no probe
    assert models.dtype_warnings("float16", "cpu") and not models.dtype_warnings("bfloat16", "cpu")
    monkeypatch.setattr(models, "cpu_native_dtypes", lambda: {"float16"})
    assert not models.dtype_warnings("float16", "cpu")


def test_classify_source(tmp_path, tiny_model_dir):
    assert models.classify_source(str(tiny_model_dir), "pretrained") == ("folder", tiny_model_dir)
    assert models.classify_source("Qwen/Qwen2.5-0.5B-Instruct", "random")[0] == "builtin"
    assert models.classify_source("Qwen/Qwen2.5-0.5B-Instruct", "pretrained")[0] == "hub"
    with pytest.raises(UserError, match="model folder not found"):
        models.classify_source(str(tmp_path / "missing"), "pretrained")
    with pytest.raises(UserError, match="GGUF file not found"):
        models.classify_source("nothing.gguf", "pretrained")
    f = tmp_path / "file.txt"
    f.write_text("x")
    with pytest.raises(UserError, match="is a file"):
        models.classify_source(str(f), "pretrained")
    with pytest.raises(UserError, match="valid hub id"):
        models.classify_source("bad id with spaces", "pretrained")


def test_hub_id_offline_and_not_cached_names_the_alternatives(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf" / "hub"))
    with pytest.raises(UserError) as e:
        load_model(ModelSpec(model="someone/not-cached-model", device="cpu"))
    msg = str(e.value)
    assert "not in the Hugging Face cache" in msg and "--weights random" in msg and ".gguf" in msg
    assert "\n" not in msg


def test_load_tiny_folder_pretrained(tiny_model_dir):
    lm = load_model(ModelSpec(model=str(tiny_model_dir), device="cpu", dtype="float32"))
    assert lm.source == "folder" and lm.weights == "pretrained" and lm.dtype == "float32"
    assert lm.load.offload.disk == [] and lm.load.offload.meta == [] and lm.load.offload.missing_bytes == 0
    assert lm.load.parameters == sum(p.numel() for p in lm.model.parameters())
    assert lm.load.weights_bytes == lm.load.parameters * 4
    assert lm.max_positions == 512
    assert not any("RANDOM" in w for w in lm.warnings)
    # the saved weights were loaded, not re-initialised
    from safetensors.torch import load_file

    saved = load_file(str(tiny_model_dir / "model.safetensors"))
    key = "model.layers.0.mlp.up_proj.weight"
    assert torch.equal(saved[key], lm.model.state_dict()[key])


def test_a_hub_model_without_safetensors_is_not_told_to_allow_pickle(tmp_path):
    (tmp_path / "pytorch_model.bin").write_bytes(b"")
    with pytest.raises(UserError, match="fetches safetensors only.*download the repository") as e:
        models.check_weight_files(tmp_path, allow_pickle=True, hub_id="someone/old-model")
    assert "someone/old-model" in str(e.value)


def test_folder_without_weights_or_config(tiny_copy, tmp_path):
    (tiny_copy / "model.safetensors").unlink()
    with pytest.raises(UserError, match="no weights"):
        load_model(ModelSpec(model=str(tiny_copy), device="cpu"))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no config.json"):
        load_model(ModelSpec(model=str(empty), device="cpu"))


def test_weights_on_disk_stop_the_run(tiny_model_dir):
    with pytest.raises(UserError) as e:
        load_model(ModelSpec(model=str(tiny_model_dir), device="cpu", dtype="float32", device_map=DISK_MAP))
    msg = str(e.value)
    assert "on disk: model.layers.0" in msg and "not in memory" in msg and "--allow-offload" in msg


def test_allowed_offload_runs_and_is_recorded(tiny_model_dir):
    lm = load_model(
        ModelSpec(model=str(tiny_model_dir), device="cpu", dtype="float32", device_map=DISK_MAP, allow_offload=True)
    )
    off = lm.load.offload
    assert off.disk == ["model.layers.0"]
    assert off.meta and all(n.startswith("model.layers.0.") for n in off.meta)
    layer0 = lm.model.model.layers[0]
    assert off.missing_bytes == sum(p.numel() * 4 for p in layer0.parameters()) > 0  # float32: 4 bytes each
    assert lm.load.allowed_offload and lm.load.device_map["model.layers.0"] == "disk"
    assert any(w.startswith("OFFLOADED") for w in lm.warnings)
    ids = lm.tokenizer("hello", return_tensors="pt")["input_ids"]
    out = lm.model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)
    assert out.shape[-1] == ids.shape[-1] + 2  # it really runs, streaming layer 0 from disk


def test_too_big_for_memory_stops_before_loading(monkeypatch):
    monkeypatch.setattr(models, "available_bytes", lambda device: 100 << 20)
    with pytest.raises(UserError, match="need ~0.99 GB but only 0.10 GB"):
        models.check_fits(988_065_536, "cpu", allow_offload=False)
    models.check_fits(988_065_536, "cpu", allow_offload=True)  # allowed: no error


def test_builtin_qwen_tokenizer_is_the_real_one(qwen_tokenizer):
    tok = qwen_tokenizer
    assert tok.convert_tokens_to_ids(["<|endoftext|>", "<|im_start|>", "<|im_end|>"]) == [151643, 151644, 151645]
    assert tok("hello world 12", add_special_tokens=False)["input_ids"] == [14990, 1879, 220, 16, 17]
    text = tok.apply_chat_template([{"role": "user", "content": "你好"}], tokenize=False, add_generation_prompt=True)
    assert text == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
        "<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"
    )


def test_missing_dashscope_is_one_clear_error(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "dashscope" else real(name, *a))
    from llmbench.engines.hf import builtin

    with pytest.raises(UserError, match="pip install dashscope"):
        builtin.qwen_vocab_file()


def test_decode_weight_bytes_counts_tied_embeddings_once_and_skips_an_untied_input_table():
    from transformers import AutoModelForCausalLM, Qwen2Config

    from tests.conftest import TINY

    tied = AutoModelForCausalLM.from_config(Qwen2Config(**TINY))
    every = sum(p.numel() * 4 for p in tied.parameters())  # parameters() yields a tied tensor once
    assert models.decode_weight_bytes(tied) == every
    untied = AutoModelForCausalLM.from_config(Qwen2Config(**{**TINY, "tie_word_embeddings": False}))
    table = untied.get_input_embeddings().weight.numel() * 4
    assert models.decode_weight_bytes(untied) == sum(p.numel() * 4 for p in untied.parameters()) - table
