"""The engines' compact answers read in one pass (adapter/sources/compact.py): whatever a body
holds, ``parse_answer`` must give what decoding it the usual way gives (the same series, time and
refused series, or the same error), and an engine's own answer must take that pass.

The usual way is ``parse_answer`` with the pass turned off, which the answers of real engines go
through in test_adapter_source_states.py and test_adapter_seen_texts.py compares with
``json.loads``."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapter.labelsets import Labels
from adapter.sources import prometheus as module
from adapter.sources.prometheus import QueryError, parse_answer
from adapter.sources.source_states import MARKER
from adapter.vectors import with_workload

KEY = "rightsizer_adapter_value"
# value texts: what engines write, what float() takes that JSON does not hold unescaped (control
# characters at either end), what JSON holds that float() refuses, and texts that break the shape
VALUES = ["1", "0.37", "NaN", "+Inf", "-Inf", "1e-3", "1_0", " 1", "1 ", "\t1", "1\n", "\x1f1", "\u20031",
          "\u0661\u0662", "", "a", '1"', "1\\", '"]}', "1,\"", "\x7f"]  # fmt: skip
TIMES = ["1700000000.5", "1700000015", "-0", "1e3", "0", "01", "1.", "NaN", '"1"', "1,", "", "[1]"]
LABEL_TEXT = st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('{}[]",:\\\x00\x1f'), max_size=8)
LABELS = st.dictionaries(
    st.sampled_from(["pod", "namespace", "queue", "instance", "job", "__name__", MARKER, KEY, "a{", 'b"']),
    st.one_of(
        st.sampled_from(["p-1-2", "n", "p0", "p1", "1", "0", '},"value":[1,"2"]}', "{", "}"]), LABEL_TEXT
    ),
    max_size=4,
)


def series_text(labels: dict[str, str], ts: str, value: str) -> str:
    """A series as the engines write it, its time and value texts put in as they are."""
    return f'{{"metric":{json.dumps(labels, separators=(",", ":"))},"value":[{ts},"{value}"]}}'


def answer(texts: list[str], head: str = "", tail: str = "") -> bytes:
    return (
        f'{{"status":"success",{head}"data":{{"resultType":"vector","result":[{",".join(texts)}]}}{tail}}}'
    ).encode()


def outcome(body: bytes, compact: bool, monkeypatch: Any, **how: Any) -> Any:
    """``parse_answer``'s result, as plain values, or its error; with or without the one pass."""
    with monkeypatch.context() as patch:
        patch.setattr(module, "HASH_KEYED", True)  # whatever PYTHONHASHSEED the tests run with
        patch.setattr(module.time, "time", lambda: 42.0)  # an answer stamped 0 is stamped now
        if not compact:
            patch.setattr(module, "compact", lambda body, read: None)
        try:
            found, stamp, dropped = parse_answer(200, body, how.pop("limit", 10**6), **how)
        except QueryError as exc:
            return ("error", str(exc))
    refused = [(dict(s.labels), repr(s.value)) for s in dropped]  # NaN is not NaN
    return ([(dict(s.labels), s.value) for s in found], stamp, refused)


def both(body: bytes, monkeypatch: Any, **how: Any) -> Any:
    """Both outcomes, each read twice: once with the label sets not read before, once with them
    read (the table keeps them for a refresh)."""
    got = []
    for compact in (True, False):
        module._rotate_seen()
        module._rotate_seen()
        got.append([outcome(body, compact, monkeypatch, **dict(how)) for _ in range(2)])
    return got


series = st.lists(st.tuples(LABELS, st.sampled_from(TIMES), st.sampled_from(VALUES)), min_size=1, max_size=6)
hows = st.sampled_from([
    {}, {"states": True}, {"states": True, "limit": 1}, {"derive": with_workload},
    {"values_label": KEY}, {"states": True, "values_label": KEY},
])  # fmt: skip


@settings(max_examples=400, deadline=None)
@given(series, hows, st.sampled_from(["", '"isPartial":false,', '"isPartial":true,']),
       st.sampled_from(["", ',"warnings":["w"]', ',"stats":{"seriesFetched":"1"}', ',"data":1']))  # fmt: skip
def test_any_answer_reads_as_decoding_it_gives(found: Any, how: Any, head: str, tail: str) -> None:
    with pytest.MonkeyPatch.context() as monkeypatch:
        body = answer([series_text(*s) for s in found], head, tail)
        fast, usual = both(body, monkeypatch, **how)
        assert fast == usual


@settings(max_examples=300, deadline=None)
@given(series, st.integers(min_value=0, max_value=2**32), st.sampled_from(["cut", "insert", "delete"]))
def test_a_damaged_answer_reads_as_decoding_it_gives(found: Any, seed: int, damage: str) -> None:
    """Bodies broken at any place (a hostile or truncated answer): the same outcome either way."""
    body = answer([series_text(*s) for s in found]).decode()
    at = random.Random(seed).randrange(len(body))
    if damage == "cut":
        body = body[:at]
    elif damage == "insert":
        extra = random.Random(seed).choice(["}", "{", '"', ",", "]", " ", "\\", "\x00"])
        body = body[:at] + extra + body[at:]
    else:
        body = body[:at] + body[at + 1 :]
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, usual = both(body.encode(), monkeypatch, states=True)
        assert fast == usual


