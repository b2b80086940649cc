"""compare and the gates on the shape of the wait: differences in the metric's unit (a base of 0 has no ratio),
their Student t intervals checked by hand, thresholds that refuse what would switch a gate off, runs recorded before
the shape that get it when read, and a reader's pace other than the default."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from llmbench.analysis.compare import compare_runs
from llmbench.analysis.gate import gate
from llmbench.analysis.shape import shape_rows
from llmbench.analysis.variance import t_quantile
from llmbench.results.metrics import ids_sha256, request_result, summarize
from llmbench.results.storage import load_run, save_run
from tests.helpers import synthetic_run

MS = 1_000_000
TEXT = "The sky looks blue because air scatters short waves of sunlight more than long ones, all day long."


def _run(pauses: list[list[float]], tokens: int = 12, step_ms: float = 20.0, reader: dict | None = None):
    """A run of one request per entry of ``pauses``: ``tokens`` tokens every ``step_ms``, plus each listed pause
    (ms) before the token of that position (pause k before token k + 2). The text is the same real sentence."""
    run = synthetic_run(n=len(pauses), tokens=tokens)
    run.config.reader = reader
    out = []
    for i, extra in enumerate(pauses):
        t, stamps = 100.0, []
        for k in range(tokens):
            if k >= 2 and k - 2 < len(extra):
                t += extra[k - 2]
            stamps.append(int(t * MS))
            t += step_ms
        ends = [round(len(TEXT) * (k + 1) / tokens) for k in range(tokens)]
        out.append(request_result(prompt_index=i, repeat=0, start_ns=0, tokenized_ns=MS, stamps_ns=stamps,
                                  prompt_tokens=30, output_sha256=ids_sha256(list(range(tokens))), output_text=TEXT,
                                  text_offsets=ends))  # fmt: skip
    run.requests = out
    run.summary = summarize(out)
    return run


def test_a_zero_base_gets_a_difference_and_a_student_t_interval_checked_by_hand():
    base = _run([[] for _ in range(8)])  # 20 ms a token: far faster than a reader, no wait at all
    pauses = [[0], [3000], [0], [4000], [3000], [0], [5000], [3000]]  # five answers the reader waits on
    head = _run(pauses)
    row = next(r for r in compare_runs(base, head).shape if r.metric == "reader_stalls")
    b = np.array([r.reader_stalls for r in base.requests], dtype=float)
    n = np.array([r.reader_stalls for r in head.requests], dtype=float)
    assert b.sum() == 0 and row.base == 0 and n.sum() == 5  # no ratio exists to a base of 0: the row is a difference
    d = n - b
    half = t_quantile(7) * d.std(ddof=1) / math.sqrt(8)
    assert row.difference == pytest.approx(d.mean()) and row.unit == "stalls" and row.n_base == 8
    assert (row.ci_low, row.ci_high) == pytest.approx((d.mean() - half, d.mean() + half))
    assert row.verdict == "(information)"  # a row nobody gated says no word


def test_an_a_a_comparison_with_no_stall_anywhere_is_no_change_and_passes_every_shape_gate():
    base, head = _run([[] for _ in range(8)]), _run([[] for _ in range(8)])
    comp = compare_runs(base, head)
    stall = next(r for r in comp.shape if r.metric == "reader_stall_ms")
    assert (stall.difference, stall.ci_low, stall.ci_high, stall.significant) == (0, 0, 0, False)
    checks = comp.checks(fail_on={"reader_stall_ms": 0, "reader_stalls": 0, "fluidity": 0, "andes_qoe": 0})
    assert len(checks) == 4 and not any(c.regression for c in checks)
    assert all(c.unit != "%" and math.isnan(c.change_pct) for c in checks)


def test_the_stall_gate_fails_a_head_past_its_threshold_and_passes_one_within_it():
    base = _run([[] for _ in range(8)])
    head = _run([[3000, 3000] for _ in range(8)])  # two pauses of 3 s in every answer: the reader catches up
    comp = compare_runs(base, head)
    [check] = comp.gate(fail_on={"reader_stalls": 1})
    assert check.regression and check.difference == pytest.approx(2.0) and check.unit == "stalls"
    assert not compare_runs(base, head).gate(fail_on={"reader_stalls": 3})  # worse by 2: within 3
    # the stall time grew by about 2 x (3,000 ms less what was left to read): past 3,000 ms, not past 6,000
    grown = next(r for r in comp.shape if r.metric == "reader_stall_ms").difference
    assert 3000 < grown < 6000
    assert compare_runs(base, head).gate(fail_on={"reader_stall_ms": 3000})
    assert not compare_runs(base, head).gate(fail_on={"reader_stall_ms": 6000})
    # QoE and fluidity fall (higher is better): worse by a positive amount
    row = next(r for r in comp.shape if r.metric == "fluidity")
    assert row.difference < 0 and row.worse_by() > 0


def test_too_few_pairs_give_no_interval_and_the_gate_says_it_was_blind():
    base, head = _run([[] for _ in range(3)]), _run([[3000] for _ in range(3)])
    comp = compare_runs(base, head)
    row = next(r for r in comp.shape if r.metric == "reader_stalls")
    assert row.too_few == "too few pairs: n = 3; at least 7 needed" and math.isnan(row.ci_low)
    verdict = gate([comp], fail_on=["reader_stalls=0"])
    assert not verdict.regression and any("BLIND" in b and "reader_stalls" in b for b in verdict.blind)


def test_unpaired_runs_get_welchs_interval():
    base, head = _run([[] for _ in range(8)]), _run([[3000] for _ in range(8)])
    head.config.prompt_sha256 = "1" * 64  # another prompt file: no pairs
    [row] = [r for r in shape_rows(base, head, paired=False) if r.metric == "reader_stalls"]
    assert not row.paired and row.difference == pytest.approx(1.0)
    assert row.ci_low == row.ci_high == pytest.approx(1.0)  # every request alike on each side: no spread


@pytest.mark.parametrize("item", ["reader_stall_ms=nan", "reader_stall_ms=-1", "reader_stalls=inf",
                                  "andes_qoe=2", "fluidity=-0.1", "reader_stall_ms=x"])  # fmt: skip
def test_a_shape_threshold_that_would_switch_the_gate_off_is_one_line_exit_2(cli, tmp_path, item):
    base = _run([[] for _ in range(8)])
    save_run(base, p := tmp_path / "a.json")
    r = cli("compare", p, p, "--fail-on", item)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and item.split("=")[0] in r.stderr, r.stderr


def test_compare_json_carries_the_shape_rows_and_nulls_for_no_interval(cli, tmp_path):
    save_run(_run([[] for _ in range(3)]), a := tmp_path / "a.json")
    save_run(_run([[3000] for _ in range(3)]), b := tmp_path / "b.json")
    r = cli("compare", a, b, "--format", "json")
    assert r.returncode == 0, r.stderr
    [comp] = json.loads(r.stdout)  # one comparison per NEW file
    rows = {x["metric"]: x for x in comp["shape"]}
    assert rows["reader_stalls"]["ci_low"] is None and rows["reader_stalls"]["unit"] == "stalls"
    r = cli("compare", a, b)
    assert "the shape of the wait (mean a request; new - base): reader_stall_ms 0 ->" in r.stdout


def _without_shape(path):
    """The run file as llmbench wrote it before issue 46: no offsets, no shape, no config.reader."""
    data = json.loads(path.read_text(encoding="utf-8"))
    for r in data["requests"]:
        for k in ("text_offsets", "first_visible_ms", "reader_stall_ms", "reader_stalls",
                  "reader_longest_stall_ms", "andes_qoe", "fluidity"):  # fmt: skip
            r.pop(k, None)
    for k in ("reader_stall_ms", "reader_stalls", "andes_qoe", "fluidity"):
        data["summary"].pop(k, None)
    data["config"].pop("reader", None)
    path.write_text(json.dumps(data), encoding="utf-8")


def test_a_run_recorded_before_the_shape_gets_it_when_read(tmp_path):
    run = _run([[3000] for _ in range(8)])
    save_run(run, p := tmp_path / "old.json")
    _without_shape(p)
    old = load_run(p)
    # its text spread evenly over its stamps: here the offsets were even too, so the same figures
    assert [r.reader_stalls for r in old.requests] == [r.reader_stalls for r in run.requests]
    assert old.requests[0].text_offsets is None and old.summary.reader_stalls == run.summary.reader_stalls
    fast = load_run(p, scalars_only=True)  # compare's reader: the stamps are needed, so it reads the run whole
    assert [r.andes_qoe for r in fast.requests] == [r.andes_qoe for r in run.requests]
    assert compare_runs(fast, load_run(p, scalars_only=True)).shape  # rows from two old runs


def test_a_reader_faster_than_the_stream_waits_and_its_pace_is_recorded():
    from llmbench.options import RunOptions
    from llmbench.results.metrics import reshape

    assert RunOptions().reader() is None  # the default pace: recorded as None, what older runs read as
    opts = RunOptions(reading_cps=400.0)
    assert opts.reader() == {"words_per_minute": 238.0, "chars_per_s": 400.0}
    run = _run([[] for _ in range(2)], step_ms=150.0)  # a token every 150 ms: 6.7 tokens/s
    slow = run.requests[0]
    assert slow.reader_stalls == 0  # the default reader (~4 words/s) never catches up with ~8 characters a token
    fast = reshape(slow.model_copy(deep=True), opts.reader())
    # at 400 characters/s a token's 8 characters take 20 ms: the reader waits ~130 ms for each of 11 tokens
    assert fast.reader_stalls == 11 and fast.reader_stall_ms == pytest.approx(11 * (150 - 1000 * 8.25 / 400), rel=0.1)


def test_the_default_pace_is_written_and_reads_as_an_older_run_recorded_it(tmp_path):
    from llmbench.results.schema import Run

    new = synthetic_run(n=3, tokens=5)
    assert new.config.reader is None  # in memory: the default pace
    path = tmp_path / "new.json"
    save_run(new, path)
    written = json.loads(path.read_text())["config"]["reader"]
    assert written == {"words_per_minute": 238.0, "chars_per_s": None}  # on disk: the value used, never null
    assert load_run(path).config.reader is None and load_run(path, scalars_only=True).config.reader is None
    old = json.loads(path.read_text())
    old["config"]["reader"] = None  # a run from before the pace could be set
    assert Run.model_validate(old).config.reader is None
    assert not compare_runs(load_run(path), Run.model_validate(old)).config_diffs  # the same setup
    other = json.loads(path.read_text())
    other["config"]["reader"] = {"words_per_minute": 300.0, "chars_per_s": None}
    assert Run.model_validate(other).config.reader == {"words_per_minute": 300.0, "chars_per_s": None}


@pytest.mark.parametrize("flag,value", [("--reading-wpm", "0"), ("--reading-wpm", "nan"), ("--reading-cps", "-1"),
                                        ("--reading-cps", "1e9")])  # fmt: skip
def test_a_reading_pace_out_of_bounds_is_one_line_exit_2(cli, tmp_path, flag, value):
    prompts = tmp_path / "p.txt"
    prompts.write_text("hello\n", encoding="utf-8")
    r = cli("run", prompts, "--weights", "random", flag, value, "-o", tmp_path / "r.json")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and flag in r.stderr, r.stderr
    assert not (tmp_path / "r.json").exists()


def test_two_tokenizers_differ_in_tokens_per_second_and_agree_in_characters_per_second():
    """The same answer at the same pace of text, cut in 12 tokens of ~8 characters by one server and 24 of ~4 by
    another: decode tok/s doubles, decode chars/s (and words/s) does not change."""
    coarse = _run([[] for _ in range(8)], tokens=12, step_ms=40.0)
    fine = _run([[] for _ in range(8)], tokens=24, step_ms=20.0)
    for a, b in zip(coarse.requests, fine.requests, strict=True):
        assert a.decode_chars_per_s == pytest.approx(b.decode_chars_per_s, rel=0.06)  # 11 vs 23 gaps, rounding
        assert a.decode_words_per_s == pytest.approx(b.decode_words_per_s, rel=0.06)
    comp = compare_runs(coarse, fine)
    tokens = next(r for r in comp.rows if r.metric == "decode_tokens_per_s" and r.stat == "p50")
    chars = next(r for r in comp.rows if r.metric == "decode_chars_per_s" and r.stat == "p50")
    assert tokens.change_pct == pytest.approx(100, abs=1) and abs(chars.change_pct) < 6
    assert coarse.summary.decode_chars_per_s is not None and coarse.summary.decode_words_per_s.n == 8
