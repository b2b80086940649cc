"""The docs: the front door stays short and its links resolve, the site builds with no warning, and the Python API
example on docs/api.md keeps working as written."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"


NO_MKDOCS = importlib.util.find_spec("mkdocs") is None


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
