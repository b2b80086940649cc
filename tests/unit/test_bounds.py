"""Every count and size a user gives has bounds, checked before anything is built or started: a value past them
(huge, 0 or negative, NaN or inf, not a number) is one line naming the option, exit 2 (docs/limits.md)."""

from __future__ import annotations

import resource
import time

import pytest

HUGE = str(10**12)
EP = ["--endpoint", "http://127.0.0.1:9"]  # never reached: every case is refused before a request
WORKER = "llmbench worker --weights random"  # never started: the same
AB = ["ab", "{P}", "--base", WORKER, "--head", WORKER]
OPEN = [*EP, "--rate", "5", "--requests", "10"]
LOAD = ["load", "{P}", *EP, "--slo", "ttft_ms:p90=1000"]


def _int_cases(base: list[str], option: str, bad: tuple[str, ...]) -> list:
    """A whole-number option: each bad value, and a value that is no whole number (click's own refusal)."""
    return [pytest.param([*base, option, v], option, id=f"{base[0]} {option} {v}") for v in (*bad, "x", "1.5")]


def _float_cases(base: list[str], option: str, bad: tuple[str, ...]) -> list:
    """A number option: each bad value, NaN, inf and a word."""
    return [pytest.param([*base, option, v], option, id=f"{base[0]} {option} {v}") for v in (*bad, "nan", "inf", "x")]


CASES = [
    *_int_cases(AB, "--processes", (HUGE, "1001", "0", "-1")),
    *_int_cases(AB, "--ttft-pairs", (HUGE, "1000001", "-1")),
    *_int_cases(AB, "--repeats", (HUGE, "0")),
    *_int_cases(AB, "--warmup", (HUGE, "-1")),
    *_int_cases(AB, "--max-new-tokens", (HUGE, "0")),
    *_int_cases(["run", "{P}", *EP], "--concurrency", (HUGE, "0")),
    *_int_cases(["run", "{P}", *EP], "--seed", (HUGE, "-1")),
    *_int_cases(["run", "{P}", *EP], "--turns", (HUGE, "0")),
    *_int_cases(["run", "{P}", *EP], "--repeats", (HUGE, "0")),
    *_float_cases(["run", "{P}", *EP], "--timeout", (HUGE, "86401", "0", "-1")),
    *_float_cases(["run", "{P}", *EP], "--temperature", (HUGE, "-1")),
    *_float_cases(["run", "{P}", *EP], "--top-p", ("1.5", "-1")),
    *_float_cases(["run", "{P}", *EP, "--turns", "2"], "--think-time", (HUGE, "-1")),
    *_float_cases(["run", "{P}", *EP, "--requests", "10"], "--rate", (HUGE, "0", "-1")),
    *_float_cases(["run", "{P}", *EP, "--rate", "1"], "--duration", (HUGE, "0", "-1")),
    *_int_cases(["run", "{P}", *EP, "--rate", "1"], "--requests", (HUGE, "0")),
    *_int_cases(["run", "{P}", *OPEN], "--workers", (HUGE, "0")),
    *_int_cases(["run", "{D}", *EP], "--num-prompts", (HUGE, "0")),
    *_int_cases(["run", "{D}", *EP, "--tokenizer", "x"], "--max-prompt-tokens", (HUGE, "0")),
    *_int_cases(LOAD, "--auto-steps", (HUGE, "-1")),
    *_float_cases(LOAD, "--auto-start", (HUGE, "0")),
    *_float_cases(LOAD, "--duration", (HUGE, "0")),
    *_float_cases(LOAD, "--min-attainment", (HUGE, "0")),
    *_int_cases([*LOAD, "--duration", "1"], "--workers", (HUGE, "0")),
    pytest.param([*LOAD, "--rates", "1e12"], "--rate", id="load --rates 1e12"),
    pytest.param([*LOAD, "--rates", ",".join(map(str, range(1, 102)))], "--rates", id="load --rates x101"),
    pytest.param([*LOAD, "--rates", "nan"], "--rates", id="load --rates nan"),
    pytest.param([*LOAD, "--rates", "0"], "--rates", id="load --rates 0"),
    pytest.param(["run", *EP, "--synthetic", "10000000x1000"], "--synthetic", id="run --synthetic 1e10 tokens"),
    pytest.param(["run", *EP, "--synthetic", f"10x{HUGE}"], "--synthetic", id="run --synthetic huge count"),
    *_int_cases(["history", "list", "--history", "{H}"], "--limit", (str(2**63), "0")),
    *_int_cases(["history", "prune", "--history", "{H}"], "--keep", (str(2**63), "0")),
    pytest.param(["history", "show", str(2**63), "--history", "{H}"], "RESULT_ID", id="history show 2**63"),
    pytest.param(["history", "show", "0", "--history", "{H}"], "RESULT_ID", id="history show 0"),
    *_float_cases(["bisect", "v0"], "--threshold", ("1e300", "0", "-1")),
    *_int_cases(["bisect", "v0"], "--max-looks", (HUGE, "0")),
    *_int_cases(["bisect", "v0"], "--max-skips", (HUGE, "0")),
    *_int_cases(["bisect", "v0"], "--processes", (HUGE, "0")),
    pytest.param(["bisect", "v0", "--look", "99999h"], "--look", id="bisect --look 99999h"),
]


