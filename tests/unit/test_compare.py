import json

import pytest

from llmbench.analysis.compare import compare_runs, parse_fail_on, thresholds_of
from llmbench.core.errors import UserError
from llmbench.results.schema import MachineState, MachineSummary, Probe
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

GATES = {"ttft_ms": 10.0, "tpot_ms": 10.0, "e2e_ms": 10.0}


def _row(comp, metric, stat="mean"):
    return next(r for r in comp.rows if r.metric == metric and r.stat == stat)


def _spread_run(tpots: list[float], seed: int, noise: float = 0.005):
    """A run whose prompt i decodes at tpots[i] ms (times a little noise): prompts differ a lot."""
    import random

    from llmbench.results.metrics import ids_sha256, request_result, summarize

    rng, ms = random.Random(seed), 1_000_000
    run = synthetic_run(n=len(tpots))
    reqs = []
    for i, tpot in enumerate(tpots):
        t = tpot * (1 + rng.uniform(-noise, noise))
        stamps = [int((50 + k * t) * ms) for k in range(16)]
        reqs.append(request_result(prompt_index=i, repeat=0, start_ns=0, tokenized_ns=ms, stamps_ns=stamps,
                                   prompt_tokens=30, output_sha256=ids_sha256([1]), output_text="x"))  # fmt: skip
    run.requests, run.summary = reqs, summarize(reqs)
    return run


def test_pairing_finds_a_5_percent_change_that_the_spread_between_prompts_hides():
    tpots = [10.0 + 3.0 * i for i in range(20)]  # 10 to 67 ms: prompts differ far more than 5%
    base = _spread_run(tpots, seed=1)
    new = _spread_run([t * 1.05 for t in tpots], seed=2)
    paired = compare_runs(base, new)
    row = _row(paired, "tpot_ms")
    assert paired.paired and row.significant and 4.0 < row.change_pct < 6.0 and row.ci_low_pct > 3.0
    assert [c.metric for c in paired.gate(fail_on={"tpot_ms": 3})] == ["tpot_ms"]
    new.config.prompt_sha256 = "f" * 64  # other prompts: nothing to pair, the same numbers
    unpaired = compare_runs(base, new)
    row = _row(unpaired, "tpot_ms")
    assert not unpaired.paired and not row.significant and row.ci_low_pct < 0 < row.ci_high_pct
    assert unpaired.gate(fail_on={"tpot_ms": 3}) == []


def test_a_change_beyond_the_threshold_that_is_not_significant_is_not_gated():
    # +19% on average, but the pairs disagree: two got faster, four slower, by wildly different amounts
    base = _spread_run([20.0, 12.0, 30.0, 18.0, 26.0, 14.0], seed=3)
    new = _spread_run([30.0, 10.0, 36.0, 14.0, 33.0, 20.0], seed=4)
    comp = compare_runs(base, new)
    row = _row(comp, "tpot_ms")
    assert row.change_pct > 10 and not row.significant
    assert comp.gate(fail_on_regression=10) == []


@pytest.mark.parametrize("seed", range(5))
def test_a_a_is_not_flagged(seed):
    base = synthetic_run(n=20, noise=0.15, seed=seed)
    new = synthetic_run(n=20, noise=0.15, seed=seed + 100)
    comp = compare_runs(base, new)
    assert comp.gate(fail_on_regression=10) == []
    assert all(abs(r.change_pct) < 10 for r in comp.rows)


def test_a_real_shift_is_flagged_with_its_interval():
    base = synthetic_run(n=20, noise=0.1, seed=1)
    new = synthetic_run(n=20, noise=0.1, seed=2, tpot_ms=25.0)  # +25% per token
    comp = compare_runs(base, new)
    tpot = _row(comp, "tpot_ms", "p50")
    assert tpot.significant and tpot.speaks and tpot.verdict == "slower"
    assert tpot.ci_low_pct < 25 < tpot.ci_high_pct + 1 and tpot.ci_low_pct > 15
    mean = _row(comp, "tpot_ms")  # information: its change and interval, no verdict word
    assert mean.significant and not mean.speaks and mean.verdict == "(information)"
    tps = _row(comp, "decode_tokens_per_s", "p50")
    assert tps.verdict == "slower" and tps.change_pct < -15  # fewer tokens/s is slower too
    failed = {(c.metric, c.stat) for c in comp.gate(fail_on_regression=10)}
    assert ("tpot_ms", "mean") in failed and ("ttft_ms", "mean") not in failed  # TTFT did not move
    assert comp.gate(fail_on={"ttft_ms": 10}) == []  # only the metrics asked for are gated
    assert [c.metric for c in comp.gate(fail_on={"tpot_ms": 30})] == []  # +25% is under a 30% threshold
    checks = comp.checks(fail_on_regression=10, stat="p50")
    assert {c.stat for c in checks} == {"p50"} and {c.metric for c in checks} == set(GATES)


