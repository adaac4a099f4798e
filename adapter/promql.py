"""PromQL label matchers (``pod!=""``, ``queue=~"a|b"``) as rules write them in ``match``.

In Prometheus mode they are rendered into a rule's query where it says ``<<.LabelMatchers>>``;
in direct mode the same matchers are evaluated here against the exporters' samples, with
Prometheus's semantics (an absent label equals ``""``; regexes are fully anchored and, as in
Prometheus 3, ``.`` matches a newline too).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

PLACEHOLDER = "<<.LabelMatchers>>"
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*")\s*')  # fullmatch


@dataclass(frozen=True, slots=True)
class Matcher:
    label: str
    op: str
    value: str
    regex: re.Pattern[str] | None

    def matches(self, labels: Mapping[str, str]) -> bool:
        actual = labels.get(self.label, "")
        if self.op == "=":
            return actual == self.value
        if self.op == "!=":
            return actual != self.value
        assert self.regex is not None
        found = self.regex.fullmatch(actual) is not None
        return found if self.op == "=~" else not found

    def promql(self) -> str:
        return f"{self.label}{self.op}{json.dumps(self.value)}"


def parse_matcher(text: str) -> Matcher:
    """Parse one ``label op "value"`` matcher; raise ValueError saying what is wrong."""
    m = _MATCHER.fullmatch(text)
    if m is None:
        raise ValueError(f'{text!r} is not a label matcher like pod!="" or queue=~"a|b"')
    label, op, quoted = m.groups()
    try:
        value = json.loads(quoted)
    except ValueError:
        raise ValueError(f"{text!r}: the value is not a valid quoted string") from None
    regex = None
    if op in ("=~", "!~"):
        try:
            regex = re.compile(value, re.DOTALL)
        except re.error as exc:
            raise ValueError(f"{text!r}: bad regular expression: {exc}") from None
    return Matcher(label, op, value, regex)


def render(template: str, matchers: Sequence[Matcher]) -> str:
    """A rule's query with its matchers in place of ``<<.LabelMatchers>>``."""
    return template.replace(PLACEHOLDER, ",".join(m.promql() for m in matchers))
