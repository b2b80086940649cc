"""llmbench ab and its worker: the protocol, ABBA interleaving, pairing, the gate's exits, failures, resume, and
an A/A under a load that comes and goes. Workers are real `llmbench worker` processes on a tiny real Qwen2."""

from __future__ import annotations

import itertools
import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from llmbench.backends.worker_main import PROTOCOL
from llmbench.results.storage import load_run
from tests.helpers import cli_process, wait_for_requests

INJECT = Path(__file__).resolve().parents[1] / "benchmarks" / "inject"


def _worker(tiny_model_dir, *env: str, threads: int = 1) -> str:
    command = (
        f"{sys.executable} -m llmbench worker -m {tiny_model_dir} --device cpu --dtype float32 --threads {threads}"
    )
    return f"env PYTHONPATH={INJECT} {' '.join(env)} {command}" if env else command


@pytest.mark.subprocess
def test_the_worker_protocol(tiny_model_dir):
    proc = subprocess.Popen([sys.executable, "-m", "llmbench", "worker", "-m", str(tiny_model_dir), "--device", "cpu",
                             "--dtype", "float32", "--threads", "1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip

    def ask(**msg):
        proc.stdin.write(json.dumps({"v": PROTOCOL, **msg}) + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        ready = json.loads(proc.stdout.readline())
        assert ready["event"] == "ready" and ready["v"] == PROTOCOL and ready["pid"] == proc.pid
        options = {"max_new_tokens": 5, "ignore_eos": True, "warmup": 0, "repeats": 1}
        prepared = ask(op="prepare", prompts=["one", "two"], prompt_file="p.txt", prompt_sha256="ab" * 32,
                       options=options)  # fmt: skip
        run = prepared["run"]
        assert prepared["event"] == "prepared" and run["config"]["prompt_sha256"] == "ab" * 32
        assert run["config"]["max_new_tokens"] == 5 and run["load"]["parameters"] > 0
        result = ask(op="measure", prompt_index=1, repeat=0)
        r = result["result"]
        assert result["event"] == "result" and r["prompt_index"] == 1 and r["output_tokens"] == 5
        assert r["token_times_ms"][0] == r["ttft_ms"] and result["warnings"] == []  # stamped in the worker
        probe = ask(op="probe")
        assert probe["event"] == "probe" and probe["probe"]["threads"] == 1
        bad = ask(op="dance")
        assert bad["event"] == "error" and "unknown op" in bad["message"]
        proc.stdin.write(json.dumps({"v": PROTOCOL + 1, "op": "probe"}) + "\n")
        proc.stdin.flush()
        newer = json.loads(proc.stdout.readline())
        assert newer["event"] == "error" and "protocol" in newer["message"]
        assert proc.wait(30) == 2  # it refuses a protocol it doesn't speak, and says so first
    finally:
        proc.kill()


def test_ab_interleaves_pairs_and_gates_like_compare(cli, tiny_model_dir, prompt_file, tmp_path):
    out = tmp_path / "ab"
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", _worker(tiny_model_dir),
            "--max-new-tokens", "6", "--repeats", "2", "-o", out, "--fail-on-regression", "25", "-q")  # fmt: skip
    assert r.returncode == 0, r.stderr
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert base.complete and head.complete and len(base.requests) == len(head.requests) == 6
    assert base.config.ab.role == "base" and base.config.ab.other_run_id == head.run_id
    assert head.config.ab.other_file == "base.json" and "llmbench worker" in head.config.ab.side
    # ABBA: each pair back to back, the first side alternating
    events = sorted([(q.started_s, "B", q.prompt_index, q.repeat) for q in base.requests]
                    + [(q.started_s, "H", q.prompt_index, q.repeat) for q in head.requests])  # fmt: skip
    assert "".join(e[1] for e in events) == "BHHBBHHBBHHB"
    assert all(events[k][2:] == events[k + 1][2:] for k in range(0, 12, 2))  # a pair is one (prompt, repeat)
    assert base.machine.probe_before.threads == 1 and head.machine.probe_after is not None
    assert "paired by (prompt_index, repeat): 6 pairs" in r.stdout and "would be called significant" in r.stdout
    assert "outputs: 0 of 6 changed" in r.stdout and "gate tpot_ms p50" in r.stdout  # ab gates the median
    # ordinary runs: compare, report and export read them
    assert cli("compare", out / "base.json", out / "head.json", "--strict").returncode == 0
    assert cli("report", out / "base.json", out / "head.json", "-o", tmp_path / "r.html").returncode == 0
    assert cli("export", out / "head.json", "-o", tmp_path / "h.csv").returncode == 0
    again = cli("ab", prompt_file, "--base", "x", "--head", "y", "-o", out)
    assert again.returncode == 2 and "already holds an ab run" in again.stderr  # never overwritten


def test_a_head_slowed_through_its_environment_fails_the_gate(cli, tiny_model_dir, prompt_file, tmp_path):
    slow = _worker(tiny_model_dir, "LLMBENCH_INJECT_SLEEP_MS=2")  # + 2 ms per token on a ~3-5 ms TPOT
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", slow, "--max-new-tokens", "6",
            "--repeats", "2", "-o", tmp_path / "ab", "--fail-on", "tpot_ms=10", "--format", "json", "-q")  # fmt: skip
    assert r.returncode == 1, r.stderr
    [comp] = json.loads(r.stdout)
    assert comp["regression"] and [g["metric"] for g in comp["gate"] if g["regression"]] == ["tpot_ms"]
    assert "PYTHONPATH=redacted" in load_run(tmp_path / "ab" / "head.json").config.ab.side  # no value recorded


def test_a_worker_that_cannot_start_or_dies_is_one_line_and_keeps_the_other_side(cli, tiny_model_dir, prompt_file,
                                                                                   tmp_path):  # fmt: skip
    failing = f"{sys.executable} -c 'import sys; print(\"no GPU here\", file=sys.stderr); sys.exit(3)'"
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", failing, "-o", tmp_path / "a", "-q")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "head: the worker exited (code 3)" in r.stderr and "no GPU here" in r.stderr and sys.executable in r.stderr
    r = cli("ab", prompt_file, "--base", "no-such-program-xyz", "--head", _worker(tiny_model_dir), "-o", tmp_path / "b",
            "-q")  # fmt: skip
    assert r.returncode == 2 and "base: cannot start the worker no-such-program-xyz" in r.stderr
    dies = _worker(tiny_model_dir, "LLMBENCH_INJECT_EXIT_AFTER=25")  # dies in its third measured request
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", dies, "--max-new-tokens", "6",
            "--repeats", "2", "-o", tmp_path / "c", "-q")  # fmt: skip
    assert (
        r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "head: the worker exited (code 9)" in r.stderr
    )
    base, head = load_run(tmp_path / "c" / "base.json"), load_run(tmp_path / "c" / "head.json")
    assert len(base.requests) >= 2 and len(head.requests) >= 2 and not base.complete and not head.complete
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", "http://127.0.0.1:9/v1", "-o",
            tmp_path / "d", "-q")  # fmt: skip
    assert r.returncode == 2 and "head: cannot connect" in r.stderr


