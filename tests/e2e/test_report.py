"""report, export and show: exports round-trip through pandas; the report renders offline in real Chromium.

This file: the part that needs real worker processes, real-size models, an engine or the browser (tests/e2e); the
rest is in tests/unit/test_report.py."""

import io

import pytest

from tests.unit.test_report import (
    ARTIFACTS,
    CHROMIUM,
    runs,  # noqa: F401 (fixtures)
)


@pytest.mark.browser
@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (.ci/run installs it)")
def test_report_renders_in_headless_chromium_without_errors_or_network(cli, runs, tmp_path):
    from playwright.sync_api import sync_playwright

    out = tmp_path / "report.html"
    assert cli("report", *runs, "-o", out).returncode == 0
    errors, requests = [], []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update"],
        )
        page = browser.new_page(viewport={"width": 1100, "height": 1400})
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(out.as_uri())
        page.wait_for_load_state("networkidle")
        # every chart the file holds is drawn (7: the unit test names them), none fails to parse
        assert page.locator("svg").count() == out.read_text().count("<svg") == 7
        ARTIFACTS.mkdir(exist_ok=True)
        png = page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
        browser.close()
    assert errors == []
    assert requests == [out.as_uri()]  # the file itself, nothing fetched
    import matplotlib.image

    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[0] > 1400 and pixels[..., :3].std() > 0.05  # tall and not blank
