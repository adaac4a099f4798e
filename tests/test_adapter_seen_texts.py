"""Label sets read from their text (adapter/sources/vectorjson.py ``fast``, prometheus.py
``SeenTexts``): a series of the engines' compact shape is handed over undecoded, and a label set
whose text was read in this refresh or the last is not decoded again. What comes out must be what
decoding every series gives, whatever the labels hold, refresh after refresh; the table stays
bounded."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from adapter import labelsets
from adapter.labelsets import Labels
from adapter.sources import prometheus as module
from adapter.sources.prometheus import parse_answer
from adapter.sources.source_states import MARKER
from adapter.sources.vectorjson import decode
from adapter.vectors import with_workload

HOSTILE = [
    {"pod": 'p"},"value":[1,"2"]}', "namespace": "n"},  # an item's end inside a string (escaped quotes)
    {"pod": "p{x}", "namespace": "n"},  # braces: not the fast shape, decoded whole
    {"pod": "p\\u00e9", "namespace": "\u00e9\u4e2d"},
    {"pod": "tab\there", "namespace": "n"},
    {"pod": "p-1-2", "namespace": "n", "__name__": "rightsizer_gpu_utilization_ratio"},
    {"pod": "p-1-2", "namespace": "n"},
    {"pod": "q", "namespace": "n", MARKER: "p0"},
    {"namespace": "n", "pod": "r-1-2"},
    {"namespace": "n", "pod": "r-1-3"},  # one character apart, at the end of the text
]


def body(series: list[tuple[dict[str, str], Any, str]]) -> bytes:
    items = [{"metric": m, "value": [t, v]} for m, t, v in series]
    answer = {"status": "success", "data": {"resultType": "vector", "result": items}}
    return json.dumps(answer, separators=(",", ":")).encode()  # as the engines write it


def convert(item: Any) -> Any:
    return ("series", item["metric"], item["value"][0], item["value"][1])


def normal(data: Any) -> Any:
    """``decode``'s result with every item converted (the whole-body path converts none)."""
    if isinstance(data, dict) and isinstance(data.get("data"), dict):
        result = data["data"].get("result")
        if isinstance(result, list):
            data["data"]["result"] = [convert(i) if isinstance(i, dict) else i for i in result]
    return data


labels = st.dictionaries(
    st.text(min_size=1, max_size=6),
    st.text(alphabet=st.characters(codec="utf-8") | st.sampled_from('{}[]",:\\\x00\x1f'), max_size=10),
    max_size=4,
)
times = st.one_of(
    st.integers(min_value=-(10**12), max_value=10**12), st.floats(allow_nan=False, allow_infinity=False)
)
samples = st.lists(st.tuples(labels, times, st.text(max_size=6)), max_size=6)


@settings(max_examples=300, deadline=None)
@given(samples, st.integers(min_value=0, max_value=30))
def test_a_series_read_from_its_text_is_what_decoding_it_gives(found: Any, cut: int) -> None:
    fast_calls: list[str] = []

    def fast(metric: str, ts: str, value: str) -> Any:
        fast_calls.append(metric)
        return ("series", json.loads(metric), json.loads(ts), value)

    raw = body(found)
    for text in (raw, raw[: len(raw) - cut]):  # whole, and cut short (then everything fails alike)
        try:
            expected: Any = ("ok", normal(json.loads(text)))
        except ValueError:
            expected = ("error", None)
        try:
            got: Any = ("ok", normal(decode(text, convert, fast)))
        except ValueError:
            got = ("error", None)
        assert got == expected


def test_the_engines_compact_series_take_the_fast_path_and_odd_ones_are_decoded() -> None:
    taken: list[str] = []
    decoded: list[Any] = []

    def fast(metric: str, ts: str, value: str) -> Any:
        taken.append(json.loads(metric)["pod"])
        return ("series", json.loads(metric), json.loads(ts), value)

    def slow(item: Any) -> Any:
        decoded.append(item["metric"]["pod"])
        return convert(item)

    raw = body([(m, 1700000000.5, "1") for m in HOSTILE] + [({"pod": "v"}, 1, 'quote"d')])
    data = decode(raw, slow, fast)
    assert [r[1] for r in data["data"]["result"]] == [m for m in HOSTILE] + [{"pod": "v"}]
    # braces in a label and an escaped value text are read whole; everything else from its text
    assert decoded == [HOSTILE[0]["pod"], "p{x}", "v"]
    assert taken == [m["pod"] for m in HOSTILE[2:]]


