"""Markdown that no value can break: every cell escaped (label values are user input, so a pod
named ``a|b`` or ``<script>`` stays one cell of plain text) and tables built from rows. Used by
the Markdown report (``command/report_markdown``) and the patch set's README (``patches/readme``)."""

from __future__ import annotations

import re
from collections.abc import Sequence

# Backslash-escapes every ASCII punctuation CommonMark or GitHub's tables read as markup.
_MARKUP = re.compile(r"([\\`*_{}\[\]<>()#+!|~&])")


def cell(value: object) -> str:
    text = "-" if value is None or value == "" else str(value)
    return _MARKUP.sub(r"\\\1", " ".join(text.split()))


def md_table(headers: Sequence[str], rows: Sequence[Sequence[object]], right: Sequence[bool] = ()) -> str:
    align = [("---:" if i < len(right) and right[i] else "---") for i in range(len(headers))]
    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)
