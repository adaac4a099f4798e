"""One query per metric per refresh from a ``metricsQuery`` template, when that is faithful.

prometheus-adapter renders the template per request: ``<<.LabelMatchers>>`` gets the request's
namespace, object names and selector, ``<<.GroupBy>>`` the object's label. Here it is rendered
once per refresh with no matchers and every aggregation grouped also by the labels requests
select on (``keys``: the namespace label and the resource labels), and each request then selects
from that vector. Selecting after grouping equals matching before it as long as the keys survive
every aggregation, which holds for ``by``/``without`` aggregations and functions applied per
series. Templates this cannot express (``topk``, vector matching, matchers outside ``{}``...) are
refused with the reason, and the rule is named in the log and in ``/metrics``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

AGGREGATORS = ("sum", "avg", "max", "min", "count", "stddev", "stdvar", "group")
_AGG = re.compile(r"\b(" + "|".join(AGGREGATORS) + r")\s*(?=\(|by\b|without\b)")
_CLAUSE = re.compile(r"\s*(by|without)\s*\(([^()]*)\)")
_UNBATCHABLE = re.compile(
    r"\b(topk|bottomk|quantile|count_values|limitk|limit_ratio|absent|absent_over_time|scalar|"
    r"sort|sort_desc|on|ignoring|group_left|group_right)\s*\(|\b(group_left|group_right)\b"
)
_MATCHERS_IN_BRACES = re.compile(r"[{,]\s*<<\.LabelMatchers>>\s*(?=[,}])")
REAGGREGATE = {"sum": "sum", "max": "max", "min": "min", "count": "sum"}


class NotBatchable(Exception):
    """Why a template cannot be answered from one query per refresh (one line)."""


@dataclass(frozen=True)
class Batch:
    query: str
    outer: str | None  # the outermost aggregation of the template, if the whole query is one
    # Labels the template's answers keep: None all (no aggregation), else the outer ``by`` list
    # (empty when it cannot be told, e.g. an aggregation inside arithmetic).
    kept: frozenset[str] | None = None


def _close(text: str, start: int) -> int:
    """Index just past the parenthesis matching ``text[start]``."""
    depth = 0
    quote = ""
    for i in range(start, len(text)):
        ch = text[i]
        if quote:
            if ch == "\\":
                continue
            if ch == quote:
                quote = ""
        elif ch in "\"'`":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise NotBatchable("unbalanced parentheses")


def _labels(text: str) -> list[str]:
    return [label.strip() for label in text.split(",") if label.strip()]


def _group(text: str, keys: Sequence[str]) -> tuple[str, str | None, frozenset[str] | None]:
    """``text`` with every aggregation grouped also by ``keys``, and the outermost aggregator."""
    out: list[str] = []
    pos = 0
    outer = None
    kept: frozenset[str] | None = None
    for found in _AGG.finditer(text):
        if found.start() < pos:
            continue
        out.append(text[pos : found.start()] + found.group(1))
        i = found.end()
        clauses = []
        before = _CLAUSE.match(text, i)
        if before:
            clauses.append(before)
            i = before.end()
            while text[i].isspace():
                i += 1
        if text[i] != "(":
            raise NotBatchable(f"cannot read the aggregation at {text[found.start() :][:40]!r}")
        end = _close(text, i)
        inner = _group(text[i + 1 : end - 1], keys)[0]
        if kept is None:
            kept = frozenset()
        after = None if before else _CLAUSE.match(text, end)
        if after:
            clauses.append(after)
        kind, listed = (clauses[0].group(1), _labels(clauses[0].group(2))) if clauses else ("by", [])
        if kind == "without":
            if set(listed) & set(keys):
                raise NotBatchable(f"an aggregation drops {sorted(set(listed) & set(keys))} with without()")
            clause = f" without ({', '.join(listed)})" if clauses else ""
        else:
            grouped = ", ".join(dict.fromkeys([*listed, *keys]))
            clause = f" by ({grouped})" if clauses or keys else ""
        out.append(f"{clause} ({inner})")
        if found.start() == 0 and (after.end() if after else end) == len(text):
            outer = found.group(1)
            kept = frozenset(listed) if kind == "by" else frozenset()
        pos = after.end() if after else end
    out.append(text[pos:])
    return "".join(out), outer, kept


def plan(template: str, series: str, keys: Sequence[str]) -> Batch:
    """The query answering every request for ``series`` in one refresh; NotBatchable if none does."""
    bad = _UNBATCHABLE.search(template)
    if bad:
        raise NotBatchable(f"uses {bad.group(1) or bad.group(2)}, which selection after the query changes")
    if template.count("<<.LabelMatchers>>") != len(_MATCHERS_IN_BRACES.findall(template)):
        raise NotBatchable("<<.LabelMatchers>> appears outside a {...} selector")
    text = template.replace("<<.Series>>", series).strip()
    text = re.sub(r"\s*,?\s*<<\.LabelMatchers>>\s*,?\s*", ",", text)
    text = re.sub(r"\{\s*,", "{", re.sub(r",\s*}", "}", text))
    text = re.sub(r"by\s*\(\s*<<\.GroupBy>>\s*\)", "by ()", text)
    if "<<.GroupBy>>" in text:
        text = re.sub(r"\(\s*<<\.GroupBy>>\s*,", "(", re.sub(r",\s*<<\.GroupBy>>\s*", "", text))
        if "<<.GroupBy>>" in text:
            raise NotBatchable("<<.GroupBy>> appears outside a by (...) clause")
    query, outer, kept = _group(text, keys)
    return Batch(query, outer, kept)
