"""The README's reference tables are generated from the code and must match it."""

from __future__ import annotations

from servers import ROOT

from exporter.docs import render_readme
from exporter.metrics import FAMILIES


def test_readme_tables_match_the_code() -> None:
    text = (ROOT / "README.md").read_text()
    assert render_readme(text) == text, "README.md is stale: run .venv/bin/python -m exporter.docs"
    for family in FAMILIES:
        assert f"`{family.name}`" in text


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert "rightsizer-exporter --simulate" in first_block
    assert "scripts/test" in first_block
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in ci
