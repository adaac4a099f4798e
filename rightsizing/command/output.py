"""Tables, CSV and JSON for the ``rightsizer`` commands."""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Sequence
from typing import Any

from rightsizer_core import strict_json

GIB = 2**30


def gib(n: float | None, digits: int = 1) -> str:
    return "-" if n is None else f"{n / GIB:.{digits}f} GiB"


def money(n: float | None, digits: int = 2) -> str:
    if n is None:
        return "-"
    return f"-${-n:,.{digits}f}" if n < 0 else f"${n:,.{digits}f}"


def pct(n: float | None) -> str:
    return "-" if n is None else f"{n:.0%}"


def rate(n: float | None) -> str:
    if n is None or not math.isfinite(n):
        return "-"
    return f"{n:,.0f}" if n >= 100 else f"{n:,.1f}"


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool] | None = None) -> str:
    """A plain aligned text table (numbers right-aligned where ``right`` says so)."""
    widths = [len(h) for h in headers]
    for row in rows:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    align = right or [False] * len(headers)

    def line(cells: Sequence[str]) -> str:
        return "  ".join(
            c.rjust(w) if r else c.ljust(w) for c, w, r in zip(cells, widths, align, strict=True)
        ).rstrip()

    out = [line(headers), line(["-" * w for w in widths])]
    out += [line(r) for r in rows]
    return "\n".join(out)


def to_csv(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(headers)
    writer.writerows([["" if v is None else v for v in row] for row in rows])
    return buf.getvalue()


def to_json(data: Any) -> str:
    return strict_json.dumps(data, indent=2) + "\n"
