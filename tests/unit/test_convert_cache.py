"""The engines' conversion cache (llmbench/engines/convert.py): every key names what shapes the converted files
(here: the libraries a step runs with, the packages of the exporter's own environment), and a step cut short
leaves nothing in the cache. The converters are faked: a unit test starts no process."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from llmbench.engines import convert
from llmbench.options import ModelOptions


@pytest.fixture
def keys(monkeypatch, tmp_path):
    """The cache keys the steps ask for (no step runs); versions as ``versions`` says."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    asked: list[str] = []
    versions: dict[str, str] = {}

    def run_step(what, tool, argv, out, key, steps, status, env=None):
        asked.append(key)
        return out

    monkeypatch.setattr(convert, "_run_step", run_step)
    monkeypatch.setattr(convert, "package_version", lambda dist: versions.get(dist, "1.0"))
    monkeypatch.setattr(convert, "source_sha256", lambda path: "source")
    return asked, versions


def test_random_weights_are_keyed_by_the_libraries_that_draw_and_save_them(keys, monkeypatch, tmp_path):
    asked, versions = keys
    monkeypatch.setattr(convert, "_config_facts", lambda spec, source, path: {"hidden_size": 8})
    spec = ModelOptions(model=str(tmp_path), weights="random")
    convert._source_files(spec, "folder", tmp_path, [], print)
    versions["transformers"] = "9.9"  # another transformers initialises (and saves) otherwise
    convert._source_files(spec, "folder", tmp_path, [], print)
    assert asked[0] != asked[1]


def test_an_export_is_keyed_by_the_packages_of_the_exporters_environment(keys, monkeypatch, tmp_path):
    asked, _ = keys
    venv = tmp_path / "ov-export"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "optimum-cli").write_text("#!/bin/sh\n")
    site = venv / "lib" / "python3.11" / "site-packages"
    (site / "nncf-2.13.0.dist-info").mkdir(parents=True)
    monkeypatch.setattr(convert, "optimum_cli", lambda: venv / "bin" / "optimum-cli")
    convert._to_openvino(tmp_path, "int4", [], print)
    (site / "nncf-2.13.0.dist-info").rename(site / "nncf-2.14.0.dist-info")  # upgraded in place: same path
    convert._to_openvino(tmp_path, "int4", [], print)
    assert asked[0] != asked[1]


def test_an_interrupted_conversion_leaves_nothing_in_the_cache(monkeypatch, tmp_path):
    out = tmp_path / "engines" / "llama.cpp" / "key.gguf"

    def interrupted(argv, **kw):
        Path(argv[-1]).write_bytes(b"half a file")  # the converter had written part of it
        raise KeyboardInterrupt

    monkeypatch.setattr(convert.subprocess, "run", interrupted)
    with pytest.raises(KeyboardInterrupt):
        convert._run_step("converting", "tool", ["convert", "{OUT}"], out, "key", [], print)
    assert [p.name for p in out.parent.iterdir()] == ["key.gguf.log"]  # no temp a later run could stumble on

    def fine(argv, **kw):
        Path(argv[-1]).write_bytes(b"whole")
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setattr(convert.subprocess, "run", fine)
    assert convert._run_step("converting", "tool", ["convert", "{OUT}"], out, "key", [], print).read_bytes() == b"whole"
