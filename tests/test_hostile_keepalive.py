"""Connections that were served and then sit idle, or that stop reading their answer, cannot lock a
probe or a scraper out: the real exporter and adapter (over TLS) at a small connection cap.

At the cap the listener closes, in this order, a connection that never sent a request, the one idle
longest between requests, the oldest whose client stopped reading; and a response not read within
``http.response_timeout_seconds`` closes its connection. Outcomes only: the probe's and the
scraper's answers, the scraper's own connection kept, the counters the programs publish.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

from adapter_support import adapter, get
from servers import exporter, http_get, wait_for

CAP = 40
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
UNAUTHENTICATED = b"GET /apis/external.metrics.k8s.io/v1beta1 HTTP/1.1\r\nHost: x\r\n\r\n"
_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
_TLS.check_hostname, _TLS.verify_mode = False, ssl.CERT_NONE


def connect(url: str, receive_buffer: int | None = None) -> socket.socket:
    parts = urlsplit(url)
    sock = socket.socket()
    if receive_buffer is not None:  # set before connecting: the window the server may fill
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.connect((parts.hostname, parts.port))
    return _TLS.wrap_socket(sock) if parts.scheme == "https" else sock


def exchange(sock: socket.socket, request: bytes) -> int:
    """Send ``request``, read one whole answer (Content-Length framed); its status."""
    sock.sendall(request)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed before answering")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lengths = [h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
    length = int(lengths[0].split(b":")[1])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise ConnectionResetError("closed in the middle of the answer")
        body += chunk
    return int(head.split(b" ", 2)[1])


def probe(url: str) -> int:
    """What a liveness probe does: a new connection, GET /healthz."""
    with connect(url) as sock:
        return exchange(sock, HEALTH)


@contextmanager
def parked(url: str, count: int, request: bytes) -> Iterator[list[socket.socket]]:
    """``count`` connections that each complete ``request`` and then sit idle, kept open."""
    socks = []
    try:
        for _ in range(count):
            sock = connect(url)
            socks.append(sock)
            exchange(sock, request)
        yield socks
    finally:
        for sock in socks:
            sock.close()


def dropped(url: str, prefix: str, reason: str) -> float:
    body = (get if url.startswith("https") else http_get)(url + "/metrics")[2].decode()
    line = f'{prefix}_connections_dropped_total{{reason="{reason}"}} '
    return float(next(x for x in body.splitlines() if x.startswith(line)).split()[-1])


def closed_by_server(sock: socket.socket) -> bool:
    """Whether the server has closed ``sock`` (whatever it had sent before is read and dropped)."""
    sock.settimeout(2)
    try:
        while sock.recv(1 << 20):
            pass
        return True
    except TimeoutError:
        return False
    except OSError:
        return True  # reset


def evicts_idle_connections_oldest_first(url: str, request: bytes) -> None:
    with connect(url) as scraper:
        assert exchange(scraper, HEALTH) == 200
        with parked(url, CAP - 1, request) as parkers:  # now at the cap
            assert exchange(scraper, HEALTH) == 200  # the scraper is the latest to have been served
            time.sleep(1.1)  # connections idle a moment are kept (SETTLED_SECONDS)
            assert probe(url) == 200  # the connection idle longest made room: the first parked
            assert closed_by_server(parkers[0]) and not closed_by_server(parkers[1])
            for sock in parkers[1:]:  # served again, in order: now the scraper has been idle longest
                assert exchange(sock, request) in (200, 401)
            assert exchange(parkers[1], request) in (200, 401)  # ... and parkers[2] next
            with parked(url, 1, request):  # at the cap again
                time.sleep(1.1)
                assert probe(url) == 200
                assert closed_by_server(scraper) and not closed_by_server(parkers[2])
                with parked(url, 1, request):
                    time.sleep(1.1)
                    assert probe(url) == 200
                    assert closed_by_server(parkers[2])
                    assert not closed_by_server(parkers[1]) and not closed_by_server(parkers[3])


def test_exporter_evicts_idle_keep_alive_connections_for_a_probe_and_keeps_the_scraper() -> None:
    with exporter(["--simulate"], env={"RIGHTSIZER_HTTP_MAX_CONNECTIONS": str(CAP)}) as p:
        evicts_idle_connections_oldest_first(p.url, HEALTH)
        wait_for(lambda: dropped(p.url, "rightsizer_http", "evicted") >= 3, 10, what="3 evictions counted")
        assert "Traceback" not in p.log()


def test_adapter_evicts_connections_parked_after_a_401_for_a_probe() -> None:
    env = {"RIGHTSIZER_ADAPTER_HTTP_MAX_CONNECTIONS": str(CAP)}
    with adapter(["--exporter", "http://127.0.0.1:1"], ready=False, env=env) as p:
        with connect(p.url) as sock:
            assert exchange(sock, UNAUTHENTICATED) == 401  # what each parked connection gets
        evicts_idle_connections_oldest_first(p.url, UNAUTHENTICATED)
        log = p.log()  # its /metrics needs credentials: the warning line says what happened
        assert 'msg="connection limit reached: closing idle keep-alive connections"' in log, log[-2000:]
        assert "Traceback" not in log


def answering(sock: socket.socket, seconds: float = 5) -> bool:
    """Whether the server writes an answer on ``sock`` within ``seconds`` (peeked: nothing is read)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            return bool(sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT))  # b"": closed by the server
        except BlockingIOError:
            time.sleep(0.05)
        except OSError:
            return False
    return False


def test_slow_readers_are_evicted_for_a_probe_and_closed_at_the_response_deadline() -> None:
    # The response deadline is long enough that on a loaded machine the probe still gets in by
    # eviction, before any stalled answer reaches it.
    env = {"RIGHTSIZER_HTTP_MAX_CONNECTIONS": str(CAP), "RIGHTSIZER_HTTP_RESPONSE_TIMEOUT_SECONDS": "10"}
    with exporter(["--simulate"], env=env) as p:
        readers: list[socket.socket] = []
        try:
            for _ in range(CAP):
                # 40 scrapes of ~150 KB each, pipelined, never read: more than the kernel buffers, so
                # every connection is stalled writing an answer when the probe comes.
                readers.append(connect(p.url, receive_buffer=4096))
                readers[-1].sendall(SCRAPE * 40)
            # The cap is full of stalled answers (a reader refused because a connection of the
            # readiness check was still open is replaced).
            for i, sock in enumerate(readers):
                if not answering(sock):
                    sock.close()
                    readers[i] = connect(p.url, receive_buffer=4096)
                    readers[i].sendall(SCRAPE * 40)
            assert all(answering(sock) for sock in readers)
            time.sleep(1.5)  # stalled for over a second (SETTLED_SECONDS)
            assert probe(p.url) == 200  # the oldest stalled connection made room
            # The others are closed at the response deadline: a stalled answer holds no slot for good.
            wait_for(lambda: dropped(p.url, "rightsizer_http", "response_timeout") >= CAP - 2, 30)
            assert dropped(p.url, "rightsizer_http", "evicted") >= 1
            assert sum(closed_by_server(sock) for sock in readers) == CAP
        finally:
            for sock in readers:
                sock.close()
        assert "Traceback" not in p.log()
