"""Query answers decoded series by series (adapter/sources/vectorjson.py) give exactly what
``json.loads`` gives, or fail as it fails, for every shape; large answers are read off the event
loop's thread.

The shapes are the engines' own: Prometheus 2.42 (``{"status":"success","data":{...}}``, warnings
after ``data``), VictoriaMetrics (``"isPartial"`` before ``data``, ``stats`` after it); the answers
of real engines go through the same decoder in test_adapter_source_states.py.
"""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_adapter_prometheus import FakePrometheus, cache_for, prom, vector

from adapter.sources import prometheus as prometheus_source
from adapter.sources.vectorjson import decode

__all__ = ["prom"]

ITEM = '{"metric":{"__name__":"up","instance":"a:1","job":"j"},"value":[1700000000.5,"1"]}'
LABEL_WITH_BRACKETS = '{"metric":{"pod":"p]},{\\"metric\\":x","n":"\\u00e9"},"value":[1.5,"2"]}'
BODIES = [
    '{"status":"success","data":{"resultType":"vector","result":[]}}',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM},{ITEM}]}}}}',
    f'{{"status":"success","isPartial":false,"data":{{"resultType":"vector","result":[{ITEM}]}}}}',
    f'{{"status":"success","isPartial":true,"data":{{"resultType":"vector","result":[{ITEM}]}}}}',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM}]}},"warnings":["store b down"]}}',
    f'{{"status":"success","isPartial":false,"data":{{"resultType":"vector","result":[{ITEM}]}},'
    f'"stats":{{"seriesFetched":"1","executionTimeMsec":0}}}}',
    f'  {{"status":"success","data":{{"resultType":"vector","result":[ {ITEM} , {LABEL_WITH_BRACKETS} ] }} '
    "} ",
    '{"status":"success","data":{"resultType":"scalar","result":[1.5,"2"]}}',
    '{"status":"error","errorType":"bad_data","error":"parse error"}',
    # malformed or hostile: json.loads decides
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM},]}}}}',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM}]}}}} trailing',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM}]',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM}],"more":1}}}}',
    f'{{"status":"success","isPartial":true,"data":{{"resultType":"vector","result":[{ITEM}]}},"isPartial":false}}',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM}]}},"status":"error"}}',
    f'{{"status":"success","data":{{"resultType":"vector","result":[{ITEM} {ITEM}]}}}}',
    '{"status":"success","data":{"resultType":"vector","result":[NaN]}}',
    "",
    "not json",
]


def outcome(decoder: Any, body: bytes) -> Any:
    try:
        return ("ok", decoder(body))
    except ValueError:
        return ("error", None)


@pytest.mark.parametrize("body", BODIES)
def test_every_shape_decodes_as_json_loads_does(body: str) -> None:
    assert outcome(decode, body.encode()) == outcome(json.loads, body.encode())


def test_bytes_that_are_not_utf8_fail_as_json_loads_fails() -> None:
    body = b'{"status":"success","data":{"resultType":"vector","result":[{"metric":{"a":"\xff"}}]}}'
    assert outcome(decode, body) == outcome(json.loads, body) == ("error", None)


labels = st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=12), max_size=4)
samples = st.lists(st.tuples(labels, st.floats(allow_nan=False), st.text(max_size=6)), max_size=6)


@settings(max_examples=200, deadline=None)
@given(samples, st.sampled_from(["", '"isPartial":false,']), st.sampled_from(["", ',"warnings":["w"]']),
       st.integers(min_value=0, max_value=40))  # fmt: skip
def test_any_vector_answer_decodes_as_json_loads_does(found: Any, partial: str, tail: str, cut: int) -> None:
    items = [{"metric": m, "value": [t, v]} for m, t, v in found]
    body = (
        f'{{"status":"success",{partial}"data":{{"resultType":"vector","result":'
        f"{json.dumps(items, separators=(',', ':'))}}}{tail}}}"
    ).encode()
    assert outcome(decode, body) == outcome(json.loads, body)
    assert outcome(decode, body[:-cut]) == outcome(json.loads, body[:-cut])  # cut short: both fail


async def test_large_answers_are_read_off_the_event_loop(prom: FakePrometheus, monkeypatch: Any) -> None:
    """A query answering more than THREAD_BYTES is decoded in a worker thread, a small one inline."""
    threads: list[int] = []
    parse = prometheus_source.parse_answer

    def recording(*args: Any) -> Any:
        threads.append(threading.get_ident())
        return parse(*args)

    monkeypatch.setattr(prometheus_source, "parse_answer", recording)
    _, source, _ = await cache_for(prom)
    many = [({"queue": f"q{i:05d}", "namespace": "prod", "padding": "x" * 40}, "1") for i in range(4000)]
    for answer, off_loop in ((many, True), (many[:10], False)):
        prom.answer = lambda q, answer=answer: vector(answer)
        threads.clear()
        series, _, _ = await source.query("rightsizer_queue_depth")
        assert len(series) == len(answer)
        assert (threads[-1] != threading.get_ident()) is off_loop
    await source.close()
