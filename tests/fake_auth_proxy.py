"""An authenticating proxy in front of a real Prometheus, answering as kube-rbac-proxy does:
``401 Unauthorized`` (text/plain ``Unauthorized``) without a bearer token it knows, ``403
Forbidden`` (text/plain naming the user and the verb) for a token it knows without the right to
query, and the upstream's own answer, forwarded, for an allowed token. Plain HTTP on loopback, in a
thread."""

from __future__ import annotations

import contextlib
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ALLOWED = "allowed-token"
NO_RIGHTS = "reader-without-rights"


@contextlib.contextmanager
def auth_proxy(upstream: str) -> Iterator[str]:
    """Yields the proxy's base URL."""

    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: bytes, content_type: str = "text/plain; charset=utf-8") -> None:
            self.send_response(code)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _handle(self, method: str) -> None:
            data = self.rfile.read(int(self.headers.get("Content-Length") or 0)) if method == "POST" else None
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            if token == NO_RIGHTS:
                user = "system:serviceaccount:monitoring:reader"
                why = f'Forbidden (user={user}, verb={method.lower()}, resource=, subresource=)\n'
                return self._answer(403, why.encode())
            if token != ALLOWED:
                return self._answer(401, b"Unauthorized\n")
            request = urllib.request.Request(upstream + self.path, data=data, method=method)
            if self.headers.get("Content-Type"):
                request.add_header("Content-Type", self.headers["Content-Type"])
            try:
                with urllib.request.urlopen(request, timeout=30) as resp:
                    return self._answer(resp.status, resp.read(), resp.headers.get("Content-Type", ""))
            except urllib.error.HTTPError as exc:
                return self._answer(exc.code, exc.read(), exc.headers.get("Content-Type", ""))

        def do_GET(self) -> None:
            self._handle("GET")

        def do_POST(self) -> None:
            self._handle("POST")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
