"""Shared-prefix workloads: prompts of exact lengths in groups that share exactly their prefix, cold and warm
requests told apart, against a server whose prefix cache is known and a model in this process."""

from __future__ import annotations

import pytest

from llmbench.core.errors import UserError
from llmbench.workloads.prefixes import PrefixSpec


def test_bad_prefix_group_options_are_one_line(cli, prompt_file):
    for args, said in (
        (("--prefix-groups", "2", "--prefix-tokens", "10"), "needs --suffix-tokens, --num-prompts"),
        (
            ("--prefix-groups", "0", "--prefix-tokens", "10", "--suffix-tokens", "5", "--num-prompts", "3"),
            "--prefix-groups must be 1 to 1,000,000",
        ),
        (
            (
                "--prefix-groups",
                "2",
                "--prefix-tokens",
                "10",
                "--suffix-tokens",
                "5",
                "--num-prompts",
                "3",
                "--group-dist",
                "pareto",
            ),
            "--group-dist 'pareto'",
        ),
        (
            (
                prompt_file,
                "--prefix-groups",
                "2",
                "--prefix-tokens",
                "10",
                "--suffix-tokens",
                "5",
                "--num-prompts",
                "3",
            ),
            "drop PROMPTS",
        ),
        ((prompt_file, "--prefix-tokens", "10"), "--prefix-tokens goes with --prefix-groups"),
    ):
        r = cli("run", *args, "--weights", "random", "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)


def test_prefix_group_options_that_can_not_act_are_one_line(cli, tiny_model_dir, prompt_file, tmp_path):
    groups = ("--prefix-groups", "2", "--prefix-tokens", "10", "--suffix-tokens", "5", "--num-prompts", "3")
    out = tmp_path / "x.json"
    for args, said in (
        # each was accepted and silently ignored: the groups make the prompts, no dataset is read or filtered
        ((*groups, "--prompt-column", "q"), "--prompt-column: options of a dataset"),
        ((*groups, "--min-prompt-tokens", "3", "--max-prompt-tokens", "900"), "--min-prompt-tokens, --max-prompt"),
        ((prompt_file, "--group-dist", "zipf"), "--group-dist goes with --prefix-groups"),
        # each was an internal error (an overflow drawing the groups, float('1.2.3'))
        ((*groups[:-1], str(10**20)), "--num-prompts must be 1 to 1,000,000, not 100000000000000000000"),
        (("--prefix-groups", str(10**20), *groups[2:]), "--prefix-groups must be 1 to 1,000,000"),
        ((*groups, "--group-dist", "zipf:1.2.3"), "--group-dist 'zipf:1.2.3'"),
        ((*groups, "--group-dist", "zipf:" + "9" * 400), "--group-dist 'zipf:999"),  # an exponent of infinity
        # was: a prefix of 10**12 tokens, made for hours before the context check
        (
            ("--prefix-groups", "2", "--prefix-tokens", str(10**12), *groups[4:]),
            "--prefix-tokens must be 0 to 10,000,000",
        ),
    ):
        r = cli("run", *args, "-m", tiny_model_dir, "--device", "cpu", "-o", out, "-q")
        assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not out.exists()


def test_a_steep_zipf_puts_every_prompt_in_the_first_group():
    exponent = "1" + "0" * 300  # 1e300: the weights 1 / (k + 1) ** A overflowed before they underflow now
    assert PrefixSpec(3, 10, 5, 50, f"zipf:{exponent}").group_of() == [0] * 50


def test_group_draws_follow_the_seed_and_the_distribution():
    uniform = PrefixSpec(4, 10, 5, 4000, "uniform", seed=1).group_of()
    assert uniform == PrefixSpec(4, 10, 5, 4000, "uniform", seed=1).group_of()
    assert uniform != PrefixSpec(4, 10, 5, 4000, "uniform", seed=2).group_of()
    assert all(900 < uniform.count(g) < 1100 for g in range(4))
    zipf = PrefixSpec(4, 10, 5, 4000, "zipf:2", seed=1).group_of()
    # weights 1, 1/4, 1/9, 1/16: the first group gets ~70%
    assert zipf.count(0) > 2 * sum(zipf.count(g) for g in (1, 2, 3)) * 0.9
    with pytest.raises(UserError, match="zipf:A with A > 0"):
        PrefixSpec(2, 1, 1, 1, "zipf:0").validate()


def _llama_server_ready():
    import importlib.util

    if importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("sse_starlette") is None:
        return None
    from tests.helpers import SMOLLM2

    return SMOLLM2 if SMOLLM2 is not None and SMOLLM2.is_file() else None