@pytest.fixture
def files(tmp_path, prompt_file):
    """The placeholders' files: {P} a prompt list, {D} a dataset, {H} a history database's path."""
    dataset = tmp_path / "data.json"
    dataset.write_text('[{"prompt": "hello"}, {"prompt": "there"}]', encoding="utf-8")
    return {"{P}": str(prompt_file), "{D}": str(dataset), "{H}": str(tmp_path / "h.db")}


def _refused(cli, args: list[str], files: dict[str, str]) -> str:
    """The one error line of ``llmbench ARGS`` (asserting exit 2 and nothing else on stderr)."""
    r = cli(*[files.get(a, a) for a in args])
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr
    assert len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


@pytest.mark.parametrize(("args", "option"), CASES)
def test_out_of_bounds_is_one_line_naming_the_option(cli, files, args, option):
    line = _refused(cli, args, files)
    assert line.startswith("llmbench: error:") and option in line, line


@pytest.mark.parametrize("option", ["--processes", "--ttft-pairs"])
def test_ab_huge_design_is_refused_at_once_with_memory_flat(cli, files, option):
    """The defect: --ttft-pairs 10**12 built its plan in memory (23 GB, then the OOM killer) before any bound."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    line = _refused(cli, [*AB, option, HUGE], files)
    assert time.perf_counter() - t0 < 1.0
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 200_000  # KiB: nothing was built
    assert line.startswith(f"llmbench: error: {option} {HUGE}: "), line


def test_ab_plan_product_is_bounded_before_any_worker(cli, files, tmp_path):
    """Each count within its bound, their product (prompts x repeats + TTFT-only pairs) past a plan's."""
    many = tmp_path / "many.txt"
    many.write_text("".join(f"prompt {i}\n" for i in range(20)), encoding="utf-8")
    t0 = time.perf_counter()
    line = _refused(cli, ["ab", str(many), "--base", WORKER, "--head", WORKER, "--repeats", "1000000",
                          "-o", str(tmp_path / "ab")], files)  # fmt: skip
    assert time.perf_counter() - t0 < 1.0
    assert "20 prompts x --repeats 1,000,000" in line and "at most 10,000,000" in line, line
    assert not (tmp_path / "ab").exists()  # refused before the folder was made