@pytest.mark.subprocess
def test_an_interrupted_ab_run_keeps_its_pairs_and_resumes(tiny_model_dir, many_prompts, tmp_path):
    out = tmp_path / "ab"
    args = ("ab", many_prompts, "--base", _worker(tiny_model_dir), "--head", _worker(tiny_model_dir),
            "--max-new-tokens", "8", "-q")  # fmt: skip
    proc = cli_process(*args, "-o", out)
    wait_for_requests(out / "head.json", 4, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "interrupted by SIGINT" in err and "Traceback" not in err, err
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    assert not base.complete and not head.complete and abs(len(base.requests) - len(head.requests)) <= 1
    resumed = subprocess.run([sys.executable, "-m", "llmbench", *map(str, args), "-o", str(out), "--resume"],
                             capture_output=True, text=True, timeout=600)  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr
    base, head = load_run(out / "base.json"), load_run(out / "head.json")
    for run in (base, head):
        keys = sorted((q.prompt_index, q.repeat) for q in run.requests)
        assert run.complete and keys == [(i, 0) for i in range(60)] and len(run.sessions) == 2


@pytest.mark.slow
def test_an_a_a_run_under_a_load_that_comes_and_goes_stays_green(cli, tiny_model_dir, tmp_path):
    """A CPU burner switches on and off every 2 s: ab's pairs see it alike and the gate stays green; two runs one
    after the other, one of them beside the burner, fail the same gate. Two threads on two cores: a burner then
    makes the model's two OpenMP threads wait on each other (3x slower here), as on a shared CI runner."""
    prompts = tmp_path / "p.txt"
    prompts.write_text("".join(f"prompt number {i} about a river\n" for i in range(24)), encoding="utf-8")
    stop_burner = threading.Event()

    def toggle() -> None:
        while not stop_burner.is_set():
            burner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            stop_burner.wait(2.0)
            burner.kill()
            burner.wait()
            stop_burner.wait(2.0)

    common = ("--max-new-tokens", "12", "-q")
    t = threading.Thread(target=toggle, daemon=True)
    t.start()
    try:
        worker = _worker(tiny_model_dir, threads=2)
        r = cli("ab", prompts, "--base", worker, "--head", worker, *common, "--repeats", "2", "-o", tmp_path / "ab",
                "--fail-on-regression", "10")  # fmt: skip
    finally:
        stop_burner.set()
        t.join()
    assert r.returncode == 0, r.stdout + r.stderr
    run = ("run", prompts, "-m", tiny_model_dir, "--device", "cpu", "--dtype", "float32", "--threads", "2", *common)
    assert cli(*run, "-o", tmp_path / "quiet.json").returncode == 0
    # the control: the same gate on two runs one after the other, the second beside two spinners (both cores
    # busy: several times slower, so it fails even if the "quiet" run shared the machine with something else)
    burners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.5)
        assert cli(*run, "-o", tmp_path / "busy.json").returncode == 0
    finally:
        for b in burners:
            b.kill()
    r = cli("compare", tmp_path / "quiet.json", tmp_path / "busy.json", "--fail-on-regression", "10")
    assert r.returncode == 1 and "REGRESSION" in r.stdout


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


