"""A process reads a model folder's config and tokenizer once: the same folder again shares the tokenizer and gets a
config of its own; a folder whose files changed is read again."""

from __future__ import annotations

import os

from llmbench.engines.hf import models
from llmbench.options import ModelOptions


def _read(folder):
    return models._config_and_tokenizer(ModelOptions(model=str(folder)), "folder", folder, {})


def test_the_same_folder_is_read_once_and_a_changed_one_again(tiny_copy, monkeypatch):
    calls = []
    real = models._read_key

    def counted(*args):
        key = real(*args)
        calls.append(key)
        return key

    monkeypatch.setattr(models, "_read_key", counted)
    config, tokenizer = _read(tiny_copy)
    config2, tokenizer2 = _read(tiny_copy)
    assert tokenizer2 is tokenizer  # shared: llmbench only reads it
    assert config2 is not config and config2.to_dict() == config.to_dict()  # loading writes into a config
    config2.num_hidden_layers = 99
    assert _read(tiny_copy)[0].num_hidden_layers == 2  # a caller's change never reaches the next reader
    stat = (tiny_copy / "config.json").stat()
    os.utime(tiny_copy / "config.json", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
    _, tokenizer3 = _read(tiny_copy)
    assert tokenizer3 is not tokenizer and calls[-1] != calls[0]  # read again: its files changed
    assert models._read_key(tiny_copy, {}, True) is None  # remote code: never reused
