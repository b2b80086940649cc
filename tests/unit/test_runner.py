"""The in-process run through the one loop and the public API, on a tiny real Qwen2.

This file: the part that needs no child process and no socket (tests/unit); the rest is in
tests/integration/test_runner.py."""

import pytest

import llmbench
from llmbench.core.errors import UserError
from tests.integration.test_runner import tiny  # noqa: F401 (fixtures)


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"max_new_tokens": 0}, "--max-new-tokens"),
        ({"max_new_tokens": -3}, "--max-new-tokens"),
        ({"repeats": 0}, "--repeats"),
        ({"warmup": -1}, "--warmup"),
    ],
)
def test_bad_options(tiny, kw, match):
    with pytest.raises(UserError, match=match):
        llmbench.measure(["x"], model=tiny, **kw)