def test_faster_is_never_a_regression_and_small_shifts_pass_the_gate():
    base = synthetic_run(n=30, noise=0.05, seed=1)
    faster = synthetic_run(n=30, noise=0.05, seed=2, tpot_ms=15.0)
    comp = compare_runs(base, faster)
    assert comp.gate(fail_on_regression=10) == []
    assert _row(comp, "tpot_ms", "p50").verdict == "faster"
    slightly = synthetic_run(n=30, noise=0.01, seed=3, tpot_ms=21.0)  # +5%: significant, under 10%
    comp = compare_runs(base, slightly)
    row = _row(comp, "tpot_ms", "p50")
    assert row.significant and row.verdict == "slower" and comp.gate(fail_on_regression=10) == []
    assert [c.metric for c in comp.gate(fail_on_regression=3)] == ["tpot_ms", "e2e_ms"]


def test_pairing_needs_the_same_prompt_file():
    base = synthetic_run(n=10, noise=0.1, seed=1)
    new = synthetic_run(n=12, noise=0.1, seed=2)
    assert compare_runs(base, new).paired
    new.config.prompt_sha256 = "f" * 64
    comp = compare_runs(base, new)
    assert not comp.paired and comp.n_new == 12
    assert ("prompt_sha256", "0" * 64, "f" * 64) in comp.config_diffs
    assert comp.outputs_note.startswith("different prompt files")


def test_changed_outputs_are_counted_apart_from_speed():
    base = synthetic_run(n=10, seed=1)
    new = synthetic_run(n=10, seed=1)
    new.requests[3].output_token_ids_sha256 = "x"
    new.requests[7].output_token_ids_sha256 = "y"
    comp = compare_runs(base, new)
    assert (comp.outputs_compared, comp.outputs_changed) == (10, 2)
    assert "correctness" in comp.outputs_note


def test_setup_and_environment_differences_are_listed():
    base = synthetic_run(n=5, seed=1)
    new = synthetic_run(n=5, seed=2)
    new.config.threads = 1
    new.environment.torch = "9.9"
    comp = compare_runs(base, new)
    assert ("threads", 2, 1) in comp.config_diffs
    assert ("torch", None, "9.9") in comp.env_diffs


def _with_machine(run, mem, other):
    probe = Probe(mem_read_gbps=mem, matmul_gflops=100.0, threads=2, seconds=0.3)
    summary = MachineSummary(
        samples=10,
        cpu_busy_pct_mean=50 + other,
        own_cpu_pct_mean=50,
        other_cpu_pct_mean=other,
        other_cpu_pct_max=other,
        steal_pct_mean=0,
        steal_pct_max=0,
        load1_max=1,
        rss_max_bytes=1,
        swap_used_max_bytes=0,
    )
    run.machine = MachineState(probe_before=probe, probe_after=probe, summary=summary)
    return run


def test_the_machine_explains_a_slowdown_its_probe_also_saw():
    base = _with_machine(synthetic_run(n=20, noise=0.05, seed=1), mem=10.0, other=0)
    new = _with_machine(synthetic_run(n=20, noise=0.05, seed=2, tpot_ms=25.0), mem=8.0, other=0)
    note = next(n for n in compare_runs(base, new).machine if n.metric == "tpot_ms")
    assert note.probe_slowdown_pct == pytest.approx(25.0)
    assert note.explanation.startswith("the machine explains it")


def test_a_busy_machine_is_named_and_a_steady_one_clears_it():
    base = _with_machine(synthetic_run(n=20, noise=0.05, seed=1), mem=10.0, other=0)
    busy = _with_machine(synthetic_run(n=20, noise=0.05, seed=2, tpot_ms=25.0), mem=10.0, other=45)
    note = next(n for n in compare_runs(base, busy).machine if n.metric == "tpot_ms")
    assert "busier" in note.explanation and "45%" in note.explanation
    steady = _with_machine(synthetic_run(n=20, noise=0.05, seed=2, tpot_ms=25.0), mem=10.0, other=0)
    note = next(n for n in compare_runs(base, steady).machine if n.metric == "tpot_ms")
    assert "measured state doesn't explain it" in note.explanation


