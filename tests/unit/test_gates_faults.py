"""Gates that can't be switched off, checked before anything is measured, and inputs that end in one line.

A NaN or infinite threshold would pass every head (no comparison with it is ever true); ``ab`` measures for
minutes, so every option that can be refused is refused before a worker starts; a run file with impossible
numbers is refused by name instead of being computed into "-125% faster"; each row says the population it used.
"""

from __future__ import annotations

import json
import math

import pytest

from llmbench.analysis.compare import compare_runs, gate_options, thresholds_of
from llmbench.core.errors import UserError
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

BAD_GATES = [
    ("--fail-on-regression", "nan"),
    ("--fail-on-regression", "inf"),
    ("--fail-on-regression", "-1"),
    ("--fail-on", "tpot_ms=nan"),
    ("--fail-on", "tpot_ms=inf"),
    ("--fail-on", "ttft_ms=-inf"),
    ("--require-mdc", "nan"),
    ("--require-mdc", "inf"),
    ("--require-mdc", "-2"),
    ("--require-mdc", "0"),  # no measured interval has a width of 0: it could never pass
]


@pytest.fixture
def slow_pair(tmp_path):
    """A base and a head twice as slow in TTFT and TPOT."""
    base, head = tmp_path / "base.json", tmp_path / "head.json"
    save_run(synthetic_run(n=20, noise=0.05, seed=1), base)
    save_run(synthetic_run(n=20, noise=0.05, seed=2, ttft_ms=200.0, tpot_ms=40.0), head)
    return base, head


@pytest.mark.parametrize(("option", "value"), BAD_GATES)
def test_compare_refuses_a_gate_that_could_never_fail(cli, slow_pair, option, value):
    r = cli("compare", *slow_pair, option, value)
    assert r.returncode == 2 and r.stdout == "", r.stdout  # before any work: nothing compared, nothing printed
    assert len(r.stderr.strip().splitlines()) == 1 and option in r.stderr and "internal error" not in r.stderr
    # refused before any file is read: the option's fault is named even when the files are not there
    r = cli("compare", "missing-base.json", "missing-head.json", option, value)
    assert r.returncode == 2 and option in r.stderr and "not found" not in r.stderr


def test_a_threshold_of_zero_fails_any_significant_slowdown_and_passes_an_a_a(cli, slow_pair, tmp_path):
    assert cli("compare", *slow_pair, "--fail-on-regression", "0").returncode == 1
    save_run(synthetic_run(n=20, noise=0.05, seed=3), tmp_path / "again.json")
    assert cli("compare", slow_pair[0], tmp_path / "again.json", "--fail-on-regression", "0").returncode == 0


def test_the_api_refuses_them_too(slow_pair):
    from llmbench.results.storage import load_run

    comp = compare_runs(*(load_run(p) for p in slow_pair))
    for bad in (math.nan, math.inf, -1.0):
        with pytest.raises(UserError, match="--fail-on-regression"):
            comp.gate(fail_on_regression=bad)
        with pytest.raises(UserError, match="--fail-on tpot_ms"):
            thresholds_of(None, {"tpot_ms": bad})
    with pytest.raises(UserError, match="--require-mdc"):
        gate_options(None, None, math.nan)
    assert [c.metric for c in comp.gate(fail_on_regression=0.0)] == ["ttft_ms", "tpot_ms", "e2e_ms"]


def test_a_gate_on_load_files_is_refused_not_ignored(cli, tmp_path):
    load = {"load_version": 1, "rates": [], "saturation": {"rate_rps": None}, "slos": []}
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "load.json").write_text(json.dumps(load), encoding="utf-8")
    r = cli("compare", tmp_path / "a" / "load.json", tmp_path / "b" / "load.json", "--fail-on-regression", "5")
    assert r.returncode == 2 and "not load.json" in r.stderr, r.stderr


# ------------------------------------------------------------------------------- ab: refused before a worker


@pytest.fixture
def marker_side(tmp_path):
    """A side whose command leaves a file behind when it is started: proof that a worker was started."""
    marker = tmp_path / "started"
    return marker, f"touch {marker}"


AB_REFUSALS = [
    *[((option, value), option) for option, value in BAD_GATES],
    (("--fail-on", "tpot=5"), "--fail-on tpot"),  # not a metric
    (("--fail-on", "output_tokens=5"), "--fail-on output_tokens"),  # no direction to regress in
    (("--history", "ftp://example.com/h"), "--history"),
    (("--history=nonsense",), "--history"),
    (("--gate-stat", "gaps", "--fail-on-regression", "3", "--max-new-tokens", "2"), "--max-new-tokens 2"),
    (("--fail-on-regression", "3", "--max-new-tokens", "0"), "--max-new-tokens"),
    (("--resume",), "--resume"),  # without -o
]


