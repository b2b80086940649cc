"""Loading models through the real code, with runs on the tiny model: pickle-only folders, corrupt files, a
mixture of experts, the flags errors recommend (the rest of loading: tests/unit/test_models.py)."""

import pytest
import torch

from llmbench.core.errors import UserError
from llmbench.engines.hf import models
from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions as ModelSpec


@pytest.mark.slow
def test_the_probe_measures_every_candidate_in_interleaved_rounds():
    from llmbench.engines.hf import autodtype

    decode, prefill = autodtype.measure(("float32", "bfloat16"), rounds=3)
    assert set(decode) == set(prefill) == {"float32", "bfloat16"}
    assert all(len(v) == 3 and min(v) > 0 for v in (*decode.values(), *prefill.values()))


@pytest.mark.slow
def test_pickle_only_folder_is_refused_unless_allowed(tiny_copy):
    from safetensors.torch import load_file

    state = load_file(str(tiny_copy / "model.safetensors"))
    (tiny_copy / "model.safetensors").unlink()
    torch.save(state, tiny_copy / "pytorch_model.bin")
    with pytest.raises(UserError, match="pickle"):
        load_model(ModelSpec(model=str(tiny_copy), device="cpu"))
    lm = load_model(ModelSpec(model=str(tiny_copy), device="cpu", allow_pickle=True))
    assert lm.load.parameters > 0


@pytest.mark.slow
def test_the_commands_whose_errors_recommend_a_flag_have_it(cli, tiny_copy, prompt_file, tmp_path):
    from safetensors.torch import load_file

    state = load_file(str(tiny_copy / "model.safetensors"))
    (tiny_copy / "model.safetensors").unlink()
    torch.save(state, tiny_copy / "pytorch_model.bin")
    base = ("sweep", prompt_file, "-m", tiny_copy, "--dtype", "float32", "--threads", "1", "--rounds", "1",
            "--max-new-tokens", "2", "--warmup", "0", "-q")  # fmt: skip
    r = cli(*base, "-o", tmp_path / "s1")
    assert r.returncode == 2 and "--allow-pickle" in r.stderr  # the error recommends it ...
    r = cli(*base, "--allow-pickle", "-o", tmp_path / "s2")
    assert r.returncode == 0, r.stderr  # ... and sweep has it
    r = cli("serve", "-m", tiny_copy, "--device-map", "{bad", "--port", "1")
    assert r.returncode == 2 and "--device-map is not valid JSON" in r.stderr  # serve parses the flag too


def test_a_mixture_of_experts_model_gets_no_dense_roofline(tmp_path, qwen_tokenizer):
    from transformers import AutoModelForCausalLM, MixtralConfig

    config = MixtralConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                           num_key_value_heads=2, vocab_size=151936, num_local_experts=4, num_experts_per_tok=2,
                           max_position_embeddings=512, eos_token_id=151645)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path)
    qwen_tokenizer.save_pretrained(tmp_path)
    lm = load_model(ModelSpec(model=str(tmp_path), device="cpu", dtype="float32", threads=1))
    assert lm.load.decode_weight_bytes is None and any("4 experts, 2 per token" in w for w in lm.warnings)
    import llmbench

    run = llmbench.measure(["hi"], model=lm, max_new_tokens=3, ignore_eos=True, warmup=0)
    assert run.summary.tpot_bound_ms is None and run.summary.tpot_efficiency is None
    assert models.mixture_of_experts(AutoModelForCausalLM.from_pretrained(tmp_path).config)


@pytest.mark.slow
def test_corrupt_files_are_one_clear_error(tiny_copy, tmp_path):
    (tiny_copy / "model.safetensors").write_bytes(b"\x00garbage" * 10)
    with pytest.raises(UserError, match="cannot load the weights"):
        load_model(ModelSpec(model=str(tiny_copy), device="cpu"))
    (tiny_copy / "config.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="cannot load the config/tokenizer"):
        load_model(ModelSpec(model=str(tiny_copy), device="cpu"))
    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf file at all")
    with pytest.raises(UserError, match="cannot load"):
        load_model(ModelSpec(model=str(bad), device="cpu"))