def parse(series: list[tuple[dict[str, str], Any, str]], derive: Any = None, values_label: Any = None) -> Any:
    return parse_answer(200, body(series), 10**6, True, derive, values_label)


def truth(series: list[tuple[dict[str, str], Any, str]], derive: Any = None) -> Any:
    """What reading every series whole gives, from the series themselves."""
    found, dropped = [], []
    for labels, _, value in series:
        plain = {k: v for k, v in labels.items() if k != "__name__"}
        if derive is not None and MARKER not in plain:
            plain = derive(plain)
        number = float(value)
        (found if math.isfinite(number) else dropped).append((plain, number))
    return found, max(float(t) for _, t, _ in series), dropped


def plain(answer: Any) -> Any:
    found, stamp, dropped = answer
    return [(dict(s.labels), s.value) for s in found], stamp, [(dict(s.labels), s.value) for s in dropped]


def test_every_refresh_reads_what_decoding_gives_values_changing_labels_kept(monkeypatch: Any) -> None:
    monkeypatch.setattr(module, "HASH_KEYED", True)  # whatever PYTHONHASHSEED the tests run with
    first = [(m, 1700000000.5, str(i)) for i, m in enumerate(HOSTILE)]
    then = [(m, 1700000015, str(10 * i) if i else "+Inf") for i, m in enumerate(HOSTILE)]
    for derive in (None, with_workload):
        module._rotate_seen()
        module._rotate_seen()  # nothing read before
        got = [plain(parse(first, derive)), plain(parse(then, derive)), plain(parse(then, derive))]
        assert got == [truth(first, derive), truth(then, derive), truth(then, derive)]
        assert all(type(s.labels) is Labels for s in parse(then, derive)[0])  # shared, never changed
    # one text, two conversions: each its own
    assert parse(first, with_workload)[0][4].labels == {"pod": "p-1-2", "namespace": "n", "workload": "p-1"}
    assert parse(first)[0][4].labels == {"pod": "p-1-2", "namespace": "n"}


def test_a_value_read_from_a_label_follows_the_label_refresh_after_refresh(monkeypatch: Any) -> None:
    """A ``count_values`` answer: the value is a label's (``values_label``), so the label set's text
    decides it, and a marked series keeps its sample's value."""
    monkeypatch.setattr(module, "HASH_KEYED", True)
    key = "rightsizer_adapter_value"
    flags = [
        ({"pod": "p-1-2", key: "1"}, 1, "1"),
        ({"pod": "p-1-2", key: "0"}, 1, "1"),
        ({"pod": "q", MARKER: "p0", key: "7"}, 1, "3"),
    ]
    for _ in range(3):
        found, _, _ = parse(flags, None, key)
        assert [(dict(s.labels), s.value) for s in found] == [
            ({"pod": "p-1-2"}, 1.0),
            ({"pod": "p-1-2"}, 0.0),
            ({"pod": "q", MARKER: "p0", key: "7"}, 3.0),
        ]


def test_the_table_forgets_what_two_refreshes_did_not_read(monkeypatch: Any) -> None:
    """Pods replaced every refresh: the table holds at most what the last two refreshes read."""
    monkeypatch.setattr(module, "HASH_KEYED", True)  # whatever PYTHONHASHSEED the tests run with
    for refresh in range(6):
        pods = [({"pod": f"p-{refresh}-{i}", "namespace": "n"}, 1, "1") for i in range(50)]
        parse(pods)
        labelsets.sweep()  # after every refresh (cache.py)
        seen = module._SEEN[(None, None)]
        assert len(seen.now) + len(seen.before) <= 2 * 50


def test_with_a_fixed_hash_seed_every_series_is_decoded(monkeypatch: Any) -> None:
    """Where ``PYTHONHASHSEED`` fixes the string hash's key, label values could be chosen to
    collide: the table is not used, and the answers are the same."""
    monkeypatch.setattr(module, "HASH_KEYED", False)
    module._rotate_seen()
    module._rotate_seen()
    series = [(m, 1700000000.5, str(i)) for i, m in enumerate(HOSTILE)]
    assert plain(parse(series)) == truth(series)
    seen = module._SEEN.get((None, None))
    assert seen is None or not seen.now  # nothing read through the table
