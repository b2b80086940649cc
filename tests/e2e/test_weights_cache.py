"""The random-weights cache: built once, memory-mapped after, bit for bit the weights an in-memory build makes;
one builder among processes racing on a cold cache; broken entries rebuilt; an unwritable cache never fatal.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_weights_cache.py."""

from __future__ import annotations

import json
import signal

import pytest

from tests.unit.test_weights_cache import (
    build,
    cache,  # noqa: F401 (fixtures)
    cached,
    entries,
    start_children,
    tiny_config,
    weights_sha256,
)


@pytest.mark.subprocess
def test_processes_racing_on_a_cold_cache_build_once_and_load_the_same(tmp_path, cache):
    procs = start_children(8, tmp_path, cache)
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    assert len((tmp_path / "builds.log").read_text().split()) == 1  # exactly one process built
    assert sorted(o["record"]["hit"] for o in outs) == [False] + [True] * 7
    assert {o["sha"] for o in outs} == {weights_sha256(build(tiny_config()))}
    assert all(o["mmapped"] is True and o["warnings"] == [] for o in outs)
    assert len({o["record"]["path"] for o in outs}) == 1 and len(entries(cache)) == 1


@pytest.mark.subprocess
def test_a_builder_killed_mid_write_leaves_no_entry(tmp_path, cache):
    (p,) = start_children(1, tmp_path, cache, DIE_WHILE_SAVING="1")
    p.communicate(timeout=300)
    assert p.returncode == -signal.SIGKILL
    root = cache / "random-weights"
    left = [d.name for d in root.iterdir() if d.is_dir()]
    assert len(left) == 1 and ".tmp-" in left[0]  # killed mid-write: a temp folder, no entry
    warnings: list[str] = []
    got = cached(tiny_config(), warnings)  # the dead builder's lock died with it: this one builds
    assert got.record is not None and got.record["hit"] is False and warnings == []
    assert entries(cache) == [got.record["key"]]