@pytest.mark.subprocess
def test_a_worker_that_dies_in_its_warm_up_is_recorded(cli, tiny_model_dir, prompt_file, tmp_path):
    dies = _worker(tiny_model_dir, "LLMBENCH_INJECT_EXIT_AFTER=2")  # its first (warm-up) request's second token
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", dies, "--max-new-tokens", "4", "-o",
            tmp_path / "w", "-q")  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "head: warm-up request failed" in lines[0]
    assert "the worker exited (code 9)" in lines[0] and "recorded in" in lines[0]
    head = load_run(tmp_path / "w" / "head.json")
    assert not head.complete and not head.requests
    assert [(f.repeat < 0, "code 9" in f.error) for f in head.failed_requests] == [(True, True)]


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


@pytest.mark.subprocess
def test_ab_spreads_each_side_over_processes_used_in_turn(cli, tiny_model_dir, prompt_file, tmp_path):
    r = cli("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", _worker(tiny_model_dir), "--processes", "2",
            "--max-new-tokens", "3", "--repeats", "2", "-o", tmp_path / "p", "-q", "--format", "json")  # fmt: skip
    assert r.returncode in (0, 1), r.stderr
    base, head = load_run(tmp_path / "p" / "base.json"), load_run(tmp_path / "p" / "head.json")
    assert base.config.ab.processes == 2 and len({p["pid"] for p in base.config.engine_settings["processes"]}) == 2
    for run in (base, head):
        assert {(q.prompt_index, q.repeat): q.process for q in run.requests} == {
            (i, rep): (rep * 3 + i) % 2 for i in range(3) for rep in range(2)}  # fmt: skip
    assert json.loads(r.stdout)[0]["n_pairs"] == 6


@pytest.mark.subprocess
def test_a_gate_that_cannot_see_its_threshold_says_so_and_require_mdc_fails(cli, tiny_model_dir, prompt_file,
                                                                             tmp_path):  # fmt: skip
    slow = _worker(tiny_model_dir, "LLMBENCH_INJECT_SLEEP_MS=3")
    args = ("ab", prompt_file, "--base", _worker(tiny_model_dir), "--head", slow, "--max-new-tokens", "3",
            "--fail-on-regression", "0.01", "-q")  # fmt: skip
    r = cli(*args, "-o", tmp_path / "a")
    assert "BLIND: this run could not have seen a 0.01% regression" in r.stderr  # 3 pairs can't see 0.01%
    r = cli(*args, "-o", tmp_path / "b", "--require-mdc", "0.01")
    assert r.returncode == 1
    assert r.stderr.strip().splitlines()[-1].startswith("llmbench: error: --require-mdc 0.01: this run could not")
