"""The docs: the front door stays short and its links resolve, the site builds with no warning, and the Python API
example on docs/api.md keeps working as written."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"


@pytest.mark.slow
def test_the_api_example_on_the_docs_runs(tmp_path):
    """docs/api.md's Python API example, as a script: it must keep working as written."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    start = text.index("```python\nimport llmbench\nimport pandas as pd")
    code = text[start + len("```python\n") : text.index("```", start + 10)]
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "regressions:" in r.stdout and "tpot_ms mean" in r.stdout
    assert list(tmp_path.iterdir()) == []  # it wrote nothing


NO_MKDOCS = importlib.util.find_spec("mkdocs") is None


@pytest.mark.skipif(NO_MKDOCS, reason="mkdocs is not installed (pip install -e '.[dev]' brings mkdocs-material)")
def test_the_site_builds_strict(tmp_path):
    """Every page in the nav, no broken link or anchor, no warning (mkdocs.yml: strict, validation)."""
    site = tmp_path / "site"
    command = [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(ROOT / "mkdocs.yml"), "-d", str(site)]
    r = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert (site / "index.html").is_file() and (site / "api" / "index.html").is_file()


def test_the_readme_is_a_front_door():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= 260, f"README.md is {lines} lines: move the detail to docs/"


def _relative_links(markdown: str) -> list[str]:
    """The targets of [text](target) links that are not URLs or in-page anchors (code blocks left out)."""
    prose = re.sub(r"^```.*?^```", "", markdown, flags=re.S | re.M)
    targets = re.findall(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)", prose)
    return [t for t in targets if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I) and not t.startswith("#")]


def test_every_relative_link_in_the_readme_resolves():
    links = _relative_links(README.read_text(encoding="utf-8"))
    assert links, "no relative link found: the check is broken"
    missing = [t for t in links if not (ROOT / t.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_the_link_check_sees_links_and_skips_urls_and_code():
    text = "[a](docs/x.md) [b](https://example.com) [c](#top) [d](y.md#part)\n```\n[e](in/code.md)\n```\n"
    assert _relative_links(text) == ["docs/x.md", "y.md#part"]
