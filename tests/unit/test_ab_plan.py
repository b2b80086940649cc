"""llmbench ab and its worker: the real worker's protocol and one ab of two real `llmbench worker` processes on a
tiny real Qwen2, and ab's plan and interval logic. ab's behaviour against known delays (orders, gates, failures,
resume, processes, duet, budget) is tests/integration/test_ab_logic_on_fake_workers.py; the A/A under a load that
comes and goes is tests/nightly/test_measured_claims.py."""

from __future__ import annotations

import itertools


def test_what_config_ab_records_of_a_side_holds_no_secret():
    from llmbench.drivers.ab import recorded_side

    assert recorded_side("env HF_TOKEN=hf_abc OTHER=1 llmbench worker --model m") == (
        "env HF_TOKEN=redacted OTHER=redacted llmbench worker --model m"
    )
    assert recorded_side("https://user:pw@api.example.com/v1?key=k") == "https://api.example.com/v1"
    side = recorded_side("llmbench worker --api-key sk-S3CRET --endpoint-url http://u:pw@127.0.0.1:8/v1?t=T0K")
    assert "sk-S3CRET" not in side and "pw@" not in side and "T0K" not in side and "llmbench worker" in side


def test_the_plan_alternates_who_goes_first():
    from llmbench.drivers.ab import abba
    from llmbench.runner.loop import Track
    from llmbench.workloads.prompts import PromptSet

    prompts = PromptSet.from_list(["a", "b", "c"])
    base, head = Track(None, None, None), Track(None, None, None)  # type: ignore[arg-type]
    plan = abba(base, head, prompts, 2)
    who = "".join("B" if t is base else "H" for t, _ in plan)
    assert who == "BHHBBHHBBHHB" and [(r.prompt_index, r.repeat) for _, r in plan[:4]] == [
        (0, 0),
        (0, 0),
        (1, 0),
        (1, 0),
    ]


def test_with_processes_each_process_alternates_who_goes_first():
    """Pair k runs on process k mod N: with an even N and k alone deciding the order, each process would see one
    order all its life (an order effect taken for a process effect)."""
    from llmbench.backends.pool import PoolBackend
    from llmbench.drivers.ab import abba
    from llmbench.runner.loop import Track
    from llmbench.workloads.prompts import PromptSet

    prompts = PromptSet.from_list([f"p{i}" for i in range(5)])
    base, head = Track(None, None, None), Track(None, None, None)  # type: ignore[arg-type]
    for n in (2, 3, 4):
        plan = abba(base, head, prompts, 2, n)
        firsts = [(t is base, r) for t, r in plan[::2]]
        assert [r for _, r in firsts] == [r for _, r in plan[1::2]]  # both sides of a pair back to back
        pool = PoolBackend.__new__(PoolBackend)
        pool.workers, pool.n_prompts = [None] * n, 5
        for p in range(n):
            mine = [b for b, r in firsts if pool.process_of(r) == p]
            assert len(mine) >= 2 and all(a != b for a, b in itertools.pairwise(mine)), (n, p, mine)
        assert sum(b for b, _ in firsts) == 5  # half the pairs base first
    assert [t is base for t, _ in abba(base, head, prompts, 2, 1)[::2]] == [k % 2 == 0 for k in range(10)]


def test_the_interval_resamples_processes_so_one_odd_process_is_noise():
    import numpy as np

    from llmbench.analysis.compare import change_interval

    rng = np.random.default_rng(0)
    base = 50 + rng.normal(0, 0.2, 40)
    clusters = np.arange(40) % 4  # pair k on process k mod 4, as ab --processes 4 assigns them
    shift = np.where(clusters == 0, 1.06, 1.0)  # one head process happens to be 6% slower, the other three not
    new = base * shift * (1 + rng.normal(0, 0.002, 40))
    change, low, _ = change_interval(base, new, "mean", paired=True)
    assert low > 0  # pairs alone: "significant", the odd process's offset sits inside every one of its pairs
    change_c, low_c, high_c = change_interval(base, new, "mean", paired=True, clusters=clusters)
    assert change_c == change and low_c < 0 < high_c  # per process: one process disagreeing is not a finding
    every = base * 1.06 * (1 + rng.normal(0, 0.002, 40))  # all four processes slower: still found
    assert change_interval(base, every, "mean", paired=True, clusters=clusters)[1] > 4