@pytest.mark.parametrize(("args", "named"), AB_REFUSALS, ids=[" ".join(a) for a, _ in AB_REFUSALS])
def test_ab_refuses_a_bad_option_before_any_worker_starts(cli, prompt_file, tmp_path, marker_side, args, named):
    marker, side = marker_side
    out = [] if "--resume" in args else ["-o", tmp_path / "ab"]
    r = cli("ab", prompt_file, "--base", side, "--head", side, *out, *args, "-q")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and named in r.stderr, r.stderr
    assert not marker.exists(), "a worker was started"
    assert not (tmp_path / "ab").exists(), "the output folder was made"


def test_a_history_url_from_the_environment_is_checked_before_a_worker_starts(cli, prompt_file, tmp_path,
                                                                              marker_side):  # fmt: skip
    marker, side = marker_side
    r = cli("ab", prompt_file, "--base", side, "--head", side, "-o", tmp_path / "ab", "-q",
            env={"LLMBENCH_HISTORY": "mysql://db/x"})  # fmt: skip
    assert r.returncode == 2 and "SQLite or PostgreSQL" in r.stderr and not marker.exists()


def test_an_output_folder_holding_a_result_is_refused_before_any_worker_starts(cli, prompt_file, tmp_path,
                                                                              marker_side):  # fmt: skip
    marker, side = marker_side
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "base.json").write_text("{}", encoding="utf-8")
    r = cli("ab", prompt_file, "--base", side, "--head", side, "-o", tmp_path / "ab", "-q")
    assert r.returncode == 2 and "already holds an ab run" in r.stderr and not marker.exists()


# ------------------------------------------------------------------------- run files no run could have written


def _edited(tmp_path, name, edit, run=None):
    """A run file of 10 requests with ``edit(request dict, index)`` applied to each request."""
    path = tmp_path / f"{name}.json"
    save_run(run or synthetic_run(n=10, noise=0.1, seed=4), path)
    data = json.loads(path.read_text(encoding="utf-8"))
    for i, r in enumerate(data["requests"]):
        edit(r, i)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _set(**values):
    """An edit of request 3 only; ``first`` sets ttft_ms and the first stamp alike (the schema's invariant)."""

    def edit(r, i):
        if i == 3:
            first = values.pop("first", None) if "first" in values else None
            r.update(values)
            if first is not None:
                r["ttft_ms"] = r["token_times_ms"][0] = first

    return edit


IMPOSSIBLE = {
    "negative-tpot": (_set(tpot_ms=-5.0), "requests.3.tpot_ms: Input should be greater than or equal to 0"),
    "zero-tpot": (_set(tpot_ms=0.0), "tpot_ms 0.0"),
    "huge-tpot": (_set(tpot_ms=1e308), "tpot_ms 1e+308"),
    "negative-ttft": (_set(first=-1.0), "requests.3.ttft_ms: Input should be greater than or equal to 0"),
    "huge-ttft": (_set(first=1e308, e2e_ms=1e308), "ttft_ms 1e+308"),
    "e2e-before-ttft": (_set(e2e_ms=1.0), "e2e_ms 1.0"),
    "no-tokens": (_set(output_tokens=0, token_times_ms=[]), "output_tokens 0"),
    "negative-tokens": (_set(output_tokens=-3), "requests.3.output_tokens: Input should be greater than or"),
    "duplicate": (lambda r, i: r.update(prompt_index=0) if i == 5 else None, "second request of prompt 0"),
}


@pytest.mark.parametrize("case", IMPOSSIBLE)
def test_compare_and_report_refuse_a_figure_no_run_records_in_one_line(cli, tmp_path, case):
    edit, said = IMPOSSIBLE[case]
    good = tmp_path / "good.json"
    save_run(synthetic_run(n=10, noise=0.1, seed=5), good)
    bad = _edited(tmp_path, "bad", edit)
    r = cli("compare", good, bad)  # the scalar read, which skips the requests' invariants
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (r.stdout, r.stderr)
    assert said in r.stderr and str(bad) in r.stderr and ("requests[" in r.stderr or "requests." in r.stderr), r.stderr
    # a full read (report) and a read with the stamps (gaps) check some of it themselves: one line either way
    # (report draws each run before it compares: a request of no tokens is left to its own checks)
    report = [] if case == "no-tokens" else [("report", good, bad, "-o", tmp_path / "r.html")]
    for args in [("compare", bad, good, "--gate-stat", "gaps", "--fail-on-regression", "5"), *report]:
        r = cli(*args)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stdout, r.stderr)
        assert "bad" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "r.html").exists()


