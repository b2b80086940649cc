"""What kind of file a path is (llmbench/results/kinds.py) and what a gate decides (llmbench/analysis/gate.py).

Real files only: runs are written with ``save_run`` from synthetic runs of the real schema, driver records with
``write_record`` (the writers' own function, so each record's version key comes first, as written), and the
gates decide over real ``compare_runs`` comparisons. No model is loaded: the whole file runs in seconds.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from llmbench.analysis.compare import GATED_BY_DEFAULT, compare_runs
from llmbench.analysis.gate import BudgetVerdict, GateVerdict, gate
from llmbench.core.errors import UserError
from llmbench.history import trend as tr
from llmbench.results.kinds import KINDS, kind_of
from llmbench.results.kinds import is_run_file as is_run
from llmbench.results.schema import LOAD_VERSION, PAINT_VERSION, SCAN_VERSION
from llmbench.results.storage import load_run, save_run, write_record
from tests.helpers import synthetic_run

# sweep.json and quality.json versions: their constants live in modules that import torch (drivers/sweep.py,
# engines/quality.py); kinds.py tells both by their version key alone, whatever its value
SWEEP_VERSION = QUALITY_VERSION = 1


# --- files of every kind, written the way their writers write them ---------------------------------------------


def _run(path: Path, **kw) -> Path:
    save_run(synthetic_run(n=kw.pop("n", 5), **kw), path)
    return path


def _sweep(folder: Path) -> Path:
    """A sweep folder: its run files and a sweep.json naming them (drivers/sweep.py's record, abridged)."""
    folder.mkdir(parents=True, exist_ok=True)
    _run(folder / "a.json", seed=1)
    rows = [{"label": "a", "run_file": "a.json", "engine": "transformers"}]
    record = {"sweep_version": SWEEP_VERSION, "created_at": "2026-01-01T00:00:00Z", "complete": True,
              "model": "synthetic", "results": rows, "best": {}, "pareto": ["a"]}  # fmt: skip
    write_record(folder / "sweep.json", record)
    return folder / "sweep.json"


def _scan(folder: Path, version: object = SCAN_VERSION) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"scan_version": version, "created_at": "2026-01-01T00:00:00Z", "complete": True, "model": "m",
              "engine": "transformers", "points": []}  # fmt: skip
    write_record(folder / "scan.json", record)
    return folder / "scan.json"


def _load(folder: Path, version: object = LOAD_VERSION) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    record = {"load_version": version, "llmbench_version": "0", "created_at": "2026-01-01T00:00:00Z",
              "complete": True, "rates": [], "saturation": {"rate_rps": None}, "slos": []}  # fmt: skip
    write_record(folder / "load.json", record)
    return folder / "load.json"


def _quality(path: Path) -> Path:
    record = {"quality_version": QUALITY_VERSION, "created_at": "2026-01-01T00:00:00Z", "weights": "random",
              "device": "cpu", "candidate": {}, "reference": {}}  # fmt: skip
    write_record(path, record)
    return path


