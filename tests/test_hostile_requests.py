"""Malformed and odd requests against the real exporter and adapter on loopback: each is refused
with a defined answer and one debug line, counted in a metric; format negotiation; the KEDA gRPC
listener's start-up failures."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trustme
from adapter_support import adapter, get
from hostile_clients import raw_request
from servers import ROOT, exporter, free_port, wait_for
from test_hostile_listeners import NO_EXPORTER, address, published

MALFORMED = [
    b"GARBAGE\r\n\r\n",  # no method, path or version
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n",  # header without a colon
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Long: " + b"a" * 9000 + b"\r\n\r\n",  # header line too long
    b"GET /metrics HTTP/1.1\r\n" + b"".join(b"X-%d: y\r\n" % i for i in range(120)) + b"\r\n",  # 120 headers
    b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n",
]
ROUNDS = 60  # 300 malformed requests per program


async def _send_malformed(url: str) -> list[bytes]:
    host, port = address(url)
    statuses = []
    for _ in range(ROUNDS):
        for request in MALFORMED:
            answer = await raw_request(host, port, request)
            statuses.append(answer.split(b" ", 2)[1] if answer.startswith(b"HTTP/1.") else answer[:40])
    return statuses


async def test_exporter_refuses_malformed_requests_with_one_debug_line_each() -> None:
    with exporter(["--simulate", "--log-level", "debug"]) as p:
        statuses = await _send_malformed(p.url)
        assert set(statuses) <= {b"400", b"431"} and len(statuses) == ROUNDS * len(MALFORMED)
        n = len(statuses)
        wait_for(lambda: published(p.url, "rightsizer_http_malformed_requests_total") == n, 5, what=f"{n}")
        log = p.log()
        one_line = r'level=debug logger=rightsizer.http msg="malformed request refused"'
        assert len(re.findall(one_line, log)) == n
        assert "Traceback" not in log and "level=error" not in log


async def test_adapter_refuses_malformed_requests_with_one_debug_line_each() -> None:
    with adapter([*NO_EXPORTER, "--insecure-http", "--log-level", "debug"], ready=False) as p:
        statuses = await _send_malformed(p.url)
        assert set(statuses) <= {b"400", b"431"} and len(statuses) == ROUNDS * len(MALFORMED)
        assert published(p.url, "rightsizer_adapter_http_malformed_requests_total") == len(statuses)
        log = p.log()
        assert log.count('msg="malformed request refused"') == len(statuses)
        assert "Traceback" not in log and "level=error" not in log


@pytest.mark.parametrize("program", ["exporter", "adapter"])
async def test_a_request_without_http_version_is_refused_not_answered_as_http_09(program: str) -> None:
    insecure_adapter = [*NO_EXPORTER, "--insecure-http"]
    with exporter(["--simulate"]) if program == "exporter" else adapter(insecure_adapter, False) as p:
        answer = await raw_request(*address(p.url), b"GET /metrics\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n"), answer[:80]
    assert b"Connection: close" in answer and b"HELP" not in answer


async def test_adapter_answers_an_overlong_url_with_a_status_not_an_echo() -> None:
    with adapter([*NO_EXPORTER, "--insecure-http"], ready=False) as p:
        path = "/apis/external.metrics.k8s.io/v1beta1/namespaces/llm/q?labelSelector=" + "a" * 9000
        answer = await raw_request(*address(p.url), f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 414 ") and b"application/json" in head
    status = json.loads(body)
    assert status["kind"] == "Status" and status["code"] == 414 and "aaaa" not in status["message"]


@pytest.mark.parametrize(
    ("accept", "openmetrics"),
    [
        ("application/openmetrics-text;q=0", False),
        ("application/openmetrics-text;version=7.0.0", False),  # a version we do not produce
        ("application/openmetrics-text;version=7.0.0,text/plain;version=0.0.4;q=0.1", False),
        ("application/openmetrics-text;version=1.0.0;q=0.2,text/plain;version=0.0.4;q=0.9", False),
        ("application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,"
         "application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=0.0.4;q=0.3,*/*;q=0.2", True),
        ("application/openmetrics-text", True),
    ],
)
def test_metrics_format_negotiation(golden_exporter: str, accept: str, openmetrics: bool) -> None:
    status, headers, body = get(golden_exporter + "/metrics", {"Accept": accept})
    assert status == 200
    want = "application/openmetrics-text; version=1.0.0;" if openmetrics else "text/plain; version=0.0.4;"
    assert headers["Content-Type"].startswith(want)
    assert body.rstrip().endswith(b"# EOF") == openmetrics


@pytest.fixture(scope="module")
def golden_exporter() -> object:
    with exporter(["--simulate", "golden"]) as p:
        yield p.url


def _adapter_exit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter", *NO_EXPORTER, "--insecure-http", "--listen", "127.0.0.1:0", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=30,
    )


def test_grpc_port_in_use_fails_the_start_in_one_line() -> None:
    port = free_port()
    with adapter([*NO_EXPORTER, "--insecure-http", "--grpc-listen", f"127.0.0.1:{port}"], ready=False):
        second = _adapter_exit("--grpc-listen", f"127.0.0.1:{port}")
    assert second.returncode == 2
    assert second.stderr.strip() == (
        f"rightsizer-adapter: cannot listen on 127.0.0.1:{port} for gRPC: address already in use"
    )


def test_grpc_port_taken_by_another_program_fails_the_start() -> None:
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        result = _adapter_exit("--grpc-listen", f"127.0.0.1:{other.getsockname()[1]}")
    assert result.returncode == 2 and "address already in use" in result.stderr


def test_invalid_grpc_tls_files_are_named_with_the_reason(tmp_path: Path) -> None:
    ca = trustme.CA()
    cert = ca.issue_cert("adapter")
    other = ca.issue_cert("other")
    cert_file, key_file, other_key = tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "other.key"
    cert.cert_chain_pems[0].write_to_path(cert_file)
    cert.private_key_pem.write_to_path(key_file)
    other.private_key_pem.write_to_path(other_key)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    cases = [
        (garbage, key_file, f"grpc.tls_cert_file {garbage}: no PEM certificate in it"),
        (cert_file, garbage, f"grpc.tls_private_key_file {garbage}: no PEM private key in it"),
        (cert_file, other_key, f"grpc.tls_private_key_file {other_key} is not the key of the certificate"),
        (tmp_path / "none.crt", key_file, f"grpc.tls_cert_file {tmp_path / 'none.crt'}: cannot read it"),
    ]
    for cert_path, key_path, message in cases:
        result = _adapter_exit(
            "--grpc-listen", "127.0.0.1:0", "--grpc-tls-cert-file", str(cert_path),
            "--grpc-tls-private-key-file", str(key_path),
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
        assert "Failed to bind" not in result.stderr


async def test_a_body_read_with_its_head_is_not_counted_as_header_bytes() -> None:
    body = b"x" * 40000  # over http.max_header_bytes (32 KiB), sent in one write with the head
    with exporter(["--simulate"]) as p:
        head = b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body)
        answer = await raw_request(*address(p.url), head + body, timeout=3)
    assert answer.startswith(b"HTTP/1.1 405 "), answer[:60]  # the route's answer, not 431


# 80 KB of head (ten 8,000-byte header lines, each under the line limit) sent in one write: over
# http.max_header_bytes (32 KiB) however it is read.
BIG_HEAD = b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"".join(
    b"X-%d: %s\r\n" % (i, b"a" * 8000) for i in range(10)
)


@pytest.mark.parametrize("program", ["exporter", "adapter"])
async def test_max_header_bytes_holds_when_the_whole_head_arrives_in_one_read(program: str) -> None:
    args = [*NO_EXPORTER, "--insecure-http"]
    with exporter(["--simulate"]) if program == "exporter" else adapter(args, False) as p:
        answer = await raw_request(*address(p.url), BIG_HEAD + b"\r\n", timeout=3)
        assert answer.startswith(b"HTTP/1.1 431 "), answer[:60]
        small = await raw_request(*address(p.url), b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", timeout=1)
        assert small.startswith(b"HTTP/1.1 200 "), small[:60]