def test_stamps_that_go_backwards_are_refused_where_they_are_read(cli, tmp_path):
    good = tmp_path / "good.json"
    save_run(synthetic_run(n=10, noise=0.1, seed=5), good)

    def backwards(r, i):
        if i == 2:
            r["token_times_ms"][5] = r["token_times_ms"][4] - 1.0

    bad = _edited(tmp_path, "bad", backwards)
    r = cli("compare", good, bad, "--gate-stat", "gaps", "--fail-on-regression", "5")
    assert r.returncode == 2 and "requests[2]" in r.stderr and "token_times_ms" in r.stderr, r.stderr
    assert cli("compare", good, bad).returncode == 0  # compare without gaps reads no stamps


FOREIGN = {
    "zero-length": (b"", "empty"),
    "truncated": (None, "truncated"),
    "not-json": (b"llmbench\n", "not valid JSON"),
    "not-utf8": (b"\xff\xfe\x00", "not UTF-8"),
    "a-list": (b"[1, 2]", "not an llmbench run"),
    "a-number": (b"3", "not an llmbench run"),
    "null": (b"null", "not an llmbench run"),
    "schema-4": (None, "schema_version 4"),  # a version this release does not know
    "schema-2-inline": (None, "names its columns file"),  # version 2 without the columns file it must name
    "schema-string": (None, "schema_version '1'"),
    "requests-a-number": (None, "requests"),
    "nan-literal": (None, "not a valid run JSON"),
    "missing-field": (None, "ttft_ms: Field required"),
    "nested-too-deeply": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
}


def _foreign(tmp_path, case) -> object:
    content, _ = FOREIGN[case]
    path = tmp_path / f"{case}.json"
    if content is not None:
        path.write_bytes(content)
        return path
    save_run(synthetic_run(n=4), path)
    text = path.read_text(encoding="utf-8")
    data = json.loads(text)
    if case == "truncated":
        path.write_text(text[: len(text) // 2], encoding="utf-8")
    elif case.startswith("schema"):
        version = {"schema-4": 4, "schema-2-inline": 2}.get(case, "1")
        path.write_text(json.dumps({**data, "schema_version": version}), encoding="utf-8")
    elif case == "requests-a-number":
        path.write_text(json.dumps({**data, "requests": 7}), encoding="utf-8")
    elif case == "nan-literal":
        data["requests"][0]["tpot_ms"] = "NAN"
        path.write_text(json.dumps(data).replace('"NAN"', "NaN"), encoding="utf-8")
    elif case == "missing-field":
        del data["requests"][1]["ttft_ms"]
        path.write_text(json.dumps(data), encoding="utf-8")
    return path


@pytest.mark.parametrize("case", FOREIGN)
def test_compare_show_and_report_say_what_is_wrong_with_a_file_in_one_line(cli, tmp_path, case):
    good = tmp_path / "good.json"
    save_run(synthetic_run(n=4, seed=1), good)
    bad = _foreign(tmp_path, case)
    said = FOREIGN[case][1]
    for args in (("compare", good, bad), ("compare", bad, good), ("show", bad),
                 ("report", good, bad, "-o", tmp_path / "r.html")):  # fmt: skip
        r = cli(*args)
        if args[0] == "report" and case == "nan-literal":
            assert r.returncode in (0, 2) and "internal error" not in r.stderr  # a full read keeps a NaN
            continue
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert said in r.stderr and "internal error" not in r.stderr and "Traceback" not in r.stderr, r.stderr


# ------------------------------------------------------------------------------- each row's own population


def test_each_row_says_how_many_requests_it_was_computed_on(tmp_path):
    base = synthetic_run(n=10, noise=0.1, seed=6)
    head = synthetic_run(n=10, noise=0.1, seed=7)
    head.requests = head.requests[:8]  # two requests the head did not finish
    for i, r in enumerate(base.requests[:3]):  # three one-token answers: no TPOT, no decode rate, no gaps
        base.requests[i] = r.model_copy(update={"output_tokens": 1, "token_times_ms": r.token_times_ms[:1],
                                                "tpot_ms": None, "e2e_ms": r.ttft_ms})  # fmt: skip
    comp = compare_runs(base, head)
    assert comp.n_pairs == 8 and comp.n_base == 10 and comp.n_new == 8
    n = {(row.metric, row.stat): (row.n_base, row.n_new) for row in comp.rows}
    assert n[("ttft_ms", "mean")] == n[("output_tokens", "p90")] == (8, 8)  # the pairs
    assert n[("tpot_ms", "mean")] == n[("decode_tokens_per_s", "p50")] == n[("tpot_ms", "gaps")] == (5, 5)
    other = head.model_copy(update={"config": head.config.model_copy(update={"prompt_sha256": "1" * 64})})
    unpaired = compare_runs(base, other)
    n = {(row.metric, row.stat): (row.n_base, row.n_new) for row in unpaired.rows}
    assert n[("ttft_ms", "mean")] == (10, 8) and n[("tpot_ms", "p50")] == (7, 8)  # each run's own
    assert json.loads(json.dumps(unpaired.to_dict()))["rows"][0]["n_base"] == 10
