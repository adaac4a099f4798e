"""Every Markdown table in the README and docs/ has as many cells in each row as in its header, as
GitHub splits them: on every pipe not escaped as ``\\|``, inside code spans too. (Generated tables
used to print types such as ``str | null`` unescaped, which broke 17 rows of the configuration
reference.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from servers import ROOT

from exporter.docs import cell, config_table, metrics_table, queue_table

DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def cells(row: str) -> int:
    return len(_UNESCAPED_PIPE.split(row.strip().strip("|")))


def tables(text: str) -> list[list[tuple[int, str]]]:
    found: list[list[tuple[int, str]]] = []
    current: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(text.splitlines(), start=1):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.startswith("|"):
            current.append((number, line))
            continue
        if current:
            found.append(current)
            current = []
    if current:
        found.append(current)
    return found


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: p.name)
def test_every_row_has_the_header_cells(path: Path) -> None:
    broken = []
    for table in tables(path.read_text()):
        width = cells(table[0][1])
        broken += [
            f"{path.name}:{n}: {cells(row)} cells, header {width}" for n, row in table if cells(row) != width
        ]
    assert broken == []


def test_generated_tables_escape_pipes() -> None:
    assert cell("str | null") == r"str \| null"
    assert cell(r"a \| b") == r"a \| b"  # already escaped: unchanged
    for make in (config_table, metrics_table, queue_table):
        rows = make().splitlines()
        assert {cells(r) for r in rows} == {cells(rows[0])}, make.__name__
