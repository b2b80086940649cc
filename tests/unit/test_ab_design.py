"""ab's design: processes one after another with setups of their own, TTFT-only pairs, the duet and the budget.
The plan and the planner are checked as functions; the rest with real `llmbench worker` processes on a tiny Qwen2."""

from __future__ import annotations

import itertools
import sys
from collections import Counter

import pytest

# --- the plan ---------------------------------------------------------------------------------------------------


def _plan(n_prompts=5, repeats=2, processes=1, **kw):
    from llmbench.drivers.ab import plan
    from llmbench.runner.loop import Track
    from llmbench.workloads.prompts import PromptSet

    prompts = PromptSet.from_list([f"p{i}" for i in range(n_prompts)])
    base, head = Track(None, None, None), Track(None, None, None)  # type: ignore[arg-type]
    return base, head, plan(base, head, prompts, repeats, processes, **kw)


def _process(req, n_prompts, processes):
    return (req.repeat * n_prompts + req.prompt_index) % processes


def test_the_plan_groups_pairs_by_process_and_keeps_every_pair_together():
    base, head, p = _plan(5, 4, 3)
    pairs = [p[k : k + 2] for k in range(0, len(p), 2)]
    assert all({a[0], b[0]} == {base, head} and a[1].prompt_index == b[1].prompt_index
               and a[1].repeat == b[1].repeat and a[1].pair == b[1].pair for a, b in pairs)  # fmt: skip
    procs = [_process(a[1], 5, 3) for a, _ in pairs]
    assert procs == sorted(procs)  # process 0's pairs, then 1's...: a side's processes live one at a time
    assert sorted((a[1].prompt_index, a[1].repeat) for a, _ in pairs) == [(i, r) for i in range(5) for r in range(4)]
    assert len({a[1].pair for a, _ in pairs}) == 20


def test_ttft_only_pairs_have_keys_of_their_own_spread_over_processes_and_among_the_full_pairs():
    _, _, p = _plan(5, 2, 2, ttft_pairs=8)
    keys = [(r.prompt_index, r.repeat, r.ttft_only) for _, r in p[::2]]
    full = {(i, rep) for i, rep, short in keys if not short}
    short = [(i, rep) for i, rep, s in keys if s]
    assert len(full) == 10 and len(short) == 8 and not full & set(short)
    assert all(rep >= 2 for _, rep in short)  # after the full rounds: no key shared with a full pair
    assert Counter(_process(r, 5, 2) for _, r in p[::2] if r.ttft_only) == {0: 4, 1: 4}
    # within a process the short pairs are among the full ones, not all at its end
    first_process = [r.ttft_only for _, r in p[::2] if _process(r, 5, 2) == 0]
    assert first_process != sorted(first_process)  # not all at the process's end


def test_each_process_starts_with_the_side_it_was_given_then_alternates():
    import random

    from llmbench.drivers.ab import balanced_firsts

    for n in (2, 3, 4, 7):
        firsts = balanced_firsts(n, random.Random(n))
        assert sum(firsts) == n // 2  # half the processes base first
        base, _, p = _plan(5, 3, n, base_first=firsts)
        for proc in range(n):
            mine = [t is base for t, r in p[::2] if _process(r, 5, n) == proc]
            assert mine[0] == firsts[proc] and all(a != b for a, b in itertools.pairwise(mine))
    assert balanced_firsts(1, random.Random(0)) == [True]


def test_a_duet_starts_both_at_once_on_two_cpus_swapped_pair_by_pair():
    base, head, p = _plan(4, 1, 1, duet=(0, 1))
    assert all(r.simultaneous for _, r in p)
    base_cpus = [r.cpu for t, r in p if t is base]
    head_cpus = [r.cpu for t, r in p if t is head]
    assert base_cpus == [0, 1, 0, 1] and head_cpus == [1, 0, 1, 0]


def test_full_and_ttft_only_pairs_each_alternate_cpus_and_orders_on_their_own():
    import random

    from llmbench.drivers.ab import balanced_firsts

    # a budget's design seen in the gate study: 15 processes, one round of 20 prompts, 31 TTFT-only pairs spread
    # among the full ones; counted together, every full pair had put the head on the same CPU
    base, head, p = _plan(20, 1, 15, ttft_pairs=31, duet=(0, 1))
    for short in (False, True):
        head_cpus = Counter(r.cpu for t, r in p if t is head and r.ttft_only == short)
        assert abs(head_cpus[0] - head_cpus[1]) <= 1, (short, head_cpus)
    # ABBA: within each process, each kind's pairs alternate who goes first, from the process's drawn side
    firsts = balanced_firsts(4, random.Random(1))
    base, _, p = _plan(5, 4, 4, ttft_pairs=12, base_first=firsts)
    for proc in range(4):
        for short in (False, True):
            mine = [t is base for t, r in p[::2] if _process(r, 5, 4) == proc and r.ttft_only == short]
            assert mine[0] == firsts[proc] and all(a != b for a, b in itertools.pairwise(mine)), (proc, short)


