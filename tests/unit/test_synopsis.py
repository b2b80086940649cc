"""Every command's synopsis in the docs is generated from its spec (llmbench.spec.synopsis), and no hand-written
usage line elsewhere in the docs spells a default: a default changed in the spec reaches the docs by
regenerating them, with no other edit (issue 60)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from llmbench.spec import option_of
from llmbench.spec.synopsis import MARKER, command_specs, rewrite, synopsis, term

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_the_docs_synopses_are_the_generated_ones():
    marked = {m[1] for p in DOCS.glob("*.md") for m in MARKER.finditer(p.read_text(encoding="utf-8"))}
    assert marked == set(command_specs()) - {"bisect-step"}, marked  # every command with a spec has its doc's
    for path in DOCS.glob("*.md"):
        text = path.read_text(encoding="utf-8")
        assert rewrite(text) == text, f"{path.name}: run python -m llmbench.spec.synopsis"


def test_no_hand_written_usage_line_spells_a_default():
    outside = "".join(MARKER.sub("", p.read_text(encoding="utf-8")) for p in DOCS.glob("*.md") if p.name != "config.md")
    blocks = "\n".join(re.findall(r"```(?:text|bash)\n(.*?)```", outside, re.S))
    for command, spec in command_specs().items():
        for name, (_t, fi) in spec.fields().items():
            if fi.is_required() or fi.default is None or isinstance(fi.default, bool):
                continue
            spelled = f"[{option_of(name, fi)} {fi.default:g}]" if isinstance(fi.default, float) else \
                f"[{option_of(name, fi)} {fi.default}]"  # fmt: skip
            assert spelled not in blocks, f"{spelled} ({command}) is written by hand: the spec's default goes stale"


def test_a_changed_default_shows_in_the_synopsis(monkeypatch):
    from llmbench.spec import RequestsSection, RunSpec

    fi = RequestsSection.model_fields["max_new_tokens"]
    assert "[--max-new-tokens 256]" in synopsis("run") and term("max_new_tokens", fi) == "[--max-new-tokens 256]"
    monkeypatch.setattr(fi, "default", 300)
    assert "[--max-new-tokens 300]" in synopsis("run")
    assert RunSpec.fields()["max_new_tokens"][1].default == 300


@pytest.mark.parametrize("command", sorted(command_specs()))
def test_every_line_fits_the_docs(command):
    assert all(len(line) <= 120 for line in synopsis(command).splitlines())
