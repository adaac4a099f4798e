"""No client can exhaust the exporter or the adapter: slow, idle and oversized connections against
the real processes on loopback, bounded in count and time. Outcomes only: resident memory under
the manifests' limits, connections closed by the server, a normal scrape still answered, the log
line count."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from adapter_support import ANONYMOUS, adapter, get
from hostile_clients import RssWatch, attack, manifest_memory_limit
from servers import ROOT, Process, exporter, http_get, wait_for

EXPORTER_LIMIT = manifest_memory_limit("exporter")
ADAPTER_LIMIT = manifest_memory_limit("adapter")
NO_EXPORTER = ["--exporter", "http://127.0.0.1:1"]  # the adapter serves (503s) without one


def address(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    assert parts.hostname and parts.port
    return parts.hostname, parts.port


def sample(body: bytes, series: str) -> float:
    m = re.search(rf"^{re.escape(series)} (\S+)$", body.decode(), re.M)
    assert m, f"{series} not in the exposition"
    return float(m.group(1))


def published(url: str, series: str) -> float:
    """A series' value at the exporter's or adapter's /metrics."""
    return sample(get(url + "/metrics")[2], series)


async def test_exporter_header_flood_stays_under_its_memory_limit_and_keeps_scraping() -> None:
    with exporter(["--simulate"]) as p:
        host, port = address(p.url)
        with RssWatch(p.proc.pid) as rss:
            flood = asyncio.create_task(attack(host, port, 300, "big_headers", 8))
            await asyncio.sleep(1)
            status, _, _ = await asyncio.to_thread(http_get, p.url + "/metrics")
            outcome = await flood
        assert rss.peak < EXPORTER_LIMIT, f"peak RSS {rss.peak / 2**20:.0f} MiB"
        assert status == 200
        assert outcome.still_open == 0 and outcome.closed_by_server == outcome.connected > 0
        wait_for(lambda: published(p.url, "rightsizer_http_malformed_requests_total") > 0, 5)
        assert "Traceback" not in p.log()


@pytest.mark.parametrize("scheme", ["https", "http"])
async def test_adapter_header_flood_stays_under_its_memory_limit(scheme: str) -> None:
    insecure = ["--insecure-http"] if scheme == "http" else []
    # /metrics is read without credentials: over HTTPS that is anonymous, served explicitly
    with adapter([*NO_EXPORTER, *insecure], ready=False, env=ANONYMOUS if scheme == "https" else None) as p:
        host, port = address(p.url)
        with RssWatch(p.proc.pid) as rss:
            outcome = await attack(host, port, 300, "big_headers", 8, tls=scheme == "https")
        assert rss.peak < ADAPTER_LIMIT, f"peak RSS {rss.peak / 2**20:.0f} MiB"
        assert outcome.still_open == 0 and outcome.closed_by_server == outcome.connected > 0
        assert published(p.url, "rightsizer_adapter_http_malformed_requests_total") > 0
        assert "Traceback" not in p.log()


def _keep_alive_twice(url: str, pause: float) -> list[bytes]:
    """Two GETs on one connection, ``pause`` seconds apart; the status lines."""
    host, port = address(url)
    request = f"GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
    lines = []
    with socket.create_connection((host, port), timeout=10) as s:
        for i in range(2):
            if i:
                time.sleep(pause)
            s.sendall(request)
            lines.append(s.recv(4096).split(b"\r\n", 1)[0])
    return lines


async def test_exporter_closes_idle_and_slowloris_connections_at_the_header_deadline() -> None:
    with exporter(["--simulate"], env={"RIGHTSIZER_HTTP_HEADER_TIMEOUT_SECONDS": "1"}) as p:
        host, port = address(p.url)
        idle, slow = await asyncio.gather(
            attack(host, port, 100, "idle", 8), attack(host, port, 100, "slowloris", 8)
        )
        for outcome in (idle, slow):  # 200 connections: under the cap of 256, none is evicted
            assert outcome.still_open == 0 and outcome.closed_by_server == outcome.connected == 100
        # A served keep-alive connection is not held to the header deadline, only to the idle timeout.
        assert await asyncio.to_thread(_keep_alive_twice, p.url, 2.5) == [b"HTTP/1.1 200 OK"] * 2
        timeouts = 'rightsizer_http_connections_dropped_total{reason="header_timeout"}'
        wait_for(lambda: published(p.url, timeouts) >= 200, 5, what="200 header timeouts counted")


