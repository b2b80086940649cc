"""--engine: llama.cpp, OpenVINO GenAI and ONNX Runtime GenAI behind the one run loop, fed the same token ids.

The backend's own logic (stamps, the engine's timers, prefix-reuse and vocabulary checks) is driven by a runner
with known delays, which gives the ground truth; each real engine is then run on the trained SmolLM2 GGUF and on
a tiny real Qwen2 folder converted by the engine's own tool (skipped, with the reason, where a package or a
converter is missing; .ci/run installs them all).

This file: the part that drives the tiny model, loopback servers in threads or short child processes
(tests/integration); the rest is in tests/e2e/test_engines.py."""

from __future__ import annotations

import llmbench
from llmbench.engines.chat import encode_ids, messages_for
from llmbench.results.metrics import ids_sha256
from tests.e2e.test_engines import known_engine


def test_an_engine_gets_the_tokenizer_ids_and_every_token_is_stamped_when_handed_over(qwen_tokenizer):
    em = known_engine(qwen_tokenizer, prefill_s=0.03, step_s=0.01)
    run = llmbench.measure(["某工厂夜间偷排废水", "A plant dumps water"], model=em, max_new_tokens=5, ignore_eos=True,
                           warmup=0)  # fmt: skip
    assert run.config.engine == "llama.cpp" and run.config.precision["weights"] == "q8_0"
    assert run.environment.engine == "known 1" and "engine_tpot_ms" in run.metrics
    for r, prompt in zip(run.requests, ["某工厂夜间偷排废水", "A plant dumps water"], strict=True):
        ids = encode_ids(qwen_tokenizer, messages_for(prompt, None), True)
        assert em.runner.fed[r.prompt_index] == ids  # the Hugging Face tokenizer's ids, chat template included
        assert r.prompt_tokens == len(ids) and r.prompt_token_ids_sha256 == ids_sha256(ids)
        assert r.output_tokens == 5 and r.output_token_ids_sha256 == ids_sha256([100, 101, 102, 103, 104])
        gaps = [b - a for a, b in zip(r.token_times_ms, r.token_times_ms[1:], strict=False)]
        assert r.ttft_ms >= 30.0 and min(gaps) >= 10.0  # the known delays are floors of the stamps
        assert (r.engine_ttft_ms, r.engine_tpot_ms, r.engine_prompt_tokens_evaluated) == (30.0, 10.0, len(ids))
    s = run.summary
    assert s.prompt_reuse_requests == 0 and s.engine_tpot_ms.mean == 10.0 and s.tpot_vs_engine_pct is not None
    assert not any("PREFIX" in w for w in run.warnings)


def test_a_request_that_evaluated_part_of_its_prompt_is_flagged(qwen_tokenizer):
    run = llmbench.measure(["one", "two"], model=known_engine(qwen_tokenizer, reuse=3, step_s=0.0, prefill_s=0.0),
                           max_new_tokens=3, ignore_eos=True, warmup=0, repeats=2)  # fmt: skip
    assert run.summary.prompt_reuse_requests == 4
    assert any(w.startswith("PREFIX REUSED: 4 of 4") for w in run.warnings)


def test_engines_lists_every_engine_and_asks_llama_cpp_in_a_child(cli):
    """The real `llmbench engines`: llama.cpp's build is asked in a child process (a build for a wider CPU dies
    of SIGILL there, not in llmbench); with no llama.cpp to import the child's failure is a note, not an exit."""
    import importlib.util

    from llmbench.engines import llama_cpp_build_check, status

    r = cli("engines")
    assert r.returncode == 0, r.stderr
    for name in ("transformers", "llama.cpp", "openvino", "onnxruntime"):
        assert f"{name}: " in r.stdout
    note = llama_cpp_build_check()
    if importlib.util.find_spec("llama_cpp") is None:
        assert note == "its build could not be asked what it uses (exit 1)"
    else:
        assert note in ("", "build matches this CPU") or "lacks" in note
        assert next(row for row in status() if row["engine"] == "llama.cpp")["note"] == note