def test_design_validate_bounds():
    from llmbench.core.errors import UserError
    from llmbench.drivers.ab import Design

    Design(processes=1000, repeats=10**6, ttft_pairs=10**6).validate()
    for kw in ({"processes": 1001}, {"ttft_pairs": 10**6 + 1}, {"repeats": 10**6 + 1}, {"processes": True}):
        with pytest.raises(UserError):
            Design(**kw).validate()  # type: ignore[arg-type]
    with pytest.raises(UserError, match="more than a plan holds"):
        Design(repeats=10**6, ttft_pairs=0).check_plan(6)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_queue": 10**12}, "--max-queue"),
        ({"max_queue": -1}, "--max-queue"),
        ({"max_tokens": 10**12}, "--max-tokens"),
        ({"max_tokens": 0}, "--max-tokens"),
        ({"reasoning_tokens": 10**12}, "--test-reasoning-tokens"),
    ],
)
def test_serve_limits_before_the_model_or_the_port(kwargs, match):
    pytest.importorskip("fastapi")
    from llmbench import serve
    from llmbench.core.errors import UserError
    from llmbench.options import ModelOptions

    with pytest.raises(UserError, match=match):
        serve.prepare(ModelOptions(weights="random"), "127.0.0.1", 8000, **kwargs)


def test_scan_bounds():
    from llmbench.core.errors import UserError
    from llmbench.drivers import scan

    with pytest.raises(UserError, match="--depth -1: must be at least 0"):
        scan.grid([], [-1], [])
    points = scan.grid([], [], [65_536])
    with pytest.raises(UserError, match="prompt tokens before measuring"):
        scan.check_plan(points, 1, 1, 10_000_000, set())
    with pytest.raises(UserError, match="prompt tokens before measuring"):
        scan.check_plan(scan.grid([10_000_000], [], []), 1, 1000, 128, set())


def test_sweep_grid_and_rounds_bounds():
    from llmbench.core.errors import UserError
    from llmbench.drivers import sweep_setups as ss
    from llmbench.options import ModelOptions, RunOptions

    spec = ModelOptions(weights="random")
    with pytest.raises(UserError, match="--repeats must be 1 to 1,000,000"):  # the sweep's rounds: no plan to make
        RunOptions(repeats=10**12)
    threads = list(range(1, 1002))
    with pytest.raises(UserError, match="setups"):
        ss.plan(spec, RunOptions(), dtype="float32", threads=threads, attn=None, cache="dynamic", compile_=False,
                quantize="none")  # fmt: skip


def test_open_loop_schedule_bounds():
    from llmbench.core.errors import UserError
    from llmbench.workloads.arrivals import check_schedule, plan_arrivals

    check_schedule(10.0, None, 3600.0)
    for rate, requests, duration in ((1e-9, 10, None), (2e6, 10, None), (1.0, None, 1e9), (1.0, None, float("nan"))):
        with pytest.raises(UserError):
            check_schedule(rate, requests, duration)
    with pytest.raises(UserError, match="longer than a run keeps"):
        plan_arrivals(0.001, requests=10_000)


def test_trace_rows_and_tokens_are_bounded(tmp_path, monkeypatch):
    from llmbench.core.errors import UserError
    from llmbench.workloads import limits, trace

    p = tmp_path / "t.jsonl"
    p.write_text("".join(f'{{"timestamp": {i}, "input_length": 1000, "output_length": 5, "hash_ids": [{i}]}}\n'
                         for i in range(5)), encoding="utf-8")  # fmt: skip
    spec = trace.TraceSpec(str(p), "mooncake")
    assert len(trace.read(spec).rows) == 5
    monkeypatch.setattr(trace, "MAX_REQUESTS", 4)
    with pytest.raises(UserError, match="rows to replay"):
        trace.read(spec)
    monkeypatch.setattr(trace, "MAX_REQUESTS", limits.MAX_REQUESTS)
    monkeypatch.setattr(trace, "MAX_TOKENS_MADE", 4_000)
    with pytest.raises(UserError, match="prompt tokens"):
        trace.read(spec)
