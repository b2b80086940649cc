"""The public Python API: what a notebook or a CI script calls, and the shape of the package behind it.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_api.py."""

from __future__ import annotations

import pytest

import llmbench


@pytest.mark.slow
def test_measure_random_weights_as_the_issue_asks():
    run = llmbench.measure(["Why is the sky blue?", "你好"], weights="random", max_new_tokens=4, device="cpu",
                           dtype="bfloat16")  # fmt: skip
    assert len(run.requests) == 2 and run.summary is not None and run.config.weights == "random"
    assert all(r.output_tokens == 4 for r in run.requests)  # random weights: fixed length by default
