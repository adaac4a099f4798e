"""The reference tables in docs/ are generated from the code and must match it; the README opens
with the two commands and stays short enough to read, every reference a click away."""

from __future__ import annotations

from servers import ROOT

from exporter.docs import LOCATIONS, documents, render
from exporter.metrics import FAMILIES

README_LIMIT_BYTES = 15_000


def test_generated_tables_match_the_code() -> None:
    assert set(LOCATIONS) == {
        "metrics-table", "config-table", "queue-table", "versions-table", "price-sets-table"
    }  # fmt: skip
    for relative, names in documents().items():
        text = (ROOT / relative).read_text()
        assert render(text, names) == text, f"{relative} is stale: run .venv/bin/python -m exporter.docs"
    metrics = (ROOT / LOCATIONS["metrics-table"]).read_text()
    for family in FAMILIES:
        assert f"`{family.name}`" in metrics


def test_each_generated_table_is_in_one_document_only() -> None:
    marked = {
        name: [p.relative_to(ROOT).as_posix() for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
               if f"<!-- {name}:begin -->" in p.read_text()]
        for name in LOCATIONS
    }  # fmt: skip
    assert marked == {name: [path] for name, path in LOCATIONS.items()}


def test_readme_opens_with_the_two_commands() -> None:
    text = (ROOT / "README.md").read_text()
    first_block = text.split("```sh\n", 1)[1].split("```", 1)[0]
    assert "rightsizer-exporter --simulate" in first_block
    assert "scripts/test" in first_block
    assert text.index("```sh\n") == text.index("```")  # no other block comes first
    ci = (ROOT / ".ci" / "run").read_text()
    assert "./scripts/test" in ci


def test_readme_is_short_and_links_every_reference() -> None:
    readme = ROOT / "README.md"
    assert readme.stat().st_size < README_LIMIT_BYTES
    text = readme.read_text()
    assert "](docs/status-page.png)" in text.split("\n## ", 1)[0]  # the screenshot on the first screen
    documentation = text.split("\n## Documentation\n", 1)[1].split("\n## ", 1)[0]
    for page in sorted((ROOT / "docs").glob("*.md")):
        if page.name != "README.md":
            assert f"](docs/{page.name})" in documentation, f"README's Documentation list lacks {page.name}"