def _ab(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    _run(folder / "base.json", seed=1)
    _run(folder / "head.json", seed=2)
    return folder


# --- kinds -------------------------------------------------------------------------------------------------------


def test_a_run_file_is_told_by_its_first_bytes(tmp_path):
    run = _run(tmp_path / "r.json")
    assert is_run(run) and kind_of(run) == kind_of(run, among=("load",)) == kind_of(run, among=())
    assert kind_of(run).kind == "run" and kind_of(run).path == run and kind_of(run).record is None
    # the same JSON as a dict again, but not written by llmbench (keys reordered): no longer a run by its bytes
    obj = json.loads(run.read_bytes())
    (tmp_path / "sorted.json").write_text(json.dumps({"requests": obj.pop("requests"), **obj}), encoding="utf-8")
    assert not is_run(tmp_path / "sorted.json")
    for other in (_scan(tmp_path / "s"), _load(tmp_path / "l"), _sweep(tmp_path / "w"), _quality(tmp_path / "q.json")):
        assert not is_run(other), other
    assert not is_run(tmp_path / "missing.json") and not is_run(tmp_path)  # unreadable: False, never raises


def test_every_kind_is_recognised_from_a_real_file_or_folder(tmp_path):
    sweep, scan, load = _sweep(tmp_path / "sweep"), _scan(tmp_path / "scan"), _load(tmp_path / "load")
    quality, ab, run = _quality(tmp_path / "quality.json"), _ab(tmp_path / "ab"), _run(tmp_path / "r.json")
    paint = tmp_path / "paint.json"  # llmbench paint's record (tests/unit/test_paint.py renders one)
    write_record(paint, {"paint_version": PAINT_VERSION, "requests": [], "summary": {}})
    found = {
        "run": kind_of(run),
        "sweep": kind_of(sweep),
        "scan": kind_of(scan),
        "load": kind_of(load),
        "quality": kind_of(quality),
        "ab": kind_of(ab),
        "paint": kind_of(paint),
    }
    assert set(found) == set(KINDS)  # a kind added to KINDS needs its case here
    for kind, f in found.items():
        assert f.kind == kind, (kind, f)
    assert found["ab"].path == ab and found["ab"].record is None
    assert found["scan"].record == json.loads(scan.read_text(encoding="utf-8"))
    assert found["load"].record["load_version"] == LOAD_VERSION
    assert found["sweep"].record["results"][0]["run_file"] == "a.json"
    assert found["quality"].record["quality_version"] == QUALITY_VERSION
    assert found["paint"].record["paint_version"] == PAINT_VERSION
    # a driver's folder is its summary file
    for folder, kind, name in ((tmp_path / "sweep", "sweep", "sweep.json"), (tmp_path / "scan", "scan", "scan.json"),
                               (tmp_path / "load", "load", "load.json")):  # fmt: skip
        f = kind_of(folder)
        assert (f.kind, f.path) == (kind, folder / name) and f.record is not None


def test_a_sweep_is_known_by_its_version_or_its_name(tmp_path):
    write_record(tmp_path / "renamed.json", {"sweep_version": SWEEP_VERSION, "results": []})
    assert kind_of(tmp_path / "renamed.json").kind == "sweep"
    write_record(tmp_path / "sweep.json", {"results": []})  # an older sweep.json: its name says it
    assert kind_of(tmp_path / "sweep.json").kind == "sweep"
    write_record(tmp_path / "other.json", {"results": []})
    assert kind_of(tmp_path / "other.json").kind == "run"  # for load_run to refuse


def test_among_restricts_what_is_recognised(tmp_path):
    sweep, scan, load = _sweep(tmp_path / "sweep"), _scan(tmp_path / "scan"), _load(tmp_path / "load")
    quality, ab = _quality(tmp_path / "quality.json"), _ab(tmp_path / "ab")
    assert kind_of(scan, among=("scan", "load")).kind == "scan"  # show's and report's question
    assert kind_of(load, among=("load",)).kind == "load"  # compare's
    for path in (scan, sweep, quality):
        assert kind_of(path, among=("load",)).kind == "run", path
    for path in (load, sweep, quality):
        assert kind_of(path, among=("scan",)).kind == "run", path
    assert kind_of(quality, among=("sweep",)).kind == "run"
    assert kind_of(sweep, among=("quality",)).kind == "run"
    assert kind_of(sweep, among=("sweep",)).kind == "sweep" and kind_of(quality, among=("quality",)).kind == "quality"
    # a folder is looked into only when "ab" is asked for
    f = kind_of(ab, among=("load", "sweep", "quality"))
    assert (f.kind, f.path) == ("run", ab)
    assert kind_of(tmp_path / "load", among=("load",)).kind == "run"  # the folder itself: for load_run to refuse
    # "ab" with the folder's own kind left out: its summary file is found but not read as that kind
    f = kind_of(tmp_path / "scan", among=("ab", "load"))
    assert (f.kind, f.path, f.record) == ("run", scan, None)


def test_an_ab_folder_needs_both_runs(tmp_path):
    half = tmp_path / "half"
    half.mkdir()
    _run(half / "base.json")
    with pytest.raises(UserError, match=r"no run, sweep\.json, scan\.json, load\.json or ab run"):
        kind_of(half)
    _run(half / "head.json")
    assert kind_of(half).kind == "ab"
    # both runs and a driver's record: base.json + head.json are what make it an ab run
    _scan(half)
    assert kind_of(half).kind == "ab"


@pytest.mark.parametrize("among", [KINDS, ("ab",)])
def test_a_folder_that_is_none_of_them_is_a_user_error(tmp_path, among):
    folder = tmp_path / "plain"
    folder.mkdir()
    _run(folder / "a.json")  # a run inside is not enough: a folder is an ab run or a driver's folder
    with pytest.raises(UserError, match=str(folder)):
        kind_of(folder, among=among)
    with pytest.raises(UserError, match="no run, sweep.json"):
        kind_of(tmp_path / "plain", among=among)


def test_a_folder_for_a_reader_of_files_is_a_user_error(tmp_path):
    with pytest.raises(UserError, match="is a folder, not a file"):
        kind_of(tmp_path, among=("scan", "load"))  # show's question


def test_a_missing_path_is_a_user_error_or_left_to_its_reader(tmp_path):
    missing = tmp_path / "missing.json"
    with pytest.raises(UserError, match=f"not found: {missing}"):
        kind_of(missing)
    with pytest.raises(UserError, match="not found"):
        kind_of(missing, among=("scan", "load"))
    # without "scan" nothing reads the path: a run, whose reader names what is wrong
    assert kind_of(missing, among=("load",)).kind == "run"
    with pytest.raises(UserError, match="not found"):
        load_run(kind_of(missing, among=("load",)).path)


BAD_FILES = {
    "empty": b"",
    "malformed": b'{"scan_version": 1, "points": [',
    "binary": b"\xff\xfe\x00garbage\x80",
    "a list": b"[1, 2, 3]",
    "unknown kind": json.dumps({"hello": "world", "version": 3}).encode(),
    "nested too deep": b"[" * 100_000 + b"]" * 100_000,
    "run-like but truncated": b'{"schema_version": 1, "requests": [',
}


@pytest.mark.parametrize("name", list(BAD_FILES))
@pytest.mark.parametrize("among", [KINDS, ("scan", "load"), ("load",), ("sweep", "quality")])
def test_a_file_of_no_known_kind_is_a_run_for_load_run_to_refuse_in_one_line(tmp_path, name, among):
    path = tmp_path / "bad.json"
    path.write_bytes(BAD_FILES[name])
    f = kind_of(path, among=among)  # never a traceback: the documented answer, a run
    assert (f.kind, f.path, f.record) == ("run", path, None)
    with pytest.raises(UserError) as e:
        load_run(path)
    assert str(path) in str(e.value)


@pytest.mark.parametrize("write", [_scan, _load], ids=["scan", "load"])
def test_a_record_of_another_version_is_refused_by_name(tmp_path, write):
    path = write(tmp_path, version=99)
    key = path.stem + "_version"
    with pytest.raises(UserError, match=f"{key} 99.*reads version 1"):
        kind_of(path)
    with pytest.raises(UserError, match=f"{key} 99"):
        kind_of(tmp_path)  # its folder too


@pytest.mark.parametrize("key", ["sweep_version", "quality_version"])
def test_a_sweep_or_quality_record_of_another_version_is_refused(tmp_path, key):
    write_record(tmp_path / "record.json", {key: 99, "results": []})
    with pytest.raises(UserError, match=f"{key} 99"):
        kind_of(tmp_path / "record.json")


def test_show_and_report_say_what_is_wrong_in_one_line(cli, tmp_path):
    (tmp_path / "empty.json").write_bytes(b"")
    (tmp_path / "bad.json").write_bytes(b"{not json")
    plain = tmp_path / "plain"
    plain.mkdir()
    for args in (["show", tmp_path / "empty.json"], ["show", tmp_path / "bad.json"], ["show", plain],
                 ["show", tmp_path / "missing.json"], ["compare", tmp_path / "bad.json", tmp_path / "empty.json"],
                 ["compare", plain, tmp_path / "empty.json"]):  # fmt: skip
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("llmbench: error:"), (args, r.stderr)
        assert "Traceback" not in r.stderr and "internal error" not in r.stderr, r.stderr


def test_a_cut_scan_or_load_record_is_one_line_in_show_report_and_compare(cli, tmp_path):
    """A record with only its version (hand-edited, or cut short) once ended in "internal error: KeyError"."""
    write_record(tmp_path / "load.json", {"load_version": LOAD_VERSION, "results": []})
    write_record(tmp_path / "scan.json", {"scan_version": SCAN_VERSION})
    load, scan = tmp_path / "load.json", tmp_path / "scan.json"
    for args in (["show", load], ["show", scan], ["report", scan, "-o", tmp_path / "r.html"],
                 ["report", load, "-o", tmp_path / "r.html"], ["compare", load, load]):  # fmt: skip
        r = cli(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert r.stderr.startswith("llmbench: error:") and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "not a complete record" in r.stderr and "internal error" not in r.stderr, r.stderr
    assert not (tmp_path / "r.html").exists()  # nothing written for a record that could not be drawn


def test_show_reads_a_run_as_a_run(cli, tmp_path):
    r = cli("show", _run(tmp_path / "r.json", n=8))
    assert r.returncode == 0 and "TTFT" in r.stdout + r.stderr


# --- gate ------------------------------------------------------------------------------------------------------


def _comp(**new):
    """A real comparison of a base with a head made of ``new``'s numbers (20 paired requests, 5% noise)."""
    base = synthetic_run(n=20, noise=0.05, seed=1)
    head = synthetic_run(n=20, noise=0.05, seed=new.pop("seed", 2), **new)
    return compare_runs(base, head, base_name="base.json", new_name="head.json")


@pytest.fixture(scope="module")
def slower():
    return _comp(tpot_ms=30.0)  # +50% per token; TTFT unchanged


@pytest.fixture(scope="module")
def same():
    return _comp(seed=3)  # A/A


def test_a_regression_beyond_the_threshold_fails_and_the_same_change_under_a_larger_one_passes(slower):
    v = gate([slower], fail_on_regression=10)
    assert isinstance(v, GateVerdict) and v.regression and v.exit_code == 1
    failed = {(c.metric, c.stat) for k in v.checks for c in k if c.regression}
    assert ("tpot_ms", "mean") in failed and ("ttft_ms", "mean") not in failed  # TTFT did not move
    assert {c.metric for c in v.checks[0]} == set(GATED_BY_DEFAULT)  # every gated metric, passing or not
    assert v.mdc_error is None and v.blind == []
    for threshold in (60, 100):  # +50% is under both
        v = gate([slower], fail_on_regression=threshold)
        assert not v.regression and v.exit_code == 0, threshold
        assert all(c.significant for c in v.checks[0] if c.metric == "tpot_ms")  # seen, just allowed
    # per-metric thresholds, as the CLI passes them (METRIC=PCT items)
    assert gate([slower], fail_on=["tpot_ms=10"]).exit_code == 1
    assert gate([slower], fail_on=["tpot_ms=60"]).exit_code == 0
    assert gate([slower], fail_on=["ttft_ms=10"]).exit_code == 0  # only the metrics asked for are gated
    assert gate([slower], fail_on=["decode_tokens_per_s=10"]).exit_code == 1  # fewer tokens/s is worse
    assert gate([slower], fail_on_regression=60, fail_on=["tpot_ms=10"]).exit_code == 1  # the item wins for TPOT
    assert gate([slower], fail_on_regression=10, stat="p90").exit_code == 1


def test_faster_is_never_a_regression():
    v = gate([_comp(tpot_ms=10.0, ttft_ms=50.0)], fail_on_regression=0)
    assert not v.regression and v.exit_code == 0


def test_an_a_a_pair_passes_every_gate(same):
    for kw in ({"fail_on_regression": 10}, {"fail_on_regression": 5, "stat": "p50"}, {"fail_on": ["tpot_ms=5"]}):
        v = gate([same], **kw)
        assert not v.regression and v.exit_code == 0 and v.mdc_error is None, kw


def test_no_gate_asked_for_passes_and_checks_nothing(slower):
    v = gate([slower])
    assert v.checks == [[]] and v.exit_code == 0 and v.blind == []


def test_one_failing_comparison_of_several_fails_the_gate(same, slower):
    v = gate([same, slower, same], fail_on_regression=10)
    assert v.exit_code == 1 and len(v.checks) == 3
    assert [any(c.regression for c in k) for k in v.checks] == [False, True, False]


def test_require_mdc_smaller_than_the_run_could_see_fails_by_name(same):
    mdc = {m: same.detectable_pct(m) for m in GATED_BY_DEFAULT}
    assert all(0 < x < 20 for x in mdc.values()), mdc
    tiny = min(mdc.values()) / 10
    v = gate([same], require_mdc=tiny)
    assert v.exit_code == 1 and not v.regression  # a pass it can't vouch for fails
    assert v.mdc_error is not None and v.mdc_error.startswith(f"--require-mdc {tiny:g}:")
    for metric, pct in mdc.items():
        assert f"{metric} mean {pct:.1f}%" in v.mdc_error, (metric, v.mdc_error)
    assert {m for m, _, _ in v.short} == set(GATED_BY_DEFAULT)
    # just above the worst metric's MDC: every metric could have seen it
    v = gate([same], require_mdc=max(mdc.values()) + 0.5)
    assert v.exit_code == 0 and v.mdc_error is None and v.short == []
    # between the smallest and the largest: only the metrics that could not see it are named
    mid = sorted(mdc.values())[1] - 1e-6
    v = gate([same], require_mdc=mid)
    named = {m for m, _, _ in v.short}
    assert named == {m for m, x in mdc.items() if x > mid} and 0 < len(named) < 3 and v.exit_code == 1
    # with gates given, --require-mdc looks at the gated metrics only
    v = gate([same], fail_on=["tpot_ms=50"], require_mdc=tiny)
    assert [m for m, _, _ in v.short] == ["tpot_ms"] and "ttft_ms" not in v.mdc_error
    # on the gate's statistic
    v = gate([same], fail_on_regression=50, stat="p90", require_mdc=tiny)
    assert v.short and {st for _, st, _ in v.short} == {"p90"} and "p90" in v.mdc_error


MDC_ERROR = """
from llmbench.analysis.compare import compare_runs
from llmbench.analysis.gate import gate
from tests.helpers import synthetic_run
c = compare_runs(synthetic_run(n=20, noise=0.05, seed=1), synthetic_run(n=20, noise=0.05, seed=3))
print(gate([c], require_mdc=0.01).mdc_error)
"""


def test_a_threshold_below_what_the_run_could_see_is_blind_and_said_so(same):
    tpot = same.detectable_pct("tpot_ms")
    v = gate([same], fail_on=[f"tpot_ms={tpot / 4:g}"])
    assert len(v.blind) == 1 and v.blind[0].startswith("BLIND:") and "tpot_ms mean" in v.blind[0]
    assert f"{tpot:.1f}%" in v.blind[0]
    assert v.exit_code == 0  # said loudly, but only --require-mdc fails on it
    assert gate([same], fail_on=[f"tpot_ms={tpot * 4:g}"]).blind == []


@pytest.mark.parametrize(
    "kw",
    [
        {"fail_on_regression": math.nan},
        {"fail_on_regression": math.inf},
        {"fail_on_regression": -1.0},
        {"fail_on": ["tpot_ms=nan"]},
        {"fail_on": ["tpot_ms=-5"]},
        {"fail_on": ["ttft_ms=inf"]},
        {"fail_on": ["tpot_ms"]},  # no =PCT
        {"fail_on": ["tpot_ms=fast"]},
        {"fail_on": ["latency=5"]},  # no such metric
        {"fail_on": ["output_tokens=5"]},  # neither better nor worse: not gated
        {"fail_on_regression": 5, "stat": "p99"},
    ],
    ids=str,
)
def test_a_gate_that_could_never_fail_or_can_not_be_applied_is_refused(slower, kw):
    with pytest.raises(UserError) as e:
        gate([slower], **kw)
    assert "--fail-on" in str(e.value) or "statistic" in str(e.value)


def test_a_threshold_of_zero_is_allowed(slower, same):
    assert gate([slower], fail_on_regression=0).exit_code == 1
    assert gate([same], fail_on_regression=0).exit_code == 0


@pytest.mark.parametrize("value", [math.nan, -1.0, 0.0], ids=str)
def test_gate_refuses_a_require_mdc_that_could_never_pass_or_never_fail(same, value):
    with pytest.raises(UserError, match="--require-mdc"):
        gate([same], require_mdc=value)


def test_the_cli_exits_with_the_verdicts_code(cli, tmp_path):
    base, head, again = tmp_path / "base.json", tmp_path / "head.json", tmp_path / "again.json"
    save_run(synthetic_run(n=20, noise=0.05, seed=1), base)
    save_run(synthetic_run(n=20, noise=0.05, seed=2, tpot_ms=30.0), head)
    save_run(synthetic_run(n=20, noise=0.05, seed=3), again)
    assert cli("compare", base, head, "--fail-on-regression", "10").returncode == 1
    assert cli("compare", base, head, "--fail-on-regression", "60").returncode == 0
    assert cli("compare", base, again, "--fail-on-regression", "10").returncode == 0
    r = cli("compare", base, again, "--require-mdc", "0.001")
    assert r.returncode == 1 and "llmbench: error: --require-mdc 0.001: this run could not have seen" in r.stderr


# --- trend --check's budget --------------------------------------------------------------------------------------


def _trend(*points: tuple[float, float | None, float | None]) -> tr.Trend:
    pts = [tr.Point(result_id=i, created_at=f"2026-11-01T0{i}:00:00Z", commit=f"{i:040x}", label=f"h{i}", value=v,
                    ci_low=lo, ci_high=hi, anchor="v1") for i, (v, lo, hi) in enumerate(points)]  # fmt: skip
    return tr.Trend(metric="tpot_ms", stat="p50", unit="% vs anchor", points=pts, changes=[], anchor="v1")


def test_budget_verdict_over_the_budget_fails_and_within_passes():
    over = BudgetVerdict(tr.check(_trend((1.0, 0.0, 2.0), (12.0, 9.0, 15.0)), 5.0), 5.0, "v1")
    assert over.exit_code == 1 and over.problems
    assert over.lines == [f"llmbench: over budget: {p}" for p in over.problems] and "h1" in over.lines[0]
    within = BudgetVerdict(tr.check(_trend((1.0, 0.0, 2.0), (2.0, -1.0, 5.0)), 5.0), 5.0, "v1")
    assert within.exit_code == 0 and within.lines == ["within the 5% budget against v1"]
    # over the budget on its value, not significantly: its interval reaches under it
    unsure = BudgetVerdict(tr.check(_trend((7.0, 3.0, 11.0)), 5.0), 5.0, "v1")
    assert unsure.exit_code == 0
    # a larger budget lets the same series through
    assert BudgetVerdict(tr.check(_trend((12.0, 9.0, 15.0)), 20.0), 20.0, "v1").exit_code == 0
    assert BudgetVerdict([], 2.5, "v1").lines == ["within the 2.5% budget against v1"]


@pytest.mark.parametrize("budget", [math.nan, math.inf, -1.0], ids=str)
def test_a_budget_that_could_never_fail_is_refused(budget):
    with pytest.raises(UserError, match="--budget"):
        tr.check(_trend((12.0, 9.0, 15.0)), budget)
