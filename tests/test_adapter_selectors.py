"""Label selectors (apimachinery's grammar and semantics), Quantity strings, PromQL matchers."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from adapter.kubernetes.quantities import format_quantity, parse_quantity
from adapter.kubernetes.selectors import EVERYTHING, SelectorError, parse
from adapter.promql import parse_matcher, render
from rightsizer_core.workloads import workload_of

LABELS = {"queue": "jobs", "namespace": "prod", "tier": "3", "app_kubernetes_io_name": "chat"}


@pytest.mark.parametrize(
    ("text", "matches"),
    [
        ("", True),
        ("queue=jobs", True),
        ("queue==jobs", True),
        ("queue=other", False),
        ("queue!=jobs", False),
        ("queue!=other", True),
        ("absent!=x", True),  # != matches when the label is absent, as in Kubernetes
        ("absent=x", False),
        ("queue in (a, jobs)", True),
        ("queue in (a,b)", False),
        ("queue notin (a,b)", True),
        ("queue notin (jobs)", False),
        ("absent notin (a)", True),
        ("queue", True),
        ("absent", False),
        ("!absent", True),
        ("!queue", False),
        ("tier>2", True),
        ("tier<3", False),
        ("queue>2", False),  # not an integer: no match
        ("queue=jobs,namespace=prod", True),
        ("queue=jobs, namespace=dev", False),
        ("  queue = jobs ,  !absent  ", True),
        ("app.kubernetes.io/name=chat", True),  # keys match their sanitized label names
        ("queue=", False),  # empty value: only a present, empty label would match
    ],
)
def test_grammar_and_semantics(text: str, matches: bool) -> None:
    assert parse(text).matches(LABELS) is matches


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("queue in ()", "must not be empty"),
        ("queue in (a", "missing ')'"),
        ("queue in a", "expected '('"),
        ("queue=a b", "expected ','"),
        ("queue=jobs,", "ends with ','"),
        (",queue", "expected a label key"),
        ("!", "expected a label key after '!'"),
        ("tier>x", "needs an integer"),
        ("-bad=1", "invalid label key"),
        ("queue=" + "v" * 64, "invalid label value"),
        ("Bad_Prefix/x=1", "prefix must be a DNS subdomain"),
        ("queue!", "unexpected '!'"),
    ],
)
def test_bad_selectors_say_why(text: str, reason: str) -> None:
    with pytest.raises(SelectorError, match=re.escape(reason)):
        parse(text)


def test_equalities_and_label_selector_form() -> None:
    sel = parse("queue=jobs,tier in (1),x notin (a,b),!y,z,w!=v")
    assert sel.equalities() == {"queue": "jobs", "tier": "1"}
    assert sel.as_label_selector() == {
        "matchLabels": {"queue": "jobs"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["1"]},
            {"key": "x", "operator": "NotIn", "values": ["a", "b"]},
            {"key": "y", "operator": "DoesNotExist"},
            {"key": "z", "operator": "Exists"},
            {"key": "w", "operator": "NotIn", "values": ["v"]},
        ],
    }
    assert EVERYTHING.as_label_selector() is None
    assert parse("app=chat").with_prefix("label_").matches({"label_app": "chat"})


@given(st.text(max_size=80))
def test_any_text_parses_or_is_refused_cleanly(text: str) -> None:
    try:
        sel = parse(text)
    except SelectorError as exc:
        assert str(exc) and "\n" not in str(exc)
    else:
        sel.matches(LABELS)


@given(
    st.dictionaries(st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "y", "1", "2"]), max_size=3),
    st.sampled_from(["a", "b", "c"]),
    st.sets(st.sampled_from(["x", "y", "1"]), min_size=1, max_size=3),
)
def test_set_operators_agree_with_their_definition(
    labels: dict[str, str], key: str, values: set[str]
) -> None:
    listed = ",".join(sorted(values))
    assert parse(f"{key} in ({listed})").matches(labels) == (labels.get(key) in values)
    assert parse(f"{key} notin ({listed})").matches(labels) == (labels.get(key) not in values)
    assert parse(key).matches(labels) == (key in labels)
    assert parse(f"!{key}").matches(labels) == (key not in labels)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (5, "5"),
        (1.5, "1500m"),
        (-0.25, "-250m"),
        (0.0004, "0"),
        (0.0006, "1m"),
        (123456.789, "123456789m"),
        (1e17, str((2**63 - 1) // 1000)),
        (-1e17, "-" + str((2**63 - 1) // 1000)),
    ],
)
def test_quantities(value: float, text: str) -> None:
    assert format_quantity(value) == text


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_nan_and_inf_have_no_quantity(bad: float) -> None:
    with pytest.raises(ValueError):
        format_quantity(bad)


@given(st.floats(min_value=-1e12, max_value=1e12, allow_nan=False))
def test_quantity_round_trip_within_a_milli_unit(value: float) -> None:
    assert abs(parse_quantity(format_quantity(value)) - value) <= 0.0005 + abs(value) * 1e-12


@pytest.mark.parametrize(
    ("text", "value"), [("2Ki", 2048.0), ("1.5", 1.5), ("3e2", 300.0), ("250u", 0.00025)]
)
def test_parse_quantity_suffixes(text: str, value: float) -> None:
    assert parse_quantity(text) == pytest.approx(value)


def test_promql_matchers() -> None:
    labels = {"pod": "chat-1", "verdict": "idle"}
    assert parse_matcher('pod!=""').matches(labels)
    assert not parse_matcher('absent!=""').matches(labels)
    assert parse_matcher('verdict=~"idle|over.*"').matches(labels)
    assert not parse_matcher('verdict!~"id.*"').matches(labels)
    assert not parse_matcher('pod=~"chat"').matches(labels)  # anchored, as in Prometheus
    assert render("sum(x{<<.LabelMatchers>>})", [parse_matcher('a="b\\"c"'), parse_matcher('d!=""')]) == (
        'sum(x{a="b\\"c",d!=""})'
    )
    for bad in ["pod", 'pod="x', 'pod=~"("', '1x="a"']:
        with pytest.raises(ValueError):
            parse_matcher(bad)


@pytest.mark.parametrize(
    ("pod", "workload"),
    [
        ("chat-7d9c5b6f8b-x2x4z", "chat"),
        ("db-0", "db"),
        ("db-12", "db"),
        ("logship-k8z2q", "logship"),
        ("solo", "solo"),
    ],
)
def test_workload_from_pod_names(pod: str, workload: str) -> None:
    assert workload_of(pod) == workload
