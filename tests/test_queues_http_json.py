"""Queue depth from HTTP endpoints answering JSON, served by a real aiohttp server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from queue_fakes import json_body
from queue_harness import QueueHarness, eventually
from queue_servers import FakeHttpServer


async def test_paths_numbers_strings_and_quantities(tmp_path: Path) -> None:
    doc: dict[str, Any] = {
        "queue": {"waiting": 12, "running": 3},
        "workers": [{"backlog": 1}, {"backlog": "1500m"}],
        "stats": {"pending.count": "42"},
    }
    token = tmp_path / "token"
    token.write_text("t0k3n")
    with FakeHttpServer() as srv:
        srv.route("/status", body=lambda: json_body(doc), content_type="application/json")
        srv.route(
            "/keyed",
            body=lambda: json_body(doc),
            content_type="application/json",
            require={"X-API-KEY": "k1", "Authorization": "Bearer t0k3n"},
        )
        entries = [
            {
                "name": "main",
                "kind": "http_json",
                "url": srv.url("/status"),
                "path": "queue.waiting",
                "in_flight_path": "queue.running",
                "labels": {"namespace": "jobs"},
            },
            {"name": "second", "kind": "http_json", "url": srv.url("/status"), "path": "workers.1.backlog"},
            {
                "name": "escaped",
                "kind": "http_json",
                "url": srv.url("/status"),
                "path": "$.stats.pending\\.count",
            },
            {
                "name": "keyed",
                "kind": "http_json",
                "url": srv.url("/keyed"),
                "path": "workers.-2.backlog",
                "headers": {"X-API-KEY": "k1"},
                "bearer_token_file": str(token),
            },
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: all(h.depth(str(e["name"])) is not None for e in entries), what="depths")
            series = h.series()
            main = (("kind", "http_json"), ("namespace", "jobs"), ("queue", "main"))
            assert series[("rightsizer_queue_depth", main)] == 12
            assert series[("rightsizer_queue_in_flight", main)] == 3
            assert h.depth("second") == 1.5
            assert h.depth("escaped") == 42
            assert h.depth("keyed") == 1
            doc["queue"]["waiting"] = 0
            await eventually(lambda: h.depth("main") == 0, what="depth follows")


FAULTS = {
    "not JSON": (b"<html>oops</html>", 200, "answer is not JSON: Expecting value: line 1 column 1 (char 0)"),
    "path missing": (b'{"queue": {}}', 200, "path queue.waiting not found (no queue.waiting)"),
    "not a number": (
        b'{"queue": {"waiting": "many"}}',
        200,
        "value at queue.waiting is not a number: 'many'",
    ),
    "null": (b'{"queue": {"waiting": null}}', 200, "value at queue.waiting is null, not a number"),
    "NaN": (b'{"queue": {"waiting": NaN}}', 200, "value at queue.waiting is NaN"),
    "non-200": (b'{"queue": {"waiting": 1}}', 500, "HTTP 500 Internal Server Error"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
async def test_faults_mark_the_source_down_and_it_recovers(fault: str) -> None:
    body, status, reason = FAULTS[fault]
    with FakeHttpServer() as srv:
        srv.route("/q", body=b'{"queue": {"waiting": 5}}', content_type="application/json")
        entries = [
            {
                "name": "q",
                "kind": "http_json",
                "url": srv.url("/q"),
                "path": "queue.waiting",
                "backoff_max": 0.3,
            }
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: h.depth("q") == 5, what="first depth")
            srv.route("/q", body=body, status=status, content_type="application/json")
            await eventually(lambda: h.up("q") == 0, what="down")
            assert h.api("q")["error"] == reason
            assert h.depth("q") is None
            srv.route("/q", body=b'{"queue": {"waiting": 9}}', content_type="application/json")
            await eventually(lambda: h.up("q") == 1 and h.depth("q") == 9, what="recovery")