async def test_adapter_closes_tls_handshakes_that_never_come() -> None:
    with adapter(NO_EXPORTER, ready=False, env={"RIGHTSIZER_ADAPTER_HTTP_HEADER_TIMEOUT_SECONDS": "1"}) as p:
        host, port = address(p.url)
        outcome = await attack(host, port, 100, "idle", 8)  # plain TCP to the TLS port: no ClientHello
        assert outcome.still_open == 0 and outcome.closed_by_server == outcome.connected == 100
        assert get(p.url + "/healthz")[0] == 200


async def test_connection_cap_makes_room_for_a_scraper_by_closing_connections_that_sent_nothing() -> None:
    with exporter(["--simulate"], env={"RIGHTSIZER_HTTP_MAX_CONNECTIONS": "50"}) as p:
        host, port = address(p.url)
        hold = asyncio.create_task(attack(host, port, 120, "idle", 6))
        await asyncio.sleep(2)
        status, _, body = await asyncio.to_thread(http_get, p.url + "/metrics")
        outcome = await hold
        assert status == 200
        assert sample(body, "rightsizer_http_open_connections") <= 50
        assert outcome.closed_by_server >= 70  # evicted to make room, or refused at the cap
        family = "rightsizer_http_connections_dropped_total"
        dropped = [f'{family}{{reason="{r}"}}' for r in ("evicted", "refused")]
        wait_for(lambda: sum(published(p.url, d) for d in dropped) >= 70, 5, what="70 evictions counted")
        # Every slot was given back: at most the scrape before this one is still open.
        wait_for(lambda: published(p.url, "rightsizer_http_open_connections") <= 1, 5, what="slots back")


def _limited_exporter(log: Path, nofile: int) -> Process:
    """The exporter with ``ulimit -n nofile`` (start_module cannot set limits)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    proc = subprocess.Popen(
        [sys.executable, "-m", "exporter", "--simulate", "--listen", "127.0.0.1:0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT, cwd=ROOT, text=True, preexec_fn=limit,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    p = Process(proc, log)
    m = wait_for(lambda: re.search(r"msg=listening address=([0-9.]+):(\d+)", p.log()), 30, what="listening")
    p.url = f"http://{m.group(1)}:{m.group(2)}"
    return p


async def test_out_of_file_descriptors_logs_one_line_and_keeps_serving() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        p = _limited_exporter(Path(tmp) / "exporter.log", 64)
        try:
            host, port = address(p.url)
            outcome = await attack(host, port, 150, "idle", 4)  # 64 descriptors: most wait in the backlog
            assert outcome.connected > 0
            log = p.log()
            assert len(re.findall(r"cannot accept connections", log)) == 1, log[-3000:]
            assert "Traceback" not in log and "out of system resource" not in log
            assert http_get(p.url + "/metrics")[0] == 200  # the attackers left: serving again
            assert p.proc.poll() is None
        finally:
            p.stop()


async def _held_until_closed(host: str, port: int, seconds: float) -> bool:
    """Connect, send nothing, read whatever comes: True when the server closes within ``seconds``."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        async with asyncio.timeout(seconds):
            while await reader.read(65536):
                pass  # the server's HTTP/2 preface
        return True
    except TimeoutError:
        return False
    except OSError:
        return True
    finally:
        writer.transport.abort()


async def test_grpc_listener_caps_connections_and_closes_unfinished_handshakes() -> None:
    import grpc

    from adapter.keda import externalscaler_pb2 as pb
    from adapter.keda import externalscaler_pb2_grpc as pb_grpc

    limits = {
        "RIGHTSIZER_ADAPTER_HTTP_HEADER_TIMEOUT_SECONDS": "1",
        "RIGHTSIZER_ADAPTER_HTTP_MAX_CONNECTIONS": "20",
    }
    with adapter([*NO_EXPORTER, "--insecure-http", "--grpc-listen", "127.0.0.1:0"], False, env=limits) as p:
        host, port = address("grpc://" + p.extra["grpc"])
        closed = await asyncio.gather(*(_held_until_closed(host, port, 8) for _ in range(60)))
        assert all(closed), f"{closed.count(False)} of 60 connections still open"
        async with grpc.aio.insecure_channel(p.extra["grpc"]) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:  # served again: a real answer
                await pb_grpc.ExternalScalerStub(channel).GetMetricSpec(pb.ScaledObjectRef(name="w"))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
