"""ab's logic against ground truth: orders, pairing, gates, failures, resume, processes, duet, budget and the load
gate, with torch-free fake workers (tests/fake_worker.py) whose delays are known. A head started 15% slower is
15% slower by construction, so the gate's verdict and interval are checked against the truth, in seconds per
test instead of the ~25 s two real workers cost. tests/e2e/test_ab_real_workers.py keeps the real worker."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from llmbench.results.storage import load_run
from tests.helpers import check_a_budgeted_design, check_a_duet, check_an_abba_run, cli_process, wait_for_requests

FAST = ("--ttft-ms", "3", "--tpot-ms", "1.5", "--jitter", "0.03")


def _gate(comp: dict, metric: str) -> dict:
    [g] = [g for g in comp["gate"] if g["metric"] == metric]
    return g


def test_ab_interleaves_pairs_and_gates_like_compare(cli, fake_worker, prompt_file, tmp_path):
    out = tmp_path / "ab"
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST, "--seed", "1"),
            "--max-new-tokens", "6", "--repeats", "2", "-o", out, "--fail-on-regression", "25", "-q")  # fmt: skip
    check_an_abba_run(cli, r, out, prompt_file, tmp_path, "fake_worker.py")
    assert load_run(out / "base.json").machine.probe_before is None  # LLMBENCH_PROBE=off in the suite: none taken


def test_a_head_slower_by_construction_fails_the_gate_by_its_true_size(cli, fake_worker, prompt_file, tmp_path,
                                                                        probe_on):  # fmt: skip
    """TPOT +20% by construction, TTFT unchanged: the gate fails on TPOT alone, its interval holds the truth, and
    the environment the head was started with is recorded without its values."""
    head = fake_worker("--ttft-ms", "3", "--tpot-ms", "1.8", "--jitter", "0.03", env={"LLMBENCH_FAKE_X": "s3cret"})
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", head, "--max-new-tokens", "8",
            "--repeats", "3", "-o", tmp_path / "ab", "--fail-on", "tpot_ms=10", "--fail-on", "ttft_ms=10",
            "--format", "json", "-q")  # fmt: skip
    assert r.returncode == 1, r.stderr
    [comp] = json.loads(r.stdout)
    tpot = _gate(comp, "tpot_ms")
    # the interval holds the truth (+20%) in 95% or more of such runs (the head's jitter is drawn anew each run:
    # tests/integration/test_interval_coverage.py holds the rate), so one run is held to being near it and past 10%
    assert tpot["regression"] and 10 < tpot["ci_low_pct"] <= tpot["change_pct"] <= tpot["ci_high_pct"] < 30
    assert 16 < tpot["change_pct"] < 24 and not _gate(comp, "ttft_ms")["regression"]
    side = load_run(tmp_path / "ab" / "head.json").config.ab.side
    assert "LLMBENCH_FAKE_X=redacted" in side and "s3cret" not in side
    assert load_run(tmp_path / "ab" / "base.json").machine.probe_before.mem_read_gbps == 20.0  # probe_on: asked


def test_an_a_a_run_passes_a_tight_gate(cli, fake_worker, prompt_file, tmp_path):
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST, "--seed", "7"),
            "--max-new-tokens", "8", "--repeats", "4", "-o", tmp_path / "aa", "--fail-on", "tpot_ms=5",
            "--fail-on", "ttft_ms=5", "--format", "json", "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    [comp] = json.loads(r.stdout)
    assert all(not g["regression"] and abs(g["change_pct"]) < 5 for g in comp["gate"])


def test_a_worker_that_cannot_start_or_dies_is_one_line_and_keeps_the_other_side(cli, fake_worker, prompt_file,
                                                                                   tmp_path):  # fmt: skip
    failing = f"{sys.executable} -c 'import sys; print(\"no GPU here\", file=sys.stderr); sys.exit(3)'"
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", failing, "-o", tmp_path / "a", "-q")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "head: the worker exited (code 3)" in r.stderr and "no GPU here" in r.stderr and sys.executable in r.stderr
    r = cli("ab", prompt_file, "--base", "no-such-program-xyz", "--head", fake_worker(*FAST), "-o", tmp_path / "b",
            "-q")  # fmt: skip
    assert r.returncode == 2 and "base: cannot start the worker no-such-program-xyz" in r.stderr
    refusing = fake_worker("--refuse", "cannot load the model: no such folder")
    r = cli("ab", prompt_file, "--base", refusing, "--head", fake_worker(*FAST), "-o", tmp_path / "e", "-q")
    assert r.returncode == 2 and "base: cannot load the model: no such folder" in r.stderr
    # one warm-up request (6 tokens) a side, then 6 tokens a request: the 19th token is in its third measured one
    dies = fake_worker(*FAST, "--exit-after", "19")
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", dies, "--max-new-tokens", "6",
            "--repeats", "2", "-o", tmp_path / "c", "-q")  # fmt: skip
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "head: the worker exited (code 9)" in r.stderr and "dying at token 19" in r.stderr
    base, head = load_run(tmp_path / "c" / "base.json"), load_run(tmp_path / "c" / "head.json")
    assert len(base.requests) >= 2 and len(head.requests) == 2 and not base.complete and not head.complete
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", "http://127.0.0.1:9/v1", "-o",
            tmp_path / "d", "-q")  # fmt: skip
    assert r.returncode == 2 and "head: cannot connect" in r.stderr


def test_a_worker_that_dies_in_its_warm_up_is_recorded(cli, fake_worker, prompt_file, tmp_path):
    dies = fake_worker(*FAST, "--exit-after", "2")  # its first (warm-up) request's second token
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", dies, "--max-new-tokens", "4", "-o",
            tmp_path / "w", "-q")  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "head: warm-up request failed" in lines[0]
    assert "the worker exited (code 9)" in lines[0] and "recorded in" in lines[0]
    head = load_run(tmp_path / "w" / "head.json")
    assert not head.complete and not head.requests
    assert [(f.repeat < 0, "code 9" in f.error) for f in head.failed_requests] == [(True, True)]


def test_an_interrupted_ab_run_keeps_its_pairs_and_resumes(fake_worker, many_prompts, tmp_path):
    """The parent is a real ``llmbench ab`` process (Ctrl-C reaches it, it forwards to its workers)."""
    out = tmp_path / "ab"
    slow = ("--ttft-ms", "5", "--tpot-ms", "3")  # 60 prompts x ~60 ms a pair: a SIGINT lands mid-run
    args = ("ab", many_prompts, "--base", fake_worker(*slow), "--head", fake_worker(*slow), "--max-new-tokens", "8",
            "-q")  # fmt: skip
    proc = cli_process(*args, "-o", out)
    wait_for_requests(out / "head.json", 4, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted by SIGINT" in err and "Traceback" not in err, err
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert not base.complete and not head.complete and abs(len(base.requests) - len(head.requests)) <= 1
    assert len(head.requests) < 60
    resumed = subprocess.run([sys.executable, "-m", "llmbench", *map(str, args), "-o", str(out), "--resume"],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    for run in (base, head):
        keys = sorted((q.prompt_index, q.repeat) for q in run.requests)
        assert run.complete and keys == [(i, 0) for i in range(60)] and len(run.sessions) == 2


def test_ab_spreads_each_side_over_processes_used_in_turn(cli, fake_worker, prompt_file, tmp_path):
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST), "--processes", "2",
            "--max-new-tokens", "3", "--repeats", "2", "-o", tmp_path / "p", "-q", "--format", "json")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base, head = load_run(tmp_path / "p" / "base.json"), load_run(tmp_path / "p" / "head.json")
    assert base.config.ab.processes == 2 and len({p["pid"] for p in base.config.engine_settings["processes"]}) == 2
    for run in (base, head):
        assert {(q.prompt_index, q.repeat): q.process for q in run.requests} == {
            (i, rep): (rep * 3 + i) % 2 for i in range(3) for rep in range(2)}  # fmt: skip
    assert json.loads(r.stdout)[0]["n_pairs"] == 6


def _logging_worker(fake_worker, log) -> str:
    """A worker command that first writes its pid, hash seed and environment padding size to ``log``."""
    return f"sh -c 'echo $$ $PYTHONHASHSEED ${{#LLMBENCH_ENV_PAD}} >> {log}; exec {fake_worker(*FAST)}'"


def test_processes_live_one_after_another_each_with_its_own_setup_and_ttft_pairs_kept_apart(
    cli, fake_worker, prompt_file, tmp_path
):
    logs = {r: tmp_path / f"{r}.log" for r in ("base", "head")}
    r = cli("ab", prompt_file, "--base", _logging_worker(fake_worker, logs["base"]), "--head",
            _logging_worker(fake_worker, logs["head"]), "--processes", "3", "--ttft-pairs", "6",
            "--max-new-tokens", "4", "--repeats", "2", "-o", tmp_path / "p", "-q", "--format", "json")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base, head = (load_run(tmp_path / "p" / f"{x}.json") for x in ("base", "head"))
    setup = base.config.ab.setup
    assert base.config.ab.ttft_pairs == 6 and setup == head.config.ab.setup
    for role, run in (("base", base), ("head", head)):
        lines = [line.split() for line in logs[role].read_text().splitlines()]
        # one start per process, in order, each under its own drawn setup (the same on both sides)
        assert [(int(s), int(p)) for _, s, p in lines] == list(zip(setup["hash_seed"], setup["env_pad"], strict=True))
        procs = run.config.engine_settings["processes"]
        assert [p["hash_seed"] for p in procs] == setup["hash_seed"] and len({p["pid"] for p in procs}) == 3
        assert [p["pid"] for p in procs] == [int(pid) for pid, _, _ in lines]  # exec kept the shell's pid
        assert all(p["startup_s"] > 0 and p["spawn_s"] > 0 for p in procs)
        assert all(p["warmup_s"] is not None for p in procs[1:])  # later processes warmed up as the first was
        assert len(run.requests) == 6 and all(q.output_tokens == 4 and not q.ttft_only for q in run.requests)
        assert len(run.ttft_requests) == 6 and all(q.output_tokens == 1 and q.ttft_only for q in run.ttft_requests)
        assert {q.repeat for q in run.ttft_requests} >= {2} and all(q.process is not None for q in run.ttft_requests)
        assert run.summary.requests == 6 and run.summary.ttft_ms.n == 6  # the summary is over the full requests alone
        assert run.complete
    assert len(set(setup["hash_seed"])) == 3
    comp = json.loads(r.stdout)[0]
    ttft = next(row for row in comp["rows"] if row["metric"] == "ttft_ms" and row["stat"] == "p50")
    e2e = next(row for row in comp["rows"] if row["metric"] == "e2e_ms" and row["stat"] == "p50")
    assert ttft["n_base"] == 12 and e2e["n_base"] == 6  # TTFT pools the one-token pairs, E2E does not


def test_a_duet_measures_both_sides_at_once_on_two_cpus_and_needs_one_thread_a_side(cli, fake_worker, prompt_file,
                                                                                    tmp_path, monkeypatch):  # fmt: skip
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("a duet needs two CPUs")
    log = tmp_path / "fake.log"
    monkeypatch.setenv("LLMBENCH_FAKE_LOG", str(log))
    slow = ("--ttft-ms", "10", "--tpot-ms", "5")
    r = cli("ab", prompt_file, "--base", fake_worker(*slow, "--tag", "base"), "--head",
            fake_worker(*slow, "--tag", "head"), "--duet",
            "--max-new-tokens", "4", "--repeats", "2", "-o", tmp_path / "d", "-q")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base, head = (load_run(tmp_path / "d" / f"{x}.json") for x in ("base", "head"))
    check_a_duet(base, head)
    # each pair's two sides on two different CPUs, the CPUs swapped from one pair to the next
    measured = [json.loads(line) for line in log.read_text().splitlines()]
    cpus = {(m["tag"], m["prompt_index"], m["repeat"]): m["cpu"] for m in measured if m["repeat"] >= 0}
    pairs = sorted({(i, rep) for _, i, rep in cpus})
    assert all(cpus[("base", *k)] != cpus[("head", *k)] for k in pairs)
    assert len({cpus[("base", *k)] for k in pairs}) == 2  # base's CPU changes between pairs
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST, "--threads", "2"), "--head", fake_worker(*FAST),
            "--duet", "--max-new-tokens", "4", "-o", tmp_path / "e", "-q")  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "llmbench: error: --duet runs each side on one CPU: give the base worker --threads 1 (it has 2)"
    )


def test_a_budget_chooses_the_design_says_so_and_records_it(cli, fake_worker, prompt_file, tmp_path, monkeypatch):
    log = tmp_path / "fake.log"
    monkeypatch.setenv("LLMBENCH_FAKE_LOG", str(log))
    worker = fake_worker("--ttft-ms", "10", "--tpot-ms", "5", "--load-s", "0.3")
    r = cli("ab", prompt_file, "--base", worker, "--head", worker, "--budget", "6s", "--max-new-tokens", "4",
            "--warmup", "1", "-o", tmp_path / "b")  # fmt: skip
    check_a_budgeted_design(r, tmp_path / "b", "6s", 6)
    plan = load_run(tmp_path / "b" / "base.json").config.ab.budget_plan
    assert plan["warmup_replay"] == "prefill" and "(replayed as its prefill)" in r.stderr
    # process 0 warms up in full (the pilot's pairs, then the loop's warm-up); every later process replays the
    # warm-up cut to its prefill: one token
    warmups: dict[int, list[int]] = {}
    for m in (json.loads(line) for line in log.read_text().splitlines()):
        if m["repeat"] < 0:
            warmups.setdefault(m["pid"], []).append(m["tokens"])
    zeros, later = list(warmups.values())[:2], list(warmups.values())[2:]  # in order: both sides' process 0 first
    assert all(4 in tokens for tokens in zeros) and len(later) >= 2 and all(tokens == [1] for tokens in later)


def test_reads_from_storage_are_counted_and_reads_from_the_page_cache_are_not(tmp_path):
    """What tells ab --budget that process 0 started from a cold file cache: a child process that reads a file
    evicted from the page cache read it from storage; one that reads it again, cached, read (nearly) nothing."""
    import os
    import subprocess
    import sys

    from llmbench.backends.pool import storage_read_mb

    blob = tmp_path / "blob"
    blob.write_bytes(os.urandom(64 * 2**20))
    fd = os.open(blob, os.O_RDWR)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)  # out of the page cache (the file is clean now)
    finally:
        os.close(fd)
    reader = "import sys; open(sys.argv[1], 'rb').read(); print('read', flush=True); sys.stdin.read()"
    seen = []
    for _ in range(2):
        child = subprocess.Popen([sys.executable, "-c", reader, str(blob)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            assert child.stdout is not None and child.stdout.readline().strip() == "read"
            seen.append(storage_read_mb(child.pid))
        finally:
            child.communicate("")
    if seen[0] is None or seen[0] < 1:
        pytest.skip(f"this file system does not count reads from storage per process ({seen[0]} MB)")
    assert seen[0] >= 60 and seen[1] is not None and seen[1] < 32  # COLD_READ_MB
    assert storage_read_mb(child.pid) is None and storage_read_mb(None) is None  # gone; none given


def test_a_gate_that_cannot_see_its_threshold_says_so_and_require_mdc_fails(cli, fake_worker, prompt_file,
                                                                             tmp_path):  # fmt: skip
    noisy = ("--ttft-ms", "3", "--tpot-ms", "1.5", "--jitter", "0.3")
    args = ("ab", prompt_file, "--base", fake_worker(*noisy), "--head", fake_worker(*noisy, "--seed", "3"),
            "--max-new-tokens", "3", "--fail-on-regression", "0.01", "-q")  # fmt: skip
    # 3 prompts once: 3 pairs give a median no 95% interval at all; refused before a worker starts
    r = cli(*args, "-o", tmp_path / "few")
    assert r.returncode == 2 and "3 pairs (prompts x --repeats) give no 95% interval; at least 6" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and not (tmp_path / "few").exists()
    r = cli(*args, "--repeats", "2", "-o", tmp_path / "a")
    assert "BLIND: this run could not have seen a 0.01% regression" in r.stderr  # 6 pairs can't see 0.01%
    r = cli(*args, "--repeats", "2", "-o", tmp_path / "b", "--require-mdc", "0.01")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("llmbench: error: --require-mdc 0.01: this run could not")


def test_an_older_worker_is_refused_before_it_measures_a_design_it_would_ignore(cli, fake_worker, prompt_file,
                                                                                tmp_path):  # fmt: skip
    old = fake_worker(*FAST, "--features", "", "--version", "0.3.0")  # its ready message names no features
    r = cli("ab", prompt_file, "--base", old, "--head", fake_worker(*FAST), "--ttft-pairs", "2", "-o",
            tmp_path / "o", "-q")  # fmt: skip
    assert r.returncode == 2 and "the base worker (llmbench 0.3.0) predates TTFT-only pairs" in r.stderr, r.stderr


def test_spawn_fork_is_refused_for_a_worker_that_cannot_fork_and_auto_execs_it(cli, fake_worker, prompt_file,
                                                                              tmp_path):  # fmt: skip
    """The fake worker announces no "fork" (as a real one on more threads, on a GPU or another engine does): --spawn
    fork is refused in one line before a pair is measured, leaving no folder and no process; auto measures exec'd.
    (tests/e2e/test_ab_duet_real_workers.py forks real workers.)"""
    args = ("--processes", "2", "--max-new-tokens", "2", "-q")
    log = tmp_path / "pids.log"
    r = cli("ab", prompt_file, "--base", _logging_worker(fake_worker, log), "--head", fake_worker(*FAST), *args,
            "--spawn", "fork", "-o", tmp_path / "f")  # fmt: skip
    assert r.returncode == 2 and r.stderr.strip().splitlines()[-1] == (
        "llmbench: error: --spawn fork: the base worker can't fork (it needs llmbench 0.3.0 or later, a transformers "
        "model on the CPU and --threads 1)"
    )
    assert not (tmp_path / "f").exists()
    for line in log.read_text().splitlines():  # every worker it started is gone
        with pytest.raises(ProcessLookupError):
            os.kill(int(line.split()[0]), 0)
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST), *args, "--spawn", "auto",
            "-o", tmp_path / "a")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base = load_run(tmp_path / "a" / "base.json")
    assert "spawn" not in base.config.ab.setup and len(set(base.config.ab.setup["hash_seed"])) == 2
    assert [p.get("spawn") for p in base.config.engine_settings["processes"]] == [None, None]


def test_ab_gates_the_load_over_processes(cli, fake_worker, prompt_file, tmp_path):
    """Each process's load is one sample; a head whose every load takes 0.4 s more than the base's 0.1 s fails a
    25% load gate, an equal one passes, and one process a side is refused before anything starts."""
    refused = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST),
                  "--fail-on", "load_s=10", "-o", tmp_path / "one")  # fmt: skip
    assert refused.returncode == 2 and "--processes 2 or more" in refused.stderr and not (tmp_path / "one").exists()
    args = ("--max-new-tokens", "2", "--processes", "4", "--repeats", "2", "-q", "--format", "json")
    quick = fake_worker(*FAST, "--load-s", "0.1")
    same = cli("ab", prompt_file, "--base", quick, "--head", quick, *args, "--fail-on", "load_s=25", "-o",
               tmp_path / "same")  # fmt: skip
    assert same.returncode == 0, same.stderr
    slow = cli("ab", prompt_file, "--base", quick, "--head", fake_worker(*FAST, "--load-s", "0.5"), *args,
               "--fail-on", "load_s=25", "-o", tmp_path / "slow")  # fmt: skip
    assert slow.returncode == 1, slow.stderr
    comp = json.loads(slow.stdout)[0]
    gated = _gate(comp, "load_s")
    assert gated["regression"] and gated["ci_low_pct"] > 25
    [row] = [r for r in comp["rows"] if r["metric"] == "load_s"]
    assert row["processes"] == 4 and row["base"] == pytest.approx(0.1) and row["new"] == pytest.approx(0.5)
    again = cli("compare", tmp_path / "slow" / "base.json", tmp_path / "slow" / "head.json", "--fail-on", "load_s=25")
    assert again.returncode == 1 and "REGRESSION" in again.stdout
    one = cli("compare", tmp_path / "slow" / "base.json", tmp_path / "slow" / "head.json", "--fail-on", "ready_s=nan")
    assert one.returncode == 2 and "finite number" in one.stderr and "Traceback" not in one.stderr


def test_an_ab_run_past_the_line_is_columns_and_reads_as_any(cli, fake_worker, prompt_file, tmp_path, monkeypatch):
    """Issue 61: ab's two runs written as JSON plus columns (the line at 0 stamps) pass every check an ab run does."""
    monkeypatch.setenv("LLMBENCH_COLUMNS_FROM", "0")
    out = tmp_path / "ab"
    r = cli("ab", prompt_file, "--base", fake_worker(*FAST), "--head", fake_worker(*FAST, "--seed", "1"),
            "--max-new-tokens", "6", "--repeats", "2", "-o", out, "--fail-on-regression", "25", "-q")  # fmt: skip
    check_an_abba_run(cli, r, out, prompt_file, tmp_path, "fake_worker.py")
    for role in ("base", "head"):
        run = load_run(out / f"{role}.json")
        assert run.schema_version == 2 and run.columns is not None and (out / run.columns.file).is_file()


