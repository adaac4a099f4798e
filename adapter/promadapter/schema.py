"""Reading prometheus-adapter's configuration format, with one-line errors naming the key.

The schema is prometheus-adapter's ``pkg/config``: ``rules`` (custom metrics) and ``externalRules``,
each with ``seriesQuery``, ``seriesFilters`` (``is``/``isNot``), ``resources`` (``template``,
``overrides``, and ``namespaced`` for external rules), ``name`` (``matches``/``as``) and
``metricsQuery``. ``resourceRules`` (the resource metrics API) are not served.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Literal

from rightsizer_core.settings import ConfigError, read_yaml

TEMPLATE_FIELDS = {"Series", "LabelMatchers", "GroupBy"}  # the others only make sense with functions
_TEMPLATE_ACTION = re.compile(r"<<-?\s*(.*?)\s*-?>>", re.S)
_TOP_KEYS = {"rules", "externalRules", "resourceRules"}
_RULE_KEYS = {"seriesQuery", "seriesFilters", "resources", "name", "metricsQuery", "labelValueReplacements"}


@dataclass(frozen=True)
class Resources:
    template: str = ""
    overrides: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (group, resource)
    namespaced: bool = True


@dataclass(frozen=True)
class PromAdapterRule:
    kind: Literal["custom", "external"]
    index: int
    series_query: str
    is_filters: tuple[re.Pattern[str], ...]
    is_not_filters: tuple[re.Pattern[str], ...]
    resources: Resources
    matches: re.Pattern[str]
    as_: str
    metrics_query: str

    @property
    def where(self) -> str:
        return f"{'rules' if self.kind == 'custom' else 'externalRules'}[{self.index}]"


@dataclass(frozen=True)
class PromAdapterConfig:
    rules: tuple[PromAdapterRule, ...]
    has_resource_rules: bool


def go_regex(pattern: str, where: str) -> re.Pattern[str]:
    """A Go (RE2) regular expression as Python reads it; RE2 has no look-arounds or backrefs."""
    translated = re.sub(r"\(\?P?<([A-Za-z_][A-Za-z0-9_]*)>", r"(?P<\1>", pattern)
    try:
        return re.compile(translated)
    except re.error as exc:
        raise ValueError(f"{where}: {pattern!r} is not a valid regular expression: {exc}") from None


def default_as(matches: re.Pattern[str], where: str) -> str:
    if matches.groups == 0:
        return "$0"
    if matches.groups == 1:
        return "$1"
    raise ValueError(f"{where}.as: must be given when name.matches has more than one capture group")


def check_template(text: str, where: str) -> None:
    """Only plain field references (``<<.Series>>`` ...) are allowed; say which one is not."""
    if text.count("<<") != text.count(">>"):
        raise ValueError(f"{where}: unbalanced << >> delimiters in {text!r}")
    for action in _TEMPLATE_ACTION.findall(text):
        name = action[1:] if action.startswith(".") else None
        if name not in TEMPLATE_FIELDS:
            raise ValueError(
                f"{where}: <<{action}>> is not supported (use <<.Series>>, <<.LabelMatchers>>, <<.GroupBy>>)"
            )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"{where}: must be a mapping")
    return value


def _string(value: Any, where: str, required: bool = False) -> str:
    if value is None or value == "":
        if required:
            raise ValueError(f"{where}: is required")
        return ""
    if not isinstance(value, str):
        raise ValueError(f"{where}: must be a string, got {type(value).__name__}")
    return value


def _unknown(data: dict[str, Any], allowed: set[str], where: str) -> None:
    extra = sorted(set(data) - allowed)
    if extra:
        raise ValueError(f"{where}: unknown key {extra[0]!r} (known: {', '.join(sorted(allowed))})")


def _resources(data: Any, where: str, kind: str) -> Resources:
    data = _mapping(data, where)
    _unknown(data, {"template", "overrides", "namespaced"}, where)
    template = _string(data.get("template"), f"{where}.template")
    if template:
        check_template(template.replace("<<.Group>>", "").replace("<<.Resource>>", ""), f"{where}.template")
    overrides: dict[str, tuple[str, str]] = {}
    for label, target in _mapping(data.get("overrides"), f"{where}.overrides").items():
        at = f"{where}.overrides.{label}"
        target = _mapping(target, at)
        _unknown(target, {"group", "resource"}, at)
        overrides[str(label)] = (
            _string(target.get("group"), f"{at}.group"),
            _string(target.get("resource"), f"{at}.resource", True),
        )
    namespaced = data.get("namespaced", True)
    if not isinstance(namespaced, bool):
        raise ValueError(f"{where}.namespaced: must be true or false")
    if not namespaced and kind == "custom":
        raise ValueError(f"{where}.namespaced: applies to externalRules only")
    return Resources(template, overrides, namespaced)


def _rule(data: Any, kind: Literal["custom", "external"], index: int) -> PromAdapterRule:
    where = f"{'rules' if kind == 'custom' else 'externalRules'}[{index}]"
    data = _mapping(data, where)
    _unknown(data, _RULE_KEYS, where)
    if data.get("labelValueReplacements"):
        raise ValueError(f"{where}.labelValueReplacements: not supported")
    filters = data.get("seriesFilters") or []
    if not isinstance(filters, list):
        raise ValueError(f"{where}.seriesFilters: must be a list")
    is_, is_not = [], []
    for i, item in enumerate(filters):
        at = f"{where}.seriesFilters[{i}]"
        item = _mapping(item, at)
        _unknown(item, {"is", "isNot"}, at)
        if bool(item.get("is")) == bool(item.get("isNot")):
            raise ValueError(f"{at}: give exactly one of is and isNot")
        if item.get("is"):
            is_.append(go_regex(_string(item["is"], f"{at}.is"), f"{at}.is"))
        else:
            is_not.append(go_regex(_string(item["isNot"], f"{at}.isNot"), f"{at}.isNot"))
    name = _mapping(data.get("name"), f"{where}.name")
    _unknown(name, {"matches", "as"}, f"{where}.name")
    matches = go_regex(_string(name.get("matches"), f"{where}.name.matches") or ".*", f"{where}.name.matches")
    as_ = _string(name.get("as"), f"{where}.name.as") or default_as(matches, f"{where}.name")
    query = _string(data.get("metricsQuery"), f"{where}.metricsQuery", required=True)
    check_template(query, f"{where}.metricsQuery")
    return PromAdapterRule(
        kind=kind,
        index=index,
        series_query=_string(data.get("seriesQuery"), f"{where}.seriesQuery", required=True),
        is_filters=tuple(is_),
        is_not_filters=tuple(is_not),
        resources=_resources(data.get("resources"), f"{where}.resources", kind),
        matches=matches,
        as_=as_,
        metrics_query=query,
    )


def parse(data: dict[str, Any]) -> PromAdapterConfig:
    """The configuration in ``data``; ValueError (one line, naming the key) when it is wrong."""
    _unknown(data, _TOP_KEYS, "top level")
    rules: list[PromAdapterRule] = []
    for key, kind in (("rules", "custom"), ("externalRules", "external")):
        items = data.get(key) or []
        if not isinstance(items, list):
            raise ValueError(f"{key}: must be a list")
        rules += [_rule(item, kind, i) for i, item in enumerate(items)]  # type: ignore[arg-type]
    if not rules:
        raise ValueError("no rules and no externalRules: nothing to serve")
    return PromAdapterConfig(tuple(rules), bool(data.get("resourceRules")))


def load(path: str) -> PromAdapterConfig:
    """Read prometheus-adapter's configuration file; ConfigError (one line) when it is wrong."""
    data = read_yaml(path)
    try:
        return parse(data)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
