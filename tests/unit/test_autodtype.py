"""--dtype auto chooses the same dtype on every invocation on one machine, and every automatic choice is
recorded: the decision rule on fixed timings, the cache, and real runs."""

from __future__ import annotations

import json
import random
import sys

import pytest

from llmbench.engines.hf import autodtype
from tests.helpers import synthetic_run

CANDIDATES = ("float32", "bfloat16", "float16")


def _timings(decode_ms: dict[str, float], prefill_ms: dict[str, float] | None = None, noise=0.03, seed=0):
    """Interleaved rounds around the given medians, with per-round machine drift that hits every dtype alike
    (as in a real probe) plus a little independent noise."""
    rng = random.Random(seed)
    prefill_ms = prefill_ms or dict.fromkeys(decode_ms, 5.0)
    decode = {d: [] for d in decode_ms}
    prefill = {d: [] for d in decode_ms}
    for _ in range(autodtype.ROUNDS):
        drift = rng.uniform(0.7, 1.3)  # the machine's state this round: up to 30% either way
        for d in decode_ms:
            decode[d].append(decode_ms[d] * drift * rng.uniform(1 - noise, 1 + noise))
            prefill[d].append(prefill_ms[d] * drift * rng.uniform(1 - noise, 1 + noise))
    return decode, prefill


@pytest.mark.parametrize("seed", range(8))
def test_within_noise_the_preference_wins_every_time(seed):
    # the machine: equal speeds, and each measurement scattered by +-15%, so one-shot probes read
    # "float16 10.0, bfloat16 12.2" once and the reverse the next time
    timings = _timings({"float32": 11.0, "bfloat16": 11.0, "float16": 11.0}, noise=0.15, seed=seed)
    dtype, reason = autodtype.decide(CANDIDATES, timings)
    assert dtype == "bfloat16" and "preferred" in reason and "no other dtype faster beyond noise" in reason


@pytest.mark.parametrize("seed", range(4))
def test_a_real_but_small_difference_does_not_flip_the_choice(seed):
    # float32 really 3% faster per token: under the 5% margin, so the preference keeps the choice stable
    timings = _timings({"float32": 10.7, "bfloat16": 11.0, "float16": 11.4}, noise=0.01, seed=seed)
    assert autodtype.decide(CANDIDATES, timings)[0] == "bfloat16"


def test_a_clear_winner_still_wins():
    dtype, reason = autodtype.decide(CANDIDATES, _timings({"float32": 7.0, "bfloat16": 12.0, "float16": 12.5}))
    assert dtype == "float32" and "faster than bfloat16 beyond noise" in reason
    assert "float32/bfloat16 decode 0.5" in reason  # the measured ratio and its interval are in the reason


def test_a_dtype_that_decodes_faster_but_prefills_far_slower_is_not_chosen():
    # float16 emulated on a CPU without AVX512-FP16: a decent matvec, a 6x slower matmul (field notes)
    decode = {"float32": 12.0, "bfloat16": 12.0, "float16": 8.0}
    prefill = {"float32": 5.0, "bfloat16": 4.0, "float16": 24.0}
    dtype, _ = autodtype.decide(CANDIDATES, _timings(decode, prefill))
    assert dtype == "bfloat16"


def test_without_16_bit_dtypes_float32_is_preferred():
    assert autodtype.preferred(("float32",)) == "float32"
    assert autodtype.preferred(("float32", "float16")) == "float16"


def _key(threads=2, torch_version="2.13.0"):
    return autodtype.machine_key(threads, {"avx512f", "avx512_bf16", "sse2"}, torch_version)


def test_the_decision_is_cached_per_machine_threads_and_torch(tmp_path):
    path = tmp_path / "cache" / "dtype-auto.json"
    calls = []

    def fake_measure(candidates):
        calls.append(candidates)
        return _timings({d: 10.0 for d in candidates})

    first = autodtype.choose(CANDIDATES, _key(), measure_fn=fake_measure, path=path)
    again = autodtype.choose(CANDIDATES, _key(), measure_fn=fake_measure, path=path)
    assert len(calls) == 1 and first.dtype == again.dtype == "bfloat16"
    assert first.reason.startswith("auto (measured):") and "cached from" in again.reason and str(path) in again.reason
    assert _key()["cpu_flags"] == ["avx512_bf16", "avx512f"]  # only the flags that decide kernels
    autodtype.choose(CANDIDATES, _key(threads=1), measure_fn=fake_measure, path=path)
    autodtype.choose(CANDIDATES, _key(torch_version="2.14.0"), measure_fn=fake_measure, path=path)
    assert len(calls) == 3  # another thread count, another torch: measured again
    assert len(json.loads(path.read_text())["entries"]) == 3
    autodtype.choose(CANDIDATES, _key(), measure_fn=fake_measure, path=path, reprobe=True)
    assert len(calls) == 4 and len(json.loads(path.read_text())["entries"]) == 3  # --reprobe replaced its entry


def test_a_corrupt_or_unwritable_cache_is_a_warning_never_fatal(tmp_path):
    def fake_measure(candidates):
        return _timings({d: 10.0 for d in candidates})

    path = tmp_path / "dtype-auto.json"
    path.write_text("{not json", encoding="utf-8")
    choice = autodtype.choose(CANDIDATES, _key(), measure_fn=fake_measure, path=path)
    assert choice.dtype == "bfloat16" and any("ignored the --dtype auto cache" in w for w in choice.warnings)
    assert json.loads(path.read_text())["version"] == autodtype.CACHE_VERSION  # rewritten whole
    blocked = tmp_path / "a-file"
    blocked.write_text("x", encoding="utf-8")
    choice = autodtype.choose(CANDIDATES, _key(), measure_fn=fake_measure, path=blocked / "sub" / "c.json")
    assert choice.dtype == "bfloat16" and any("could not write the --dtype auto cache" in w for w in choice.warnings)


def test_the_cache_lives_in_the_users_cache_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if sys.platform.startswith("linux"):
        assert autodtype.cache_path() == tmp_path / "llmbench" / "dtype-auto.json"


def test_compare_says_when_only_an_automatic_choice_differs():
    from llmbench.analysis.compare import compare_runs

    a, b = synthetic_run(n=5, seed=1), synthetic_run(n=5, seed=2)
    a.config.auto = b.config.auto = ["dtype", "threads"]
    a.config.dtype, b.config.dtype = "float16", "bfloat16"
    comp = compare_runs(a, b)
    assert comp.auto_diffs == ["dtype"]
    from llmbench.present.terminal import compare_lines

    head, _ = compare_lines(comp, [])
    assert (
        "setup differs: dtype: auto chose float16, then bfloat16 (an automatic choice, not an option that changed)"
        in head
    )
    b.config.auto = []  # the user asked for bfloat16 the second time
    head, _ = compare_lines(compare_runs(a, b), [])
    assert "setup differs: dtype: float16 -> bfloat16" in head