ONE = series_text({"pod": "p-1-2"}, "1700000000.5", "1")
ODD = [ONE.replace(text, instead) for text, instead in [
    ('"metric"', '"metrix"'),  # another member of the same length
    ('"metric"', '"metric" '),
    ('"value"', '"valuE"'),
    ('"value":[', '"value":[ '),
    (',"1"]', ',"1"] '),
    ('"1"]}', '"1","2"]}'),
    ('"1"]}', '1]}'),
    ('"1"]}', '"1"],"x":1}'),
]] + ['{"metric":{},"value":[1,"1"]}',
      '{"metric":{"pod":"p"},"value":[1,"1"],"metric":{"pod":"q"}}']  # fmt: skip


PLACED = [[odd] for odd in ODD] + [[ONE, odd] for odd in ODD] + [[odd, ONE] for odd in ODD]


@pytest.mark.parametrize("texts", PLACED)
def test_a_series_of_another_shape_reads_as_decoding_it_gives(texts: list[str], monkeypatch: Any) -> None:
    fast, usual = both(answer(texts), monkeypatch, states=True)
    assert fast == usual


WHOLE = answer([ONE, ONE]).decode()
BROKEN = [WHOLE.replace(text, instead) for text, instead in [
    ("]}}", "}}"),  # the array never closed
    ("]}}", "x}}"),
    ("]}}", " }}"),
    ("]}}", "}]}}"),
    ("]}}", "] }}"),
    ("]}}", "]}} "),
    ("]}}", "]}}}"),
    ("]}}", "],}}"),
    ("]}}", "]}"),
    ("},{", "}{"),
    ("},{", "},,{"),
    ("},{", "}, {"),
]]  # fmt: skip


@pytest.mark.parametrize("body", BROKEN)
def test_an_answer_broken_between_its_series_reads_as_decoding_it_gives(body: str, monkeypatch: Any) -> None:
    fast, usual = both(body.encode(), monkeypatch)
    assert fast == usual


@pytest.mark.parametrize("value", VALUES)
def test_a_value_read_from_a_label_checks_the_samples_own_text(value: str, monkeypatch: Any) -> None:
    """A ``count_values`` answer: the label's text is the value, and the sample's own text must
    still be one a JSON string holds, or the answer is refused as decoding it refuses it."""
    texts = [series_text({"pod": "p-1-2", KEY: "1"}, "1700000000.5", value)]
    fast, usual = both(answer(texts), monkeypatch, values_label=KEY)
    assert fast == usual


def test_a_nested_object_cut_short_is_decoded_the_usual_way(monkeypatch: Any) -> None:
    """``},"value":[`` outside a string, inside the metric object: the cut is no JSON, and the answer
    is decoded whole, as ``json.loads`` reads it."""
    body = answer(['{"metric":{"a":{"b":"c"},"value":[1,"2"]},"value":[3,"4"]}'])
    fast, usual = both(body, monkeypatch)
    assert fast == usual
    assert fast[0][0] == [({"a": "{'b': 'c'}", "value": "[1, '2']"}, 4.0)]


def test_an_engines_answer_is_read_in_one_pass(monkeypatch: Any) -> None:
    """Nothing of it decoded but the label sets not read before: ``decode`` is never called, and
    each label set's text is decoded once over two refreshes."""
    monkeypatch.setattr(module, "HASH_KEYED", True)
    module._rotate_seen()
    module._rotate_seen()

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("decoded the usual way")

    decoded: list[str] = []
    loads = module.json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        decoded.append(text)
        return loads(text, *args, **kwargs)

    monkeypatch.setattr(module, "decode", refused)
    monkeypatch.setattr(module.json, "loads", counting)
    labels = [{"namespace": "n", "pod": f"p-{i}-2", "pad": "{}" * i} for i in range(3)]
    texts = [series_text(m, "1700000000.5", v) for m, v in zip(labels, ["0.5", "NaN", "2"], strict=True)]
    marked = series_text({"instance": "a:1", "job": "j", MARKER: "p0"}, "1700000000.5", "1")
    for _ in range(2):
        found, stamp, dropped = parse_answer(200, answer([*texts, marked]), 10, True, with_workload)
        assert [(dict(s.labels), s.value) for s in found] == [
            ({"namespace": "n", "pod": "p-0-2", "pad": "", "workload": "p-0"}, 0.5),
            ({"namespace": "n", "pod": "p-2-2", "pad": "{}{}", "workload": "p-2"}, 2.0),
            ({"instance": "a:1", "job": "j", MARKER: "p0"}, 1.0),
        ]
        assert stamp == 1700000000.5
        assert [dict(s.labels)["pod"] for s in dropped] == ["p-1-2"]
        assert all(type(s.labels) is Labels for s in [*found, *dropped])
    assert len(decoded) == 4  # each label set's text once
    with pytest.raises(QueryError, match="gave 3 series, more than max_series_per_rule"):
        parse_answer(200, answer([*texts, marked]), 2, True, with_workload)


def test_with_a_fixed_hash_seed_the_answer_is_decoded(monkeypatch: Any) -> None:
    """No table of label sets read (``HASH_KEYED``): no one pass either."""
    monkeypatch.setattr(module, "HASH_KEYED", False)
    calls: list[int] = []
    decode = module.decode

    def counting(*args: Any) -> Any:
        calls.append(1)
        return decode(*args)

    monkeypatch.setattr(module, "decode", counting)
    found, _, _ = parse_answer(200, answer([series_text({"pod": "p"}, "1", "3")]), 10)
    assert [(dict(s.labels), s.value) for s in found] == [({"pod": "p"}, 3.0)] and calls == [1]
