"""Kubernetes label selectors: the full grammar of apimachinery's ``labels.Parse``.

``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists), ``!k`` (does not
exist), ``k>N``, ``k<N``; requirements joined by commas are ANDed. Matching follows Kubernetes:
``=``/``in`` need the label present, ``!=``/``notin`` also match when it is absent.

Selector keys are Kubernetes label keys (``app.kubernetes.io/name``); series carry Prometheus label
names, which allow only ``[a-zA-Z0-9_]``, so keys are matched against their sanitized form
(``app_kubernetes_io_name``), as kube-state-metrics spells them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal

Operator = Literal["=", "!=", "in", "notin", "exists", "!", "gt", "lt"]

# Used with fullmatch only: ``$`` would also accept a name followed by a newline.
_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_TOKEN = re.compile(r"\s*(==|!=|=|!|,|\(|\)|>|<|[^\s=!,()<>]+)")
_INVALID_LABEL_CHARS = re.compile(r"[^a-zA-Z0-9_]")


class SelectorError(ValueError):
    """A label selector that does not parse; the message says what and where."""


def label_name(key: str) -> str:
    """The Prometheus label name a Kubernetes label key is matched against."""
    name = _INVALID_LABEL_CHARS.sub("_", key)
    return "_" + name if name[:1].isdigit() else name


def _check_key(key: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)):
        raise SelectorError(f"invalid label key {key!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise SelectorError(
            f"invalid label key {key!r}: name must be 63 characters or less, alphanumeric, '-', '_' or '.'"
        )


def _check_value(value: str) -> None:
    if value and (len(value) > 63 or not _NAME.fullmatch(value)):
        raise SelectorError(
            f"invalid label value {value!r}: must be 63 characters or less, alphanumeric, '-', '_' or '.'"
        )


@dataclass(frozen=True, slots=True)
class Requirement:
    key: str  # the Kubernetes key as written
    label: str  # the label name it is matched against
    op: Operator
    values: tuple[str, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.label)
        op = self.op
        if op == "=" or op == "in":
            return value is not None and value in self.values
        if op == "!=" or op == "notin":
            return value is None or value not in self.values
        if op == "exists":
            return value is not None
        if op == "!":
            return value is None
        if value is None:
            return False
        try:
            number = int(value)
        except ValueError:
            return False
        bound = int(self.values[0])
        return number > bound if op == "gt" else number < bound


@dataclass(frozen=True, slots=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def equalities(self) -> dict[str, str]:
        """Labels the selector pins to one value (``k=v`` and ``k in (v)``)."""
        return {r.label: r.values[0] for r in self.requirements if r.op in ("=", "in") and len(r.values) == 1}

    def with_prefix(self, prefix: str) -> Selector:
        """The same requirements on ``prefix + label`` (pod labels joined as ``label_<name>``)."""
        if not prefix:
            return self
        return Selector(
            tuple(Requirement(r.key, prefix + r.label, r.op, r.values) for r in self.requirements)
        )

    def on_keys(self) -> Selector:
        """The same requirements on the Kubernetes keys as written (for real objects' labels)."""
        return Selector(tuple(Requirement(r.key, r.key, r.op, r.values) for r in self.requirements))

    def as_label_selector(self) -> dict[str, Any] | None:
        """The metav1.LabelSelector form (``gt``/``lt`` have none and are left out)."""
        if not self.requirements:
            return None
        match_labels: dict[str, str] = {}
        expressions: list[dict[str, Any]] = []
        names = {"in": "In", "notin": "NotIn", "!=": "NotIn", "exists": "Exists", "!": "DoesNotExist"}
        for r in self.requirements:
            if r.op == "=":
                match_labels[r.key] = r.values[0]
            elif r.op in names:
                expr: dict[str, Any] = {"key": r.key, "operator": names[r.op]}
                if r.op in ("in", "notin", "!="):
                    expr["values"] = sorted(r.values)
                expressions.append(expr)
        out: dict[str, Any] = {}
        if match_labels:
            out["matchLabels"] = match_labels
        if expressions:
            out["matchExpressions"] = expressions
        return out


EVERYTHING = Selector(())


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:  # pragma: no cover - the token pattern accepts every non-space character
            raise SelectorError(f"cannot read selector at position {pos}")
        out.append(m.group(1))
        pos = m.end()
    return out


def _parse_values(tokens: list[str], i: int, key: str) -> tuple[tuple[str, ...], int]:
    if i >= len(tokens) or tokens[i] != "(":
        raise SelectorError(f"expected '(' after 'in'/'notin' for key {key!r}")
    i += 1
    values: list[str] = []
    expect_value = True
    while i < len(tokens) and tokens[i] != ")":
        tok = tokens[i]
        if tok == ",":
            if expect_value:
                values.append("")  # "(a,,b)" and "(,a)" carry empty values, as in apimachinery
            expect_value = True
        elif expect_value and tok not in ("(", "=", "==", "!=", "!", ">", "<"):
            _check_value(tok)
            values.append(tok)
            expect_value = False
        else:
            raise SelectorError(f"unexpected {tok!r} in the value list of {key!r}")
        i += 1
    if i >= len(tokens):
        raise SelectorError(f"missing ')' in the value list of {key!r}")
    if expect_value and values:
        values.append("")
    if not values:
        raise SelectorError(f"the value list of {key!r} must not be empty")
    return tuple(dict.fromkeys(values)), i + 1


@lru_cache(maxsize=4096)
def parse(text: str) -> Selector:
    """Parse a label selector string; raise SelectorError with a one-line reason."""
    if len(text) > 4096:
        raise SelectorError("selector longer than 4096 characters")
    tokens = _tokens(text)
    requirements: list[Requirement] = []
    i = 0
    while i < len(tokens):
        if tokens[i] == "!":
            if i + 1 >= len(tokens) or tokens[i + 1] in ",()=!<>":
                raise SelectorError("expected a label key after '!'")
            key = tokens[i + 1]
            _check_key(key)
            requirements.append(Requirement(key, label_name(key), "!", ()))
            i += 2
        else:
            key = tokens[i]
            if key in (",", "(", ")", "=", "==", "!=", ">", "<"):
                raise SelectorError(f"expected a label key, found {key!r}")
            _check_key(key)
            i += 1
            op = tokens[i] if i < len(tokens) else ","
            if op == ",":
                requirements.append(Requirement(key, label_name(key), "exists", ()))
            elif op in ("=", "==", "!="):
                value = tokens[i + 1] if i + 1 < len(tokens) and tokens[i + 1] not in ",()=!<>" else ""
                _check_value(value)
                requirements.append(Requirement(key, label_name(key), "!=" if op == "!=" else "=", (value,)))
                i += 2 if value else 1
            elif op in ("in", "notin"):
                values, i = _parse_values(tokens, i + 1, key)
                requirements.append(Requirement(key, label_name(key), op, values))  # type: ignore[arg-type]
            elif op in (">", "<"):
                bound = tokens[i + 1] if i + 1 < len(tokens) else ""
                if not re.fullmatch(r"-?\d{1,18}", bound):
                    raise SelectorError(f"'{op}' on key {key!r} needs an integer value; got {bound!r}")
                requirements.append(Requirement(key, label_name(key), "gt" if op == ">" else "lt", (bound,)))
                i += 2
            else:
                raise SelectorError(f"unexpected {op!r} after key {key!r}")
        if i < len(tokens):
            if tokens[i] != ",":
                raise SelectorError(f"expected ',' between requirements, found {tokens[i]!r}")
            i += 1
            if i >= len(tokens):
                raise SelectorError("selector ends with ','")
    return Selector(tuple(requirements))
