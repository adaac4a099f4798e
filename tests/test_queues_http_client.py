"""The queue sources' HTTP client against real servers: keep-alive reuse, a server dropping idle
connections, chunked and unframed bodies, size cap, non-HTTP answers, redirects and TLS."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

import pytest
import trustme
from queue_fakes import tgi_metrics
from queue_harness import QueueHarness, eventually
from queue_servers import FakeHttpServer, RawTcpServer

TGI = tgi_metrics(5, 1)


def tgi_entry(url: str, **extra: object) -> dict[str, object]:
    return {"name": "tgi", "kind": "tgi", "url": url, **extra}


async def test_one_keep_alive_connection_serves_every_poll() -> None:
    with FakeHttpServer() as srv:
        route = srv.route("/metrics", body=TGI)
        async with QueueHarness([tgi_entry(srv.url("/metrics"))]) as h:
            await eventually(lambda: route.requests >= 5, what="five polls")
            assert h.depth("tgi") == 5
            assert len(route.peers) == 1, "every poll reused the same connection"
            headers = route.last_headers
            assert headers["Host"] == f"127.0.0.1:{srv.port}"
            assert headers["User-Agent"].startswith("rightsizer-exporter/")
            assert "text/plain" in headers["Accept"]


async def test_a_server_that_drops_reused_connections_is_retried_on_a_new_one() -> None:
    async def once_per_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n" % len(TGI) + TGI
        )
        await writer.drain()
        await reader.readuntil(b"\r\n\r\n")  # the next request on this connection: hang up instead

    with RawTcpServer(once_per_connection) as srv:
        async with QueueHarness([tgi_entry(srv.url())]) as h:
            await eventually(lambda: srv.connections >= 4, what="several connections")
            assert h.up("tgi") == 1 and h.depth("tgi") == 5
            assert h.api("tgi")["error"] is None


async def test_unframed_bodies_end_with_the_connection_and_chunked_bodies_are_joined() -> None:
    async def http10(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\n" + TGI)
        await writer.drain()

    big = TGI + b"# padding\n" * 300_000  # about 3 MB in 1 MiB chunks
    with RawTcpServer(http10) as raw, FakeHttpServer() as srv:
        srv.route("/chunked", body=big, chunked=True)
        entries = [tgi_entry(raw.url()), {"name": "chunked", "kind": "tgi", "url": srv.url("/chunked")}]
        async with QueueHarness(entries) as h:
            await eventually(lambda: h.depth("tgi") == 5 and h.depth("chunked") == 5, what="both depths")
            await eventually(lambda: raw.connections >= 3, what="a new connection per answer")
            assert h.up("tgi") == 1


async def test_oversized_answers_non_http_answers_and_redirects_are_faults() -> None:
    async def ssh(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: int) -> None:
        writer.write(b"SSH-2.0-OpenSSH_9.2p1 Debian-2\r\n")
        await writer.drain()
        await asyncio.sleep(1)

    huge = b"tgi_queue_size 1\n" + b"#" * (17 * 2**20)
    with RawTcpServer(ssh) as raw, FakeHttpServer() as srv:
        srv.route("/huge", body=huge, chunked=True)
        srv.route("/moved", status=302, body=b"")
        entries = [
            {"name": "huge", "kind": "tgi", "url": srv.url("/huge")},
            {"name": "ssh", "kind": "tgi", "url": raw.url()},
            {"name": "moved", "kind": "tgi", "url": srv.url("/moved")},
        ]
        async with QueueHarness(entries) as h:
            await eventually(lambda: all(h.up(n) == 0 for n in ("huge", "ssh", "moved")), what="all down")
            assert h.api("huge")["error"] == "answer larger than 16 MiB (max_body_bytes)"
            assert h.api("ssh")["error"].startswith("not an HTTP answer")
            assert h.api("moved")["error"] == "HTTP 302 Found"


@pytest.fixture(scope="module")
def tls() -> tuple[trustme.CA, ssl.SSLContext]:
    ca = trustme.CA()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(context)
    return ca, context


async def test_https_with_a_ca_file_without_it_and_insecure(
    tls: tuple[trustme.CA, ssl.SSLContext], tmp_path: Path
) -> None:
    ca, context = tls
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    with FakeHttpServer(ssl_context=context) as srv:
        srv.route("/metrics", body=TGI)
        url = srv.url("/metrics")
        assert url.startswith("https://")
        entries = [
            {"name": "verified", "kind": "tgi", "url": url, "tls_ca_file": str(ca_file)},
            {"name": "insecure", "kind": "tgi", "url": url, "tls_insecure_skip_verify": True},
            {"name": "untrusted", "kind": "tgi", "url": url},
        ]
        async with QueueHarness(entries) as h:
            await eventually(
                lambda: all(h.up(str(e["name"])) is not None for e in entries), what="first polls"
            )
            assert h.depth("verified") == 5 and h.depth("insecure") == 5
            assert h.up("untrusted") == 0
            assert "CERTIFICATE_VERIFY_FAILED" in h.api("untrusted")["error"]
            assert h.api("untrusted")["error"].startswith(f"cannot connect to 127.0.0.1:{srv.port}: TLS")
