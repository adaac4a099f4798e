"""``rightsizer report`` pointed at a server that is not the Prometheus query API (a web page, the
exporter itself) says so in one line and exits 2, instead of printing the page it got."""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PAGE = (
    b"<!DOCTYPE html>\n<html>\n<head>\n<title>404</title>\n</head>\n<body>\n"
    + b"<h1>Not Found</h1>\n</body>\n</html>\n"
)


class _WebSite(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.send_response(404)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def website() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _WebSite)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_web_page_is_one_line(website: str) -> None:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", website]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.count("\n") == 1, out.stderr
    assert "is not the Prometheus query API" in out.stderr and "404" in out.stderr
    assert "<" not in out.stderr
