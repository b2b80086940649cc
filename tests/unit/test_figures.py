"""Every figure `report` draws reads at a glance: no tick label, legend entry or title over another (matplotlib's
own text extents after drawing), reference lines that mean what their legend says, short names, units on every
axis; and a screenshot of each report kind, taken in headless Chromium, kept in test-artifacts/."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest

from llmbench.analysis.changepoints import detect
from llmbench.history.trend import Point, Trend
from llmbench.present import html as report
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture
def figures(monkeypatch):
    """Every figure the report module saves, with its layout problems (text over text) and its axes."""
    seen: list[dict] = []

    def xlabel(fig, ax) -> str:  # a twin axis (ax.twinx()) shares the x axis, and its label, of its host
        return ax.get_xlabel() or next((o.get_xlabel() for o in fig.get_axes()
                                        if o is not ax and ax.get_shared_x_axes().joined(ax, o)), "")  # fmt: skip

    def hook(fig):
        seen.append({"problems": report.layout_problems(fig), "axes": fig.get_axes(),
                     "labels": [(xlabel(fig, ax), ax.get_ylabel()) for ax in fig.get_axes()]})  # fmt: skip

    monkeypatch.setattr(report, "FIGURE_HOOK", hook)
    return seen


def _assert_readable(seen: list[dict]) -> None:
    assert seen, "no figure was drawn"
    problems = [p for f in seen for p in f["problems"]]
    assert problems == [], problems
    for f in seen:
        for xlabel, ylabel in f["labels"]:
            assert xlabel and ylabel, f"an axis without a label: {f['labels']}"


def load_record(rates: list[float], capacity: float, name: str = "load") -> dict:
    """A load test of a server that keeps up to ``capacity`` requests/s and then falls behind: its numbers are
    the ground truth for what the figure must show."""
    rows = []
    for r in rates:
        over = max(0.0, r / capacity - 1)
        achieved = min(r, capacity) * 0.98
        rows.append({"offered_rate_rps": r, "achieved_rate_rps": achieved, "goodput_rps": achieved / (1 + 3 * over),
                     "ttft_ms": {"p50": 80 * (1 + 5 * over), "p90": 120 * (1 + 8 * over), "p99": 160 * (1 + 12 * over)},
                     "tpot_ms": {"p50": 40 * (1 + over), "p90": 45 * (1 + 1.5 * over), "p99": 50 * (1 + 2 * over)},
                     "run_file": f"rate-{r:g}.json"})  # fmt: skip
    held = [r for r in rates if r <= capacity]
    return {"rates": rows, "saturation": {"rate_rps": max(held) if held else None,
                                          "first_failing_above_rps": min((r for r in rates if r > capacity),
                                                                         default=None)},
            "slos": [{"metric": "ttft_ms", "limit": 400.0, "text": "ttft_ms:p90=400"},
                     {"metric": "tpot_ms", "limit": 100.0, "text": "tpot_ms:p90=100"}],
            "min_attainment": 0.9, "complete": True}  # fmt: skip


def test_a_load_sweep_reads_its_rates_and_its_offered_line_is_the_diagonal(figures):
    rates = [0.2, 0.5, 1.0, 2.0, 4.0, 8.0]  # from well below to well above capacity
    searched = [1.0, 2.0, 4.0, 8.0, 5.66, 6.73, 6.17, 6.45]  # an auto search's bisection: close rates
    report.build_load_report([("sweep", load_record(rates, 3.0))])
    report.build_load_report([("auto", load_record(searched, 6.3)), ("other", load_record(searched, 5.0))])
    _assert_readable(figures)
    for f, used in zip(figures, (rates, searched), strict=True):
        goodput = f["axes"][2]
        offered = next(line for line in goodput.get_lines() if line.get_label() == "offered (y = x)")
        xy = offered.get_xydata()
        assert np.allclose(xy[:, 0], xy[:, 1]) and set(np.round(xy[:, 0], 6)) == set(np.round(used, 6))
        ticks = [t.get_text() for t in f["axes"][0].get_xticklabels() if t.get_visible()]
        assert "2" in ticks and "8" in ticks and all("10" not in t for t in ticks)  # the rates, not 2x10^0
        labels = [line.get_label() for ax in f["axes"] for line in ax.get_lines()]
        assert any(label.startswith("saturation") for label in labels)
        assert "SLO: ttft_ms:p90=400" in labels


def test_run_and_compare_reports_read_at_a_glance(figures, cli, tmp_path):
    a, b = tmp_path / "quiet-run.json", tmp_path / "busy-run.json"
    save_run(synthetic_run(n=30, tokens=24, noise=0.2, seed=1), a)
    save_run(synthetic_run(n=30, tokens=24, noise=0.2, seed=2, tpot_ms=26.0), b)
    out = tmp_path / "report.html"
    assert cli("report", a, b, "-o", out).returncode == 0
    _assert_readable(figures)
    text = out.read_text(encoding="utf-8")
    assert "quiet-run" in text and str(tmp_path) not in text  # short names, never the temporary path


def _trend(n: int = 40) -> Trend:
    rng = np.random.default_rng(0)
    values = [rng.normal(0, 0.5) + (2.5 if i >= 15 else 0) + (0.3 * (i - 30) if i >= 30 else 0) for i in range(n)]
    commits = [hashlib.sha1(str(i).encode()).hexdigest() for i in range(n)]
    points = [Point(i, f"2026-11-{1 + i % 28:02d}T00:00", c, f"c{i}", v, v - 1, v + 1)
              for i, (c, v) in enumerate(zip(commits, values, strict=True))]  # fmt: skip
    return Trend("tpot_ms", "p50", "% vs v1", points, detect(values, [c[:12] for c in commits]), anchor="v1")


def test_the_trend_page_reads_at_a_glance(figures):
    page = report.build_trend_report(_trend(), budget=5.0)
    _assert_readable(figures)
    assert "Change points" in page


def test_a_workload_with_shared_prefixes_draws_cold_against_warm(figures, cli, tmp_path):
    run = synthetic_run(n=24, tokens=8, noise=0.2, seed=3)
    for i, r in enumerate(run.requests):  # the first of 4 groups is cold; warm ones find 80% of the prompt cached
        r.cold = i < 4
        r.cached_tokens = 0 if r.cold else 24
    path = tmp_path / "prefixes.json"
    save_run(run, path)
    out = tmp_path / "report.html"
    assert cli("report", path, "-o", out).returncode == 0
    _assert_readable(figures)
    cold_warm = next(f for f in figures if any("cold vs warm" in ax.get_title() for ax in f["axes"]))
    ticks = [t.get_text() for t in cold_warm["axes"][0].get_xticklabels()]
    assert ticks == ["cold (n=4)", "warm (n=20)"]


def test_the_reader_figure_shades_each_stall_and_never_reads_ahead_of_what_arrived(figures):
    from llmbench.results.reader import Pace
    from tests.unit.test_shape_compare import _run

    run = _run([[3000, 3000], [], [4000], [], [3000], [], [], []])  # three answers the reader waits on
    svg = report.reader_svg(run)
    assert svg is not None and svg.startswith("<svg")
    _assert_readable(figures)
    [fig] = figures
    panels = [ax for ax in fig["axes"] if ax.get_title().startswith("prompt")]
    assert len(panels) == 6  # the six requests the reader waited on longest
    assert panels[0].get_title() == "prompt 0 repeat 0: 2 stalls"  # most stall time first
    shaded = sum(len(ax.patches) for ax in panels)
    assert shaded == sum(r.reader_stalls for r in run.requests) == 4  # one span a stall
    for r in run.requests[:3]:
        c = report.reader_curves(r, Pace())
        t_read, read = c["read"]
        t_arr, arrived = c["arrived"]
        for t, n in zip(t_read, read, strict=True):  # at every corner of the read line: never ahead of arrival
            got = arrived[np.searchsorted(t_arr, t + 1e-9, side="right") - 1] if t >= t_arr[0] else 0
            assert n <= got + 1e-6
        assert read[-1] == arrived[-1]  # the reader ends on the last character
    assert report.reader_svg(synthetic_run(n=2, tokens=1).model_copy(update={"requests": []})) is None


def rated_load() -> tuple[dict, dict]:
    """A load.json of three rates with their runs and probes: 2/s calm, 10/s with a cold start its steady window
    cuts, 40/s stopped past saturation (issue 63)."""
    from llmbench.drivers import load as ld
    from tests.unit.test_load import LATE, STEADY, _rate_run

    spec = ld.LoadSpec(rates=[2.0, 10.0, 40.0], slos=[ld.Slo("ttft_ms", 90, 1000.0)])
    runs, rows = {}, []
    for rate, kinds in ((2.0, [STEADY] * 40), (10.0, [LATE] * 60 + [STEADY] * 260), (40.0, [LATE] * 120)):
        run, probes = _rate_run(rate, kinds), _rate_run(0.5, [STEADY] * 10)
        row = {**ld.rate_figures(run, spec), "probes": ld.probe_figures(probes, spec), "stopped": None}
        if rate == 40.0:
            row["stopped"] = {"reason": "queueing: the requests in flight rose", "at_s": 2.5, "schedule_s": 3.0,
                              "unfinished": 5, "unsent": 10, "rule": {}}  # fmt: skip
        runs[rate] = (run, probes)
        rows.append(row)
    return {**load_record([2.0, 10.0, 40.0], 20.0), "rates": rows, "probe_rate_rps": 0.5, "fluidity_share": 0.99,
            **ld.newcomer_capacity(rows)}, runs  # fmt: skip


def test_each_rate_over_its_run_shows_its_window_its_probes_and_where_it_was_stopped(figures):
    """Three rates of a load test drawn over their runs: the calm one's steady window shaded, the probes apart,
    and the saturated one's stop line with its reason (issue 63)."""
    record, runs = rated_load()
    report.build_load_report([("load", record)], {"load": runs})
    _assert_readable(figures)
    panels = [ax for ax in figures[-1]["axes"] if ax.get_title()]
    assert [ax.get_title().split(":")[0] for ax in panels] == ["2/s", "10/s", "40/s"]
    labels = {line.get_label() for ax in panels for line in ax.get_lines()} | {
        p.get_label() for ax in panels for p in ax.patches}  # fmt: skip
    assert {"TTFT, load", "TTFT, probe", "stopped at 2.5 s: queueing"} <= labels
    assert any(label.startswith("steady window (") for label in labels)
