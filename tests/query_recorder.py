"""An HTTP proxy in front of a Prometheus-compatible engine that keeps each query it forwards and
how many series the engine answered (a ``vector`` or ``matrix`` result's length)."""

from __future__ import annotations

import contextlib
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Answer:
    query: str
    series: int  # -1 when the engine answered an error
    status: int = 200
    seconds: float = 0.0  # how long the engine took to answer
    headers: dict[str, str] = field(default_factory=dict)  # the request's headers, as sent


@dataclass
class Recorder:
    upstream: str
    url: str = ""  # the proxy's base URL
    answers: list[Answer] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


@contextlib.contextmanager
def recording(upstream: str) -> Iterator[Recorder]:
    """A proxy on a free loopback port forwarding POSTs to ``upstream``; yields its Recorder."""
    rec = Recorder(upstream)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            request = urllib.request.Request(
                rec.upstream + self.path, data=body, headers={"Content-Type": self.headers["Content-Type"]}
            )
            began = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=600) as response:
                    status, raw = response.status, response.read()
            except urllib.error.HTTPError as exc:  # the engine's error goes back as it is
                status, raw = exc.code, exc.read()
            query = urllib.parse.parse_qs(body.decode())["query"][0]
            result = json.loads(raw).get("data", {}).get("result") if status == 200 else None
            with rec.lock:
                took = time.monotonic() - began
                series = len(result) if result is not None else -1
                rec.answers.append(Answer(query, series, status, took, dict(self.headers.items())))
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    rec.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield rec
    finally:
        server.shutdown()
        server.server_close()
