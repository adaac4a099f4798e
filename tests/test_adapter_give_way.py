"""A refresh's worker threads give way to the event loop while it answers requests
(``adapter/giveway.py``).

Each time the event loop comes back from a request's system call it waits for the interpreter
lock while a worker holds it; at 2,000 requests/s during a refresh at 40,000 GPUs those waits held
the p99 at 77 to 104 ms (docs/fleet-scale.md). The workers' long loops pause briefly, every so
often, while requests are being answered, and never otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from adapter import cache, giveway, labelsets
from adapter.labelsets import Labels
from adapter.selfmetrics import AdapterMetrics
from adapter.sources import evidence, flagpairs, prometheus
from adapter.sources.source_states import MARKER, split_parts
from adapter.vectors import Series, Vector

ITEMS = 10 * giveway.EVERY


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clock]:
    c = Clock()
    monkeypatch.setattr(giveway, "_monotonic", c.monotonic)
    monkeypatch.setattr(giveway, "_sleep", c.sleep)
    monkeypatch.setattr(giveway, "_served", float("-inf"))
    monkeypatch.setattr(giveway, "_local", giveway.threading.local())
    yield c


@pytest.fixture
def worker() -> Iterator[Callable[[Callable[[], Any]], Any]]:
    """Runs a call in one worker thread, which lives as long as the test (this thread stands for
    the event loop's: it calls ``serving``)."""
    with ThreadPoolExecutor(1) as pool:
        yield lambda call: pool.submit(call).result()


def test_a_worker_never_pauses_while_no_request_is_answered(clock: Clock, worker: Any) -> None:
    for _ in range(100):
        worker(giveway.give_way)
        clock.now += giveway.WORK
    assert clock.slept == []
    giveway.serving()
    clock.now += giveway.RECENT + 1e-6  # the last request began that long ago: the loop counts as idle
    worker(giveway.give_way)
    assert clock.slept == []


def test_the_event_loop_s_own_thread_never_pauses(clock: Clock, worker: Any) -> None:
    for _ in range(10):  # a small answer read, or an index built for a request, on the loop
        giveway.serving()
        giveway.give_way()
        clock.now += giveway.WORK
    assert clock.slept == []
    giveway.serving()
    worker(giveway.give_way)  # a worker meanwhile does
    assert clock.slept == [giveway.PAUSE]


def test_while_requests_are_answered_a_worker_pauses_once_per_work_period(
    clock: Clock, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(giveway, "_pauses", 0)
    monkeypatch.setattr(giveway, "_paused", 0.0)
    giveway.serving()
    worker(giveway.give_way)  # its first call: it has run for a while already
    assert clock.slept == [giveway.PAUSE]
    clock.now += giveway.WORK / 2
    giveway.serving()
    worker(giveway.give_way)  # within its work period: runs on
    assert clock.slept == [giveway.PAUSE]
    clock.now += giveway.WORK / 2 + 1e-6
    giveway.serving()
    worker(giveway.give_way)  # past it: pauses again
    assert clock.slept == [giveway.PAUSE, giveway.PAUSE]
    # counted for the adapter's own metrics
    assert giveway.paused() == (2, pytest.approx(2 * giveway.PAUSE))
    registry = AdapterMetrics().registry
    assert registry.get_sample_value("rightsizer_adapter_worker_pauses_total") == 2
    seconds = registry.get_sample_value("rightsizer_adapter_worker_pause_seconds_total")
    assert seconds == pytest.approx(2 * giveway.PAUSE)


def _answer(n: int) -> bytes:
    result = [
        {"metric": {"namespace": "ns", "pod": f"p{i}", "UUID": f"GPU-{i}"}, "value": [1000.5, str(i)]}
        for i in range(n)
    ]
    body = {"status": "success", "data": {"resultType": "vector", "result": result}}
    return json.dumps(body, separators=(",", ":")).encode()  # the engines' compact shape


def _series(n: int, marked: bool = False) -> list[Series]:
    return [
        Series(labelsets.intern({"pod": f"p{i}", **({MARKER: "p0"} if marked else {})}), float(i))
        for i in range(n)
    ]


def _decode() -> None:
    series, _, _ = prometheus.parse_answer(200, _answer(ITEMS), 10**6)
    assert len(series) == ITEMS


def _split() -> None:
    values, found = split_parts(_series(ITEMS // 2) + _series(ITEMS // 2, marked=True), ["q"])
    assert len(values) == len(found["q"]) == ITEMS // 2


def _order() -> None:
    assert len(evidence.in_order([frozenset({("pod", f"p{i}")}) for i in range(ITEMS)])) == ITEMS


def _classify() -> None:
    from adapter.rules import BUILTIN_RULES

    rule = next(r for r in BUILTIN_RULES if r.name == "rightsizer_queue_depth")
    labels = ({"namespace": "ns", "queue": f"q{i}", "instance": "n:1", "job": "e"} for i in range(ITEMS))
    cur = [Series(each, 1.0) for each in labels]
    known = {("n:1", "e"): evidence.Target(1.0, 1000.0, 1000.0)}
    states = evidence.classify(rule, {"cur": cur}, known, 1000.0, evidence.Horizon(3600, 60))
    assert len(states) == ITEMS


def _fold_flags() -> None:
    highs, lows = flagpairs.extremes(_series(ITEMS))
    assert len(highs) == len(lows) == ITEMS


def _index() -> None:
    vector = Vector(_series(ITEMS), 1000.0)
    vector.prepare(["pod"])
    assert "pod" in vector.indexed()


def _intern() -> None:
    assert len(cache.shared(tuple(Series({"pod": f"q{i}"}, 1.0) for i in range(ITEMS)))) == ITEMS


class Holder:
    def __init__(self) -> None:
        self.series = _series(ITEMS)

    def held_labels(self) -> Iterator[Labels]:
        return (s.labels for s in self.series)


def _sweep() -> None:
    holder = Holder()
    labelsets.register(holder)
    labelsets.sweep()
    assert labelsets.size() >= ITEMS


LOOPS: dict[str, Callable[[], None]] = {
    "decoding an answer": _decode,
    "splitting an answer's parts": _split,
    "putting label sets in order": _order,
    "classifying source states (and putting them in order)": _classify,
    "folding a flag pair's answer": _fold_flags,
    "building an index": _index,
    "interning label sets": _intern,
    "sweeping the label sets": _sweep,
}


@pytest.mark.parametrize("loop", LOOPS.values(), ids=list(LOOPS))
def test_a_refresh_loop_gives_way_while_requests_are_answered(
    loop: Callable[[], None], clock: Clock, worker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(prometheus, "HASH_KEYED", True)  # the one-pass reader, whatever the hash seed
    monkeypatch.setattr(giveway, "WORK", 0.0)  # a pause at every call
    monkeypatch.setattr(giveway, "RECENT", 1e9)  # and the requests go on, however long the pauses
    worker(loop)
    assert clock.slept == []  # no request: never
    giveway.serving()
    loop()
    assert clock.slept == []  # on the event loop's thread: never
    worker(loop)
    loops = 2 if loop in (_classify, _sweep) else 1  # each of its loops over the items
    assert len(clock.slept) >= loops * ITEMS // giveway.EVERY


async def test_a_request_tells_the_workers_the_event_loop_is_serving(
    aiohttp_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from adapter.config import load_config
    from adapter.keda.metrics_api import MetricsApiAuth
    from adapter.kubernetes.gate import Gate
    from adapter.rules import BUILTIN_RULES
    from adapter.server import create_app
    from adapter.sources.prometheus import PrometheusSource

    monkeypatch.setattr(giveway, "_served", float("-inf"))
    cfg = load_config(None, {"prometheus": {"url": "http://127.0.0.1:9"}}, environ={})
    source = PrometheusSource(cfg.prometheus, AdapterMetrics())
    app = create_app(
        cache.Cache(BUILTIN_RULES, source, AdapterMetrics()), Gate.off(), AdapterMetrics(),
        MetricsApiAuth(cfg.metrics_api),
    )  # fmt: skip
    client = await aiohttp_client(app)
    before = giveway._monotonic()
    assert (await client.get("/apis/external.metrics.k8s.io/v1beta1")).status == 200
    assert before <= giveway._served <= giveway._monotonic()