def test_thresholds():
    assert thresholds_of(10, None) == GATES
    assert thresholds_of(10, parse_fail_on(["tpot_ms=5"])) == {**GATES, "tpot_ms": 5.0}
    assert thresholds_of(None, parse_fail_on(["decode_tokens_per_s=3"])) == {"decode_tokens_per_s": 3.0}
    for bad in (["tpot=5"], ["tpot_ms"], ["tpot_ms=x"], ["output_tokens=5"], ["ttft_ms=-1"]):
        with pytest.raises(UserError, match="--fail-on"):
            thresholds_of(None, parse_fail_on(bad))
    with pytest.raises(UserError, match="--fail-on-regression"):
        thresholds_of(-1, None)


@pytest.fixture
def runs(tmp_path):
    paths = {}
    for name, kw in {"a": {"seed": 1}, "b": {"seed": 2}, "slow": {"seed": 3, "tpot_ms": 26.0}}.items():
        paths[name] = tmp_path / f"{name}.json"
        save_run(synthetic_run(n=20, noise=0.1, **kw), paths[name])
    return paths


def test_cli_exit_codes_and_formats(cli, runs):
    r = cli("compare", runs["a"], runs["b"], "--fail-on-regression", "10")
    assert r.returncode == 0 and "TPOT ms" in r.stdout and "n.s." in r.stdout
    r = cli("compare", runs["a"], runs["b"], runs["slow"], "--fail-on", "tpot_ms=5")
    assert r.returncode == 1 and "REGRESSION" in r.stdout
    r = cli("compare", runs["a"], runs["slow"])  # no gate: report only
    assert r.returncode == 0 and "slower" in r.stdout
    r = cli("compare", runs["a"], runs["slow"], "--fail-on-regression", "10", "--format", "json")
    data = json.loads(r.stdout)
    assert r.returncode == 1 and data[0]["regression"] is True and data[0]["paired"] is True
    assert {row["metric"] for row in data[0]["rows"]} == {
        "ttft_ms",
        "tpot_ms",
        "e2e_ms",
        "output_tokens",
        "decode_tokens_per_s",
        "decode_chars_per_s",
    }
    r = cli("compare", runs["a"], runs["slow"], "--fail-on-regression", "10", "--format", "markdown")
    assert r.returncode == 1 and "| metric | stat |" in r.stdout and "**REGRESSION**" in r.stdout


def test_cli_strict_refuses_different_setups(cli, runs, tmp_path):
    other = synthetic_run(n=20, seed=5)
    other.config.dtype = "float32"
    save_run(other, tmp_path / "f32.json")
    r = cli("compare", runs["a"], tmp_path / "f32.json")
    assert r.returncode == 0 and "setup differs: dtype: bfloat16 -> float32" in r.stdout
    r = cli("compare", runs["a"], tmp_path / "f32.json", "--strict")
    assert r.returncode == 2 and "--strict" in r.stderr and "dtype" in r.stderr


@pytest.mark.parametrize(
    ("content", "match"),
    [
        (None, "not found"),
        ("", "empty"),
        ("hello", "not valid JSON"),
        ('{"schema_version": 1, "requests": [', "truncated"),
        ('{"schema_version": 4, "requests": []}', "schema_version 4"),
        ('{"results": {"ttft": 1}}', "not an llmbench run"),
    ],
)
def test_cli_bad_files_exit_2_in_one_line(cli, runs, tmp_path, content, match):
    bad = tmp_path / "bad.json"
    if content is not None:
        bad.write_text(content, encoding="utf-8")
    r = cli("compare", runs["a"], bad)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and match in r.stderr, r.stderr
    assert str(bad) in r.stderr


def test_cli_needs_two_files_and_finished_requests(cli, runs, tmp_path):
    r = cli("compare", runs["a"])
    assert r.returncode == 2 and "at least two" in r.stderr
    empty = synthetic_run(n=1)
    empty.requests, empty.summary, empty.complete = [], None, False
    save_run(empty, tmp_path / "empty.json")
    r = cli("compare", runs["a"], tmp_path / "empty.json")
    assert r.returncode == 2 and "no finished requests" in r.stderr
    r = cli("compare", runs["a"], runs["b"], "--format", "xml")
    assert r.returncode == 2 and "--format" in r.stderr
