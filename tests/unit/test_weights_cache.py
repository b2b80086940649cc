"""The random-weights cache: built once, memory-mapped after, bit for bit the weights an in-memory build makes;
one builder among processes racing on a cold cache; broken entries rebuilt; an unwritable cache never fatal."""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, Qwen2Config

from llmbench.engines.hf import models, weights_cache
from llmbench.engines.hf.models import load_model
from llmbench.options import ModelOptions
from tests.conftest import TINY

REPO = Path(__file__).resolve().parents[2]
BF16 = torch.bfloat16


@pytest.fixture
def cache(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("LLMBENCH_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def tiny_config() -> Qwen2Config:
    return Qwen2Config(**TINY)


def build(config, log: list[str] | None = None):
    if log is not None:
        log.append("built")
    return models._random_model(config, BF16, "cpu")


def cached(config, warnings: list[str], log: list[str] | None = None) -> weights_cache.Cached:
    return weights_cache.random_model(config, BF16, models.RANDOM_SEED, lambda: build(config, log), warnings)


def assert_same_weights(a, b) -> None:
    sa, sb = a.state_dict(), b.state_dict()
    assert sa.keys() == sb.keys()
    for k in sa:
        assert sa[k].dtype == sb[k].dtype and torch.equal(sa[k], sb[k]), k


def weights_sha256(model) -> str:
    h = hashlib.sha256()
    for k, v in sorted(model.state_dict().items()):
        h.update(k.encode() + b"\0" + v.detach().contiguous().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def entries(cache: Path, kind: str = "random-weights") -> list[str]:
    root = cache / kind
    return sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def test_cached_weights_are_the_in_memory_build_bit_for_bit_and_mapped(cache):
    config = tiny_config()
    fresh = build(config)
    warnings: list[str] = []
    log: list[str] = []
    first = cached(config, warnings, log)
    second = cached(config, warnings, log)
    assert log == ["built"] and warnings == []
    assert first.record is not None and second.record is not None
    assert first.record["hit"] is False and isinstance(first.record["build_s"], float)
    assert second.record["hit"] is True and second.record["build_s"] is None
    key = second.record["key"]
    assert len(key) == 64 and second.record["path"] == str(cache / "random-weights" / key) == first.record["path"]
    assert {"model.safetensors", "config.json", weights_cache.MANIFEST} <= set(os.listdir(second.record["path"]))
    for got in (first, second):
        assert_same_weights(got.value, fresh)
        m = got.value
        assert m.lm_head.weight is m.model.embed_tokens.weight  # tied weights still tied
        assert weights_cache.file_backed(m.parameters(), got.files) is True  # the builder maps the file too
    assert weights_cache.file_backed(fresh.parameters(), second.files) is False  # the check can say no
    ids = torch.tensor([[151644, 872, 198, 9707]])
    kwargs = {"max_new_tokens": 8, "do_sample": False, "pad_token_id": 151643}
    assert torch.equal(fresh.generate(ids, **kwargs), second.value.generate(ids, **kwargs))


def test_the_key_is_the_architecture_not_the_folder(tiny_model_dir, tiny_copy):
    a, b = AutoConfig.from_pretrained(tiny_model_dir), AutoConfig.from_pretrained(tiny_copy)
    key = weights_cache.entry_key(weights_cache.weights_key_parts(a, BF16, 0))
    assert key == weights_cache.entry_key(weights_cache.weights_key_parts(b, BF16, 0))
    assert key != weights_cache.entry_key(weights_cache.weights_key_parts(a, torch.float32, 0))
    assert key != weights_cache.entry_key(weights_cache.weights_key_parts(a, BF16, 1))
    b.num_hidden_layers = 3
    assert key != weights_cache.entry_key(weights_cache.weights_key_parts(b, BF16, 0))


def test_load_model_records_the_cache_and_the_mapping(cache, tiny_model_dir):
    spec = ModelOptions(model=str(tiny_model_dir), weights="random", device="cpu", dtype="bfloat16", threads=1)
    first, second = load_model(spec), load_model(spec)
    assert first.load.weights_cache is not None and second.load.weights_cache is not None
    assert first.load.weights_cache["hit"] is False and second.load.weights_cache["hit"] is True
    assert first.load.weights_cache["key"] == second.load.weights_cache["key"]
    assert first.load.weights_mmapped is True and second.load.weights_mmapped is True
    assert first.load.device_map is None  # loaded as the in-memory build is: no accelerate placement
    assert_same_weights(first.model, second.model)
    assert [w for w in second.warnings if "cache" in w] == []


def test_pretrained_weights_are_mapped_when_the_file_has_the_dtype_asked(tiny_model_dir):
    same = load_model(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="float32", threads=1))
    cast = load_model(ModelOptions(model=str(tiny_model_dir), device="cpu", dtype="bfloat16", threads=1))
    assert same.load.weights_mmapped is True and same.load.weights_cache is None
    assert cast.load.weights_mmapped is False  # a cast is a private copy


@pytest.mark.parametrize("damage", ["truncated", "header", "manifest"])
def test_a_broken_entry_is_rebuilt_with_a_warning(cache, damage):
    config = tiny_config()
    first = cached(config, [])
    assert first.record is not None
    entry = Path(first.record["path"])
    weights = entry / "model.safetensors"
    del first  # nothing maps the file now
    if damage == "truncated":
        os.truncate(weights, weights.stat().st_size // 2)
    elif damage == "header":  # same size, so only loading it finds out
        with weights.open("r+b") as f:
            f.write(b"\xff" * 16)
    else:
        (entry / weights_cache.MANIFEST).write_text("{not json", encoding="utf-8")
    warnings: list[str] = []
    log: list[str] = []
    again = cached(config, warnings, log)
    assert log == ["built"] and again.record is not None and again.record["hit"] is False
    assert len(warnings) == 1 and "unreadable" in warnings[0] and "rebuilding" in warnings[0]
    assert_same_weights(again.value, build(config))
    later: list[str] = []
    assert cached(config, later).record["hit"] is True and later == []  # type: ignore[index]
    assert entries(cache) == [again.record["key"]]  # nothing left beside it


def test_a_stale_temp_folder_does_not_break_the_next_build(cache):
    config = tiny_config()
    key = weights_cache.entry_key(weights_cache.weights_key_parts(config, BF16, models.RANDOM_SEED))
    stale = cache / "random-weights" / f"{key}.tmp-99999-dead"
    stale.mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"half a file")
    warnings: list[str] = []
    got = cached(config, warnings)
    assert got.record is not None and got.record["hit"] is False and warnings == []
    assert entries(cache) == [key]
    assert_same_weights(got.value, build(config))


def test_an_unwritable_cache_folder_builds_in_memory(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder", encoding="utf-8")
    monkeypatch.setenv("LLMBENCH_CACHE", str(blocker / "cache"))  # mkdir fails whoever runs the test, root too
    config = tiny_config()
    warnings: list[str] = []
    got = cached(config, warnings)
    assert got.record is None and got.files == []
    assert len(warnings) == 1 and "not writable" in warnings[0] and "built in memory" in warnings[0]
    assert weights_cache.file_backed(got.value.parameters(), got.files) is False
    assert_same_weights(got.value, build(config))


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes into a read-only folder anyway")
def test_a_read_only_cache_folder_builds_in_memory(cache):
    cache.mkdir()
    cache.chmod(0o555)
    try:
        warnings: list[str] = []
        got = cached(tiny_config(), warnings)
    finally:
        cache.chmod(0o755)
    assert got.record is None and len(warnings) == 1 and "not writable" in warnings[0]


def test_a_full_disk_keeps_the_model_in_memory_and_leaves_nothing(cache, monkeypatch):
    def full(model, folder: Path) -> None:
        (folder / "model.safetensors").write_bytes(b"\0" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(weights_cache, "_save_model", full)
    config = tiny_config()
    warnings: list[str] = []
    got = cached(config, warnings)
    assert got.record is None and len(warnings) == 1 and "No space left on device" in warnings[0]
    assert_same_weights(got.value, build(config))
    assert entries(cache) == []  # neither an entry nor a temp folder
    monkeypatch.undo()
    monkeypatch.setenv("LLMBENCH_CACHE", str(cache))
    assert cached(config, []).record["hit"] is False  # type: ignore[index]


def test_off_the_cpu_random_weights_are_built_on_the_device_as_before(cache, monkeypatch):
    built: list[str] = []
    monkeypatch.setattr(models, "_random_model", lambda config, dtype, device: built.append(device) or "model")
    monkeypatch.setattr(weights_cache, "random_model", lambda *a, **k: pytest.fail("a GPU build went to the cache"))
    got = models._random_weights(tiny_config(), BF16, "cuda:0", [])
    assert (got.value, got.record, got.files, built) == ("model", None, [], ["cuda:0"])
    assert not cache.exists()


# ---------------------------------------------------------------------------------------------- processes

CHILD = r"""
import json, os, sys, time
from pathlib import Path
root, name = Path(sys.argv[1]), sys.argv[2]
import torch
from transformers import Qwen2Config
from llmbench.engines.hf import models, weights_cache
from tests.conftest import TINY
from tests.unit.test_weights_cache import weights_sha256
config = Qwen2Config(**TINY)
(root / f"ready-{name}").touch()
while not (root / "go").exists():  # every child imported: they all reach the cache at the same moment
    time.sleep(0.005)

def build():
    with open(root / "builds.log", "a") as f:
        f.write(name + "\n")
    return models._random_model(config, torch.bfloat16, "cpu")

if os.environ.get("DIE_WHILE_SAVING"):
    def dying(model, folder):
        (folder / "model.safetensors").write_bytes(b"\0" * 4096)
        os.kill(os.getpid(), 9)
    weights_cache._save_model = dying
warnings = []
got = weights_cache.random_model(config, torch.bfloat16, models.RANDOM_SEED, build, warnings)
print(json.dumps({"record": got.record, "sha": weights_sha256(got.value), "warnings": warnings,
                  "mmapped": weights_cache.file_backed(got.value.parameters(), got.files)}))
"""


def start_children(n: int, root: Path, cache: Path, **env: str) -> list[subprocess.Popen]:
    full_env = {**os.environ, "LLMBENCH_CACHE": str(cache), "PYTHONPATH": str(REPO), **env}
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(root), str(i)], cwd=REPO, env=full_env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(n)]  # fmt: skip
    deadline = time.monotonic() + 300
    while len(list(root.glob("ready-*"))) < n:
        assert all(p.poll() is None for p in procs), [p.communicate() for p in procs if p.poll() is not None]
        assert time.monotonic() < deadline, "the children did not start"
        time.sleep(0.05)
    (root / "go").touch()
    return procs


# ---------------------------------------------------------------------------------------------- the tokenizer