# --- the budget -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "5x", "-5m", "0", "0s", "nan", "inf", "1e9", "999999h", "5 m m"])
def test_a_budget_that_is_no_duration_is_refused(text):
    from llmbench.core.errors import UserError
    from llmbench.drivers.ab_budget import parse_budget

    with pytest.raises(UserError, match="--budget"):
        parse_budget(text)


def test_budgets_read_as_seconds():
    from llmbench.drivers.ab_budget import parse_budget

    assert [parse_budget(x) for x in ("300", "300s", "5m", "1.5h", " 2m ")] == [300, 300, 300, 5400, 120]


def test_the_planner_fills_the_budget_and_more_time_never_buys_a_worse_design():
    from llmbench.core.errors import UserError
    from llmbench.drivers.ab_budget import RESERVE, SWITCH_S, Costs, best_design

    costs = Costs(start_s=1.5, warmup_s=0.5, pair_s=1.0, ttft_pair_s=0.1)
    last = None
    for budget in (60, 120, 300, 600):
        n, r, s, mt, mf = best_design(budget, 5.0, costs, 20, 2)
        spent = 5.0 + (n - 1) * (costs.start_s + SWITCH_S) + n * 2 * costs.warmup_s
        spent += r * 20 * costs.pair_s + s * costs.ttft_pair_s
        assert spent <= budget * (1 - RESERVE) + 1e-9 and 2 <= n <= 32 and r >= 1 and s >= 0
        score = max(mt / 1.5, mf / 3.0)
        assert last is None or score <= last + 1e-12
        last = score
    with pytest.raises(UserError, match="too short"):
        best_design(20, 5.0, costs, 20, 2)


def test_ab_refuses_a_budget_with_the_knobs_it_chooses_and_a_duet_with_a_server(cli, prompt_file, tmp_path):
    w = f"{sys.executable} -m llmbench worker"
    r = cli("ab", prompt_file, "--base", w, "--head", w, "--budget", "5m", "--processes", "4", "-o", tmp_path / "a")
    assert r.returncode == 2 and r.stderr.strip().splitlines() == [
        "llmbench: error: --budget chooses --processes itself: give one or the other"
    ]
    r = cli("ab", prompt_file, "--base", "http://127.0.0.1:9/v1", "--head", w, "--duet", "-o", tmp_path / "b")
    assert r.returncode == 2 and "--duet pins worker processes to CPUs; --base is a server" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    r = cli("ab", prompt_file, "--base", w, "--head", w, "--budget", "nan", "-o", tmp_path / "c")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "--budget 'nan'" in r.stderr
    assert not (tmp_path / "a").exists() or not any((tmp_path / "a").iterdir())


# --- pinning ----------------------------------------------------------------------------------------------------


# --- real workers -----------------------------------------------------------------------------------------------


def test_an_older_worker_that_would_ignore_a_ttft_only_or_duet_request_is_refused():
    from llmbench.backends.worker import WorkerBackend
    from llmbench.backends.worker_main import FEATURES
    from llmbench.core.errors import UserError
    from llmbench.drivers.ab import Design, _check_features
    from llmbench.options import RunOptions

    old, new = (WorkerBackend(["llmbench", "worker"], RunOptions()) for _ in range(2))
    old.version, new.features = "0.3.0", FEATURES  # an old worker's ready message has no "features"
    _check_features([old, new], Design())  # plain ABBA asks nothing new of either
    with pytest.raises(UserError, match=r"the base worker \(llmbench 0.3.0\) predates TTFT-only pairs"):
        _check_features([old, new], Design(ttft_pairs=4))
    with pytest.raises(UserError, match="predates --duet"):
        _check_features([old, new], Design(duet=True))
    _check_features([new, new], Design(ttft_pairs=4, duet=True))


def test_warm_ups_take_turns_in_every_event_loop_a_process_runs():
    # a module-wide asyncio lock binds to the loop it first waited in: the second `ab` of one process (a notebook,
    # the in-process CLI) failed with "bound to a different event loop" as soon as two warm-ups met
    import asyncio

    from llmbench.backends.pool import warming_lock

    async def two_warm_ups_meet() -> list[str]:
        order: list[str] = []

        async def warm(name: str) -> None:
            async with warming_lock():
                order.append(f"{name} in")
                await asyncio.sleep(0.01)
                order.append(f"{name} out")

        await asyncio.gather(warm("base"), warm("head"))
        return order

    for _ in range(3):
        assert asyncio.run(two_warm_ups_meet()) == ["base in", "base out", "head in", "head out"]