def test_calibrate_measures_each_setup_and_runs_both_sides_on_the_fastest(cli, fake_worker, prompt_file, tmp_path):
    """Issue 62: workers whose setups run at known speeds (int8 dynamic at 0.3x the delays, float32 at 1.2x):
    the calibration times one pair of each, goes on with the fastest alone (int8), appends its flags to both
    sides' command lines (a later option wins), runs at the chosen request length, and records what it measured
    and why."""
    from llmbench.drivers.ab_calibrate import LENGTHS

    worker = fake_worker("--ttft-ms", "8", "--tpot-ms", "6", "--load-s", "0.2",
                         "--setup-speed", "float32+int8-dynamic=0.3,float32=1.2")  # fmt: skip
    r = cli("ab", prompt_file, "--base", worker, "--head", worker, "--budget", "25s", "--calibrate", "--warmup", "1",
            "-o", tmp_path / "c")  # fmt: skip
    check_a_budgeted_design(r, tmp_path / "c", "25s", 25)
    base, head = (load_run(tmp_path / "c" / f"{s}.json") for s in ("base", "head"))
    cal = base.config.ab.budget_plan["calibration"]
    assert cal["setup"]["dtype"] == "float32" and cal["setup"]["quantize"] == "int8-dynamic"
    # every candidate was timed; the slower ones (1x and, where bfloat16 is emulated, float32 at 1.2x) by one pair
    # each and no further; the fastest measured its noise
    kept = [c for c in cal["candidates"] if not c["dropped"]]
    assert len(kept) == 1 and kept[0]["setup"].startswith("float32+int8-dynamic") and kept[0]["pairs"] >= 3
    for c in cal["candidates"]:
        assert c["first_pair_s"] > 0 and (c["dropped"] is None or c["pairs"] == 0)
        if c["dropped"] and not c["setup"].startswith("float32+int8-dynamic"):  # (on more threads: as fast)
            assert c["first_pair_s"] > 2 * kept[0]["first_pair_s"]  # 3.3x by construction, less the overheads
    for run in (base, head):
        side = run.config.ab.side
        assert side.endswith(f"--dtype float32 --quantize int8-dynamic --threads {cal['setup']['threads']}"), side
        assert run.config.dtype == "float32" and run.config.max_new_tokens == cal["max_new_tokens"] in LENGTHS
    # each length was planned for the fastest setup, the chosen one scored best
    assert sorted(s["max_new_tokens"] for s in cal["scores"]) == sorted(LENGTHS)
    best = min(s["score"] for s in cal["scores"])
    assert next(s for s in cal["scores"] if s["max_new_tokens"] == cal["max_new_tokens"])["score"] == best
    # the calibration's pairs joined the run's pilot: more noise pairs than the pilot's own minimum
    assert base.config.ab.budget_plan["noise"]["source"] == "pilot"
    said = [line for line in r.stderr.splitlines() if line.startswith("calibration (")]
    assert len(said) == 1 and "float32+int8-dynamic" in said[0] and "dropped" in said[0]


def test_calibrate_without_a_budget_or_with_a_server_is_refused_in_one_line(cli, fake_worker, prompt_file, tmp_path):
    worker = fake_worker()
    r = cli("ab", prompt_file, "--base", worker, "--head", worker, "--calibrate", "-o", tmp_path / "n")
    assert r.returncode == 2 and "give --budget" in r.stderr and "Traceback" not in r.stderr
    r = cli("ab", prompt_file, "--base", "http://127.0.0.1:9", "--head", worker, "--calibrate", "--budget", "1m",
            "-o", tmp_path / "s")  # fmt: skip
    assert r.returncode == 2 and "server" in r.stderr and "Traceback" not in r.stderr
    assert not (tmp_path / "n").exists() and not (tmp_path / "s").exists()
