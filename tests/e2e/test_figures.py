"""Every figure `report` draws reads at a glance: no tick label, legend entry or title over another (matplotlib's
own text extents after drawing), reference lines that mean what their legend says, short names, units on every
axis; and a screenshot of each report kind, taken in headless Chromium, kept in test-artifacts/.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_figures.py."""

from __future__ import annotations

import pytest

from llmbench.present import html as report
from llmbench.results.storage import save_run
from tests.helpers import synthetic_run
from tests.unit.test_figures import ARTIFACTS, CHROMIUM, _trend, load_record, rated_load


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_each_report_kind_in_chromium_is_kept_as_a_screenshot(tmp_path):
    from playwright.sync_api import sync_playwright

    a, b = tmp_path / "base.json", tmp_path / "head.json"
    save_run(synthetic_run(n=30, tokens=24, noise=0.2, seed=1), a)
    save_run(synthetic_run(n=30, tokens=24, noise=0.2, seed=2, tpot_ms=26.0), b)
    from llmbench.results.storage import load_run

    rated = rated_load()
    pages = {
        "run": report.build_report([("base", load_run(a))]),
        "compare": report.build_report([("base", load_run(a)), ("head", load_run(b))]),
        "load": report.build_load_report([("load", load_record([0.2, 0.5, 1, 2, 4, 8], 3.0))]),
        "load-rates": report.build_load_report([("load", rated[0])], {"load": rated[1]}),
        "trend": report.build_trend_report(_trend(), budget=5.0),
    }
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu",
                                    "--disable-background-networking", "--disable-component-update"])  # fmt: skip
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for kind, html in pages.items():
            path = tmp_path / f"{kind}.html"
            path.write_text(html, encoding="utf-8")
            page.goto(path.as_uri())
            page.wait_for_load_state("networkidle")
            assert page.locator("svg").count() >= 1
            shot = ARTIFACTS / f"report-{kind}.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 10_000
        browser.close()
    assert errors == []


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_the_reader_timeline_in_chromium_has_no_text_over_text(tmp_path):
    """The report's reader figure as Chromium lays it out: no two of its text boxes intersect (the unit test asks
    matplotlib; this asks the browser that shows it), and a screenshot is kept."""
    from playwright.sync_api import sync_playwright

    from tests.unit.test_shape_compare import _run

    page_html = report.build_report([("bursts", _run([[3000, 3000], [], [4000], [], [3000], [], [], []]))])
    assert "arrived vs read" in page_html
    path = tmp_path / "reader.html"
    path.write_text(page_html, encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(path.as_uri())
        overlaps = text_overlaps(page, "arrived vs read")
        page.screenshot(path=str(ARTIFACTS / "report-reader.png"), full_page=True)
        browser.close()
    count, pairs = overlaps
    assert count > 20 and pairs == []  # titles, tick labels, axis labels, legends: all apart


def text_overlaps(page, marker: str) -> tuple[int, list]:
    """In the page Chromium laid out, the svg whose text holds ``marker``: its count of text boxes and the pairs of
    them that intersect."""
    return page.evaluate("""(marker) => {
            const svg = [...document.querySelectorAll('svg')].find(s => s.textContent.includes(marker));
            const boxes = [...svg.querySelectorAll('text')].map(t => t.getBoundingClientRect())
                .filter(b => b.width > 0 && b.height > 0);
            const out = [];
            for (let i = 0; i < boxes.length; i++) for (let j = i + 1; j < boxes.length; j++) {
                const a = boxes[i], b = boxes[j];
                const w = Math.min(a.right, b.right) - Math.max(a.left, b.left);
                const h = Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top);
                if (w > 1 && h > 1) out.push([i, j]);
            }
            return [boxes.length, out];
        }""", marker)  # fmt: skip


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_each_load_rate_over_its_run_in_chromium_has_no_text_over_text(tmp_path):
    """The load report's per-rate panels (issue 63: window, probes, stop) as Chromium lays them out: no two text
    boxes intersect, and a screenshot is kept."""
    from playwright.sync_api import sync_playwright

    record, runs = rated_load()
    path = tmp_path / "load-rates.html"
    path.write_text(report.build_load_report([("load", record)], {"load": runs}), encoding="utf-8")
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        page.goto(path.as_uri())
        count, pairs = text_overlaps(page, "stopped at 2.5 s")
        page.screenshot(path=str(ARTIFACTS / "report-load-rates.png"), full_page=True)
        browser.close()
    assert count > 30 and pairs == []
