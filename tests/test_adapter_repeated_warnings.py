"""An adapter in direct mode pointed at a wrong URL (here a real Prometheus's own /metrics, whose
size changes every scrape, so each failure's words differ) warns once, not twice every poll; the
warnings that keep coming are counted and said again with that count at most once a period."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
from adapter_support import adapter
from servers import Process, http_get, prometheus, wait_for

from rightsizer_core import logs
from rightsizer_core.logs import Repeats, shape


@pytest.fixture(scope="module")
def prom() -> Iterator[Process]:
    with prometheus({"self": []}) as p:
        yield p


def served(prom: Process) -> float:
    """How many times Prometheus has served its own /metrics (with code 200)."""
    _, _, body = http_get(prom.url + "/metrics")
    for line in body.decode().splitlines():
        if line.startswith('promhttp_metric_handler_requests_total{code="200"}'):
            return float(line.split()[-1])
    raise AssertionError("no promhttp_metric_handler_requests_total in Prometheus's /metrics")


def test_a_wrong_url_is_one_warning_not_two_a_poll(prom: Process) -> None:
    before = served(prom)
    ours = [1]  # our own reads of the page count too

    def polls() -> float:
        ours[0] += 1
        return served(prom) - before - ours[0]

    with adapter(["--exporter", prom.url, "--insecure-http", "--scrape-interval", "0.5"], ready=False) as p:
        wait_for(lambda: polls() >= 10, 60, interval=0.5, what="ten polls of the wrong URL by the adapter")
        lines = p.log().splitlines()
    failed = [line for line in lines if 'msg="exporter scrape failed"' in line]
    no_values = [line for line in lines if 'msg="rules have no values"' in line]
    assert len(failed) == 1 and "not a Rightsizer exporter's /metrics" in failed[0], failed
    assert len(no_values) == 1, no_values


def test_repeats_are_counted_and_said_once_a_period(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    now = [1000.0]
    monkeypatch.setattr(logs.time, "monotonic", lambda: now[0])
    log = logging.getLogger("rightsizer.test.repeats")
    repeats = Repeats(period=60)
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert repeats.warning("a", log, "scrape failed", reason="r1")
        for second in range(1, 60):  # one a second: counted, not said
            now[0] = 1000.0 + second
            assert not repeats.warning("a", log, "scrape failed", reason=f"r{second + 1}")
        assert repeats.warning("b", log, "scrape failed", reason="other key")  # keys are apart
        now[0] = 1060.0
        assert repeats.warning("a", log, "scrape failed", reason="r61")  # a period on: said, with the count
        repeats.clear("a")
        now[0] = 1061.0
        assert repeats.warning("a", log, "scrape failed", reason="again")  # cleared: said at once
    said = [(r.getMessage(), getattr(r, "reason", None), getattr(r, "repeated", None))
            for r in caplog.records]  # fmt: skip
    assert said == [
        ("scrape failed", "r1", None),
        ("scrape failed", "other key", None),
        ("scrape failed", "r61", 59),
        ("scrape failed", "again", None),
    ]


def test_remembered_keys_are_bounded() -> None:
    repeats = Repeats(max_keys=3)
    log = logging.getLogger("rightsizer.test.repeats")
    for key in range(10):
        repeats.warning(key, log, "failed")
    assert repeats.warning(0, log, "failed")  # forgotten, so said again


def test_another_cause_is_said_at_once(caplog: pytest.LogCaptureFixture) -> None:
    """Only measures are blanked: a failure that differs in its words or status is another key."""
    log = logging.getLogger("rightsizer.test.repeats")
    repeats = Repeats(period=60)
    with caplog.at_level(logging.WARNING, logger=log.name):
        assert repeats.warning(("x", shape("page of 1234 bytes")), log, "failed")
        assert not repeats.warning(("x", shape("page of 1290 bytes")), log, "failed")
        assert repeats.warning(("x", shape("HTTP 404")), log, "failed")
        assert shape("HTTP 404") != shape("HTTP 503")
        assert shape("3.25 s behind, 12345 bytes") == shape("0.5 s behind, 2048 bytes")
