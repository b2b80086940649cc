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


def test_a_partial_last_round_takes_the_first_pairs_round_by_round_and_shares_them_evenly():
    _, _, p = _plan(5, 3, 2, ttft_pairs=4, full_pairs=12)
    keys = [(r.prompt_index, r.repeat, r.ttft_only) for _, r in p[::2]]
    full = sorted((rep, i) for i, rep, short in keys if not short)
    assert full == [(rep, i) for rep in range(2) for i in range(5)] + [(2, 0), (2, 1)]  # rounds 0, 1 and 2 begun
    assert all(rep >= 3 for i, rep, short in keys if short)  # TTFT-only keys after every round begun
    assert Counter(_process(r, 5, 2) for _, r in p[::2] if not r.ttft_only) == {0: 6, 1: 6}
    # 13 pairs on 3 processes: shares of 5, 4 and 4 (one pair apart at most)
    _, _, p = _plan(5, 3, 3, full_pairs=13)
    assert sorted(Counter(_process(r, 5, 3) for _, r in p[::2]).values()) == [4, 4, 5]


def test_the_planner_fills_a_round_partly_rather_than_leave_it_to_ttft_only_pairs():
    # the Xeon's first fresh-runner run (2026-12-05, code 13c5296): a pair 4.45 s, a TTFT-only pair 0.18 s; whole
    # rounds gave 10 processes of 2 pairs (projected TPOT MDC 1.46%) and spent the remaining ~40 s on 225 TTFT-only
    # pairs, where TTFT's MDC was already under a third of its target
    from llmbench.analysis.variance import projected_mdc_pct
    from llmbench.drivers.ab_budget import PRIORS, Costs, best_design

    costs = Costs(start_s=4.772, warmup_s=4.754, pair_s=4.454, ttft_pair_s=0.182)
    prior = PRIORS["duet"]
    c = best_design(300, 42.2, costs, 20, 1, 32, prior["tpot"], prior["ttft"])
    tpot = prior["tpot"]
    whole = projected_mdc_pct(tpot[0] ** 2, tpot[1] ** 2, 10, 2)
    assert c.pairs > 20 and c.pairs % 20 and c.rounds == 2 and c.mdc_tpot_pct < whole - 0.1
    assert c.pairs_per_process >= 3 and c.ttft_pairs < 225


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
    from llmbench.drivers.ab_budget import MIN_PAIRS_PER_PROCESS, RESERVE, SWITCH_S, Costs, best_design

    costs = Costs(start_s=1.5, warmup_s=0.5, pair_s=1.0, ttft_pair_s=0.1)
    last = None
    for budget in (60, 120, 300, 600):
        c = best_design(budget, 5.0, costs, 20, 2)
        n = c.processes
        # process 0 is warm (its warm-ups cost warm pairs); each later one a start, a switch and first pairs
        spent = 5.0 + (n - 1) * (costs.start_s + SWITCH_S + 2 * costs.warmup_s) + 2 * costs.pair_s
        spent += c.pairs * costs.pair_s + c.ttft_pairs * costs.ttft_pair_s
        assert spent <= budget * (1 - RESERVE) + 1e-9 and 2 <= n <= 32 and c.pairs >= 20 and c.ttft_pairs >= 0
        # the room is filled: less than a TTFT-only pair's time is left over
        assert budget * (1 - RESERVE) - spent < costs.ttft_pair_s
        assert c.rounds == -(-c.pairs // 20) and c.pairs_per_process == c.pairs // n >= MIN_PAIRS_PER_PROCESS
        score = max(c.mdc_tpot_pct / 1.5, c.mdc_ttft_pct / 3.0)
        assert last is None or score <= last + 1e-12
        last = score
    with pytest.raises(UserError, match="too short"):
        best_design(20, 5.0, costs, 20, 2)


def test_a_cheaper_switch_buys_more_processes_or_pairs_and_is_paid_in_the_budget():
    """--spawn fork: a later process costs a trial fork and SWITCH_FORK_S, not an exec'd start and SWITCH_S; the
    plan spends what it saves on processes or pairs, never past the budget."""
    from llmbench.drivers.ab_budget import PRIORS, RESERVE, SWITCH_FORK_S, SWITCH_S, Costs, best_design

    prior = PRIORS["duet"]
    exec_costs = Costs(start_s=4.4, warmup_s=0.2, pair_s=4.2, ttft_pair_s=0.2)
    fork_costs = Costs(start_s=0.06, warmup_s=0.2, pair_s=4.2, ttft_pair_s=0.2, switch_s=SWITCH_FORK_S)
    assert exec_costs.switch_s == SWITCH_S > SWITCH_FORK_S
    e, f = (best_design(300, 35.0, c, 20, 1, 32, prior["tpot"], prior["ttft"]) for c in (exec_costs, fork_costs))
    assert f.pairs + f.ttft_pairs * 0.2 / 4.2 > e.pairs + e.ttft_pairs * 0.2 / 4.2 or f.processes > e.processes
    assert max(f.mdc_tpot_pct / 1.5, f.mdc_ttft_pct / 3) <= max(e.mdc_tpot_pct / 1.5, e.mdc_ttft_pct / 3)
    c = fork_costs
    spent = 35.0 + (f.processes - 1) * (c.start_s + c.switch_s + c.warmup_s) + c.pair_s
    assert spent + f.pairs * c.pair_s + f.ttft_pairs * c.ttft_pair_s <= 300 * (1 - RESERVE) + 1e-9


def test_the_setup_record_says_what_forked_processes_share_and_what_is_their_own():
    from llmbench.backends.pool import HEAP_PAD_PER_ENV_PAD, random_setups
    from llmbench.drivers.ab import _setup_record

    setups = random_setups(4, seed=7)
    firsts = [True, False, False, True]
    exec_ = _setup_record(setups, firsts, "exec")
    assert exec_ == {"hash_seed": [s.hash_seed for s in setups], "env_pad": [s.env_pad for s in setups],
                     "base_first": firsts}  # fmt: skip
    fork = _setup_record(setups, firsts, "fork")
    assert fork["spawn"] == "fork" and fork["hash_seed"] == [setups[0].hash_seed] * 4
    assert fork["env_pad"] == [setups[0].env_pad] * 4 and fork["base_first"] == firsts
    assert fork["heap_pad"] == [0] + [s.env_pad * HEAP_PAD_PER_ENV_PAD for s in setups[1:]]


def test_a_cold_start_gate_is_refused_with_forked_processes(cli, prompt_file, tmp_path):
    w = f"{sys.executable} -m llmbench worker"
    for spawn in ("fork", "auto"):
        r = cli("ab", prompt_file, "--base", w, "--head", w, "--processes", "3", "--spawn", spawn, "--fail-on",
                "load_s=10", "-o", tmp_path / spawn)  # fmt: skip
        assert r.returncode == 2 and r.stderr.strip().splitlines() == [
            f"llmbench: error: --fail-on load_s: a forked process does not load (--spawn {spawn}), so it is no "
            "sample of the cold start; measure it with --spawn exec"
        ]
        assert not (tmp_path / spawn).exists()
    r = cli("ab", prompt_file, "--base", w, "--head", w, "--spawn", "vfork", "-o", tmp_path / "v")
    assert r.returncode == 2 and "vfork" in r.stderr and "Traceback" not in r.stderr


def test_a_plan_that_would_give_a_process_one_pair_takes_fewer_processes_of_three_and_says_why():
    # issue 47's slowed head: 20 prompts, a pair ~6 s, the duet's components (s_b small against s_w): spreading one
    # round over 15 processes scored best, and 10 of them got one pair (a process's median was one pair's)
    from llmbench.analysis.variance import projected_mdc_pct
    from llmbench.drivers.ab_budget import PRIORS, Costs, best_design

    # (a start priced at 0.5 s: cheap processes are what spreads the pairs thin)
    costs = Costs(start_s=0.5, warmup_s=6.0, pair_s=6.0, ttft_pair_s=0.4)
    prior = PRIORS["duet"]
    c = best_design(300, 20.0, costs, 20, 1, 32, prior["tpot"], prior["ttft"])
    assert c.instead is not None and c.instead.pairs_per_process == 1 and c.instead.processes > c.processes
    assert c.pairs_per_process >= 3 and c.processes * c.pairs_per_process <= c.pairs
    # the projections are the components' own at each design's pairs
    tpot = prior["tpot"]
    assert c.mdc_tpot_pct == pytest.approx(projected_mdc_pct(tpot[0] ** 2, tpot[1] ** 2, c.processes,
                                                             c.pairs / c.processes))  # fmt: skip
    why = c.why()
    assert why is not None and f"{c.instead.processes} processes would give a process 1 full pair(s)" in why
    assert f"{c.processes} processes of at least {c.pairs_per_process} pairs instead" in why
    # with room for two rounds nothing is given up: no reason to give
    roomy = best_design(900, 20.0, costs, 20, 1, 32, prior["tpot"], prior["ttft"])
    assert roomy.pairs_per_process >= 3 and (roomy.instead is None) == (roomy.why() is None)


class _Side:
    """One side of a budgeted ab, as choose() sees it: process 0's start (seconds, MB read from storage) and a
    live process whose first request takes 50 ms and later ones 1 ms (known delays: ground truth)."""

    def __init__(self, start_s: float, read_mb: float | None, features: tuple[str, ...] = (),
                 delays: tuple[float, ...] = (0.05,)) -> None:  # fmt: skip
        self.start_s, self.start_read_mb, self.restarts, self.calls = start_s, read_mb, 0, []
        self.features, self.delays = features, delays  # the first requests' delays (s); 1 ms after them

    @property
    def live(self) -> _Side:
        return self

    async def restart(self) -> None:
        self.restarts += 1
        self.start_s, self.start_read_mb = 1.0, 0.0  # from the file cache now

    async def measure(self, request, stop, started_s):
        import asyncio

        self.calls.append(request.ttft_only)
        await asyncio.sleep(self.delays[len(self.calls) - 1] if len(self.calls) <= len(self.delays) else 0.001)


class _Status:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def status(self, line: str) -> None:
        self.lines.append(line)


@pytest.mark.parametrize(("reads", "cold"), [((900.0, 880.0), True), ((0.4, 40.0), True), ((0.4, 0.0), False),
                                             ((None, None), None)])  # fmt: skip
def test_a_cold_first_start_is_measured_apart_and_process_0_starts_again(reads, cold):
    import asyncio

    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import NOISE_MAX_PAIRS, choose
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    sides = [_Side(23.0, reads[0]), _Side(22.0, reads[1])]
    status = _Status()
    prompts = PromptSet.from_list([f"p{i}" for i in range(20)])
    d = asyncio.run(choose(Design(duet=True, budget_s=300.0), sides, prompts, RunOptions(warmup=1), 25.0, (0, 1),
                           status))  # fmt: skip
    plan = d.plan
    assert plan["cold_start"] is cold and [s.restarts for s in sides] == [int(bool(cold))] * 2
    assert plan["first_start_s"] == 23.0 and plan["first_start_read_mb"] == (None if cold is None else max(reads))
    # the plan prices a start as a later process pays it: the restart's when the first was cold
    assert plan["start_s"] == (1.0 if cold else 23.0)
    # the pilot: a first pair (a new process's warm-up), two warm pairs, a TTFT-only pair, then a full pair and a
    # TTFT-only one in turn for the noise (these sides measure nothing: a bounded number of tries, and the
    # projection is the priors'); the first took 50 ms
    assert all(s.calls[:4] == [False, False, False, True] and s.calls[4::2] == [False] * len(s.calls[4::2])
               and all(s.calls[5::2]) for s in sides)  # fmt: skip
    assert len(sides[0].calls) <= 4 * NOISE_MAX_PAIRS + 2 and plan["first_pair_s"] >= 0.05
    assert plan["noise"] == {"source": "prior"}
    assert len(plan["warm_pairs_s"]) == 2 and plan["pair_s"] == min(plan["warm_pairs_s"])
    assert (d.processes, d.repeats, d.full_pairs, d.ttft_pairs) == (plan["processes"], plan["rounds"], plan["pairs"],
                                                                    plan["ttft_pairs"])  # fmt: skip
    assert plan["pairs_per_process"] == d.full_pairs // d.processes >= 3 and d.pairs(20) == d.full_pairs
    # these sides announce no TTFT-only requests: a later process's warm-up is replayed in full, priced as a first pair
    assert plan["warmup_replay"] == "full" and plan["warmup_s"] == plan["first_pair_s"]
    assert ("cold file cache" in status.lines[0] and "process 0 started again" in status.lines[0]) is bool(cold)
    assert status.lines[0].startswith(f"--budget 300s: {d.processes} processes a side")


@pytest.mark.parametrize("features", [("max_new_tokens",), ()])
def test_a_later_process_warm_up_is_priced_as_what_it_replays(features):
    """Workers that take TTFT-only requests replay a later process's warm-ups cut to their prefill, priced as a
    TTFT-only pair, not with the pilot's first-pair extra (process 0's alone: the Xeon's fresh-runner study priced
    a later process 2-5 s over what it took); else in full, priced as the first pair."""
    import asyncio

    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import choose
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    sides = [_Side(1.0, 0.0, features), _Side(1.0, 0.0, features)]
    prompts = PromptSet.from_list([f"p{i}" for i in range(20)])
    d = asyncio.run(choose(Design(duet=True, budget_s=300.0), sides, prompts, RunOptions(warmup=1), 2.0, (0, 1),
                           _Status()))  # fmt: skip
    plan, prefill = d.plan, bool(features)
    assert plan["warmup_replay"] == ("prefill" if prefill else "full")
    assert plan["warmup_s"] == (plan["ttft_pair_s"] if prefill else plan["first_pair_s"])
    if prefill:  # the first request took 50 ms, a TTFT-only one 1 ms: the extra is not priced
        assert plan["first_pair_s"] >= 0.05 > plan["warmup_s"]


def test_a_transient_in_one_warm_pilot_pair_does_not_price_the_run():
    """The pilot's first warm pair is slowed (0.5 s where pairs take 1 ms: a command run beside it): the plan
    prices the second, and buys the pairs an undisturbed pilot buys."""
    import asyncio

    from llmbench.drivers.ab import Design
    from llmbench.drivers.ab_budget import choose
    from llmbench.options import RunOptions
    from llmbench.workloads.prompts import PromptSet

    prompts = PromptSet.from_list([f"p{i}" for i in range(20)])
    plans = []
    for delays in ((0.05, 0.5), (0.05,)):
        sides = [_Side(1.0, 0.0, ("max_new_tokens",), delays) for _ in range(2)]
        d = asyncio.run(choose(Design(duet=True, budget_s=20.0), sides, prompts, RunOptions(warmup=1), 1.0, (0, 1),
                               _Status()))  # fmt: skip
        plans.append(d.plan)
    slowed, quiet = plans
    assert slowed["warm_pairs_s"][0] >= 0.5 > slowed["pair_s"] == slowed["warm_pairs_s"][1]
    assert slowed["pair_s"] < 0.05 and quiet["pair_s"] < 0.05
    # (the budget left after the slowed pilot is 0.5 s less: pairs a whole room apart, not a factor of 500)
    assert slowed["pairs"] >= quiet["pairs"] * 0.9


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
