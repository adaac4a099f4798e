"""Settings of a hardened HTTP listener, shared by the exporter's and the adapter's ``http`` section.

Fields carry ``doc``/``min``/``max`` metadata as every other settings schema does, so the
configuration loader checks them and the README's reference table is generated from them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


def _limit(default: float, doc: str, minimum: float, maximum: float) -> Any:
    return field(default=default, metadata={"doc": doc, "min": minimum, "max": maximum, "env": True})


@dataclass(frozen=True)
class ListenerLimits:
    header_timeout_seconds: float = _limit(
        10.0,
        "A client must send a request's line and headers within this time (from connecting, or from the "
        "first byte of a later request on the connection; also the TLS handshake deadline), or the "
        "connection is closed.",
        0.1,
        300,
    )
    idle_timeout_seconds: float = _limit(
        90.0,
        "An idle keep-alive connection is closed after this long (Prometheus and Kubernetes clients "
        "reuse connections idle up to 90 s and retry a GET the server closed).",
        1,
        3600,
    )
    response_timeout_seconds: float = _limit(
        30.0,
        "A response must be answered and read by the client within this time from its request's head, "
        "or the connection is closed (a client that stops reading holds it no longer).",
        1,
        3600,
    )
    max_connections: int = _limit(
        256,
        "Open connections on the listener (TLS handshakes included). At the cap one is closed to make "
        "room: the oldest that has not sent a complete request, else the one idle longest between "
        "requests, else the oldest whose client stopped reading its response (idle or stalled for at "
        "least a second); when none is, the new one is.",
        1,
        100000,
    )
    max_request_line_bytes: int = _limit(
        8190, "Longest request line (method, URL, version); longer: 414.", 256, 65536
    )
    max_header_line_bytes: int = _limit(8190, "Longest header line; longer: 431.", 256, 65536)
    max_headers: int = _limit(100, "Most header lines in a request; more: 431.", 8, 1000)
    max_header_bytes: int = _limit(
        32768, "Most bytes of request line and headers together; more: 431.", 1024, 1048576
    )
