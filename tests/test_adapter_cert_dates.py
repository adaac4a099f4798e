"""A serving certificate outside its validity dates: refused at start and by ``--check-config`` for
HTTPS and KEDA's gRPC (the setting, the file, the subject and both dates named); on reload the
adapter keeps serving the valid pair it has and says why. Real adapter processes, certificates from
a CA made here with the dates each case needs."""

from __future__ import annotations

import datetime
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import trustme
from adapter_support import adapter, get
from servers import ROOT, Process, exporter, wait_for
from test_adapter_rotation import publish

NOW = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
DAY = datetime.timedelta(days=1)
EXPIRED = (NOW - 30 * DAY, NOW - DAY)
LATER = (NOW + DAY, NOW + 30 * DAY)
VALID = (NOW - DAY, NOW + 30 * DAY)
CA = trustme.CA()


def pair(dates: tuple[datetime.datetime, datetime.datetime], cn: str = "adapter-serving") -> dict[str, bytes]:
    leaf = CA.issue_cert("127.0.0.1", common_name=cn, not_before=dates[0], not_after=dates[1])
    return {"tls.crt": leaf.cert_chain_pems[0].bytes(), "tls.key": leaf.private_key_pem.bytes()}


def write(tmp: Path, files: dict[str, bytes]) -> tuple[str, str]:
    for name, content in files.items():
        (tmp / name).write_bytes(content)
    return str(tmp / "tls.crt"), str(tmp / "tls.key")


def run(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "adapter", "--exporter", "http://127.0.0.1:9", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=ROOT)


def stamp(at: datetime.datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.mark.parametrize(("dates", "words"), [(EXPIRED, "has expired"), (LATER, "is not valid yet")])
@pytest.mark.parametrize("listener", ["https", "grpc"])
@pytest.mark.parametrize("check", [True, False], ids=["check-config", "start"])
def test_a_certificate_outside_its_dates_is_refused(
    tmp_path: Path,
    dates: tuple[datetime.datetime, datetime.datetime],
    words: str,
    listener: str,
    check: bool,
) -> None:
    cert, key = write(tmp_path, pair(dates, cn=f"{listener}-serving"))
    if listener == "https":
        args = ["--tls-cert-file", cert, "--tls-private-key-file", key]
        setting = f"the serving certificate {cert}"
    else:
        args = ["--grpc-listen", "127.0.0.1:0", "--grpc-tls-cert-file", cert]
        args += ["--grpc-tls-private-key-file", key]
        setting = f"grpc.tls_cert_file {cert}"
    done = run(*args, *(["--check-config"] if check else []))
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert setting in done.stderr and f"the certificate {words}" in done.stderr, done.stderr
    assert f"subject CN={listener}-serving" in done.stderr, done.stderr
    assert f"notBefore {stamp(dates[0])}, notAfter {stamp(dates[1])}" in done.stderr, done.stderr


def test_a_valid_certificate_passes_check_config(tmp_path: Path) -> None:
    cert, key = write(tmp_path, pair(VALID))
    done = run("--tls-cert-file", cert, "--tls-private-key-file", key, "--check-config")
    assert done.returncode == 0 and ": OK" in done.stdout, done.stderr


@pytest.fixture(scope="module")
def sim() -> Iterator[Process]:
    with exporter(["--simulate"]) as p:
        yield p


def served_subject(p: Process) -> str:
    ctx = ssl.create_default_context()
    CA.configure_trust(ctx)
    host, port = p.url.removeprefix("https://").split(":")
    with (
        ssl.create_connection((host, int(port)), timeout=5) as raw,
        ctx.wrap_socket(raw, server_hostname=host) as tls,
    ):
        cert = tls.getpeercert()
    assert cert is not None
    return str(dict(x[0] for x in cert["subject"])["commonName"])


def test_reload_keeps_the_valid_pair_and_warns(tmp_path: Path, sim: Process) -> None:
    secret = tmp_path / "tls"
    secret.mkdir()
    publish(secret, "2026_01", pair(VALID, cn="first"))
    (tmp_path / "a.yaml").write_text("file_reload_interval_seconds: 0.1\n")
    args = ["--exporter", sim.url, "--config", str(tmp_path / "a.yaml")]
    args += ["--tls-cert-file", str(secret / "tls.crt"), "--tls-private-key-file", str(secret / "tls.key")]
    with adapter(args) as p:
        assert served_subject(p) == "first"
        publish(secret, "2026_02", pair(EXPIRED, cn="expired"))
        wait_for(lambda: "reload failed" in p.log(), timeout=10, what="the refused reload")
        (line,) = [line for line in p.log().splitlines() if "reload failed" in line]
        assert "level=warning" in line.lower() and "has expired" in line, line
        assert "subject CN=expired" in line, line
        assert served_subject(p) == "first"  # still the valid one
        assert get(p.url + "/healthz")[0] == 200
        publish(secret, "2026_03", pair(LATER, cn="later"))
        wait_for(lambda: "is not valid yet" in p.log(), timeout=10, what="the second refused reload")
        assert served_subject(p) == "first"
        publish(secret, "2026_04", pair(VALID, cn="second"))
        wait_for(lambda: served_subject(p) == "second", timeout=10, what="the next valid certificate")
        assert "Traceback" not in p.log()


def test_grpc_reload_keeps_the_valid_pair_and_warns(tmp_path: Path, sim: Process) -> None:
    secret = tmp_path / "grpc-tls"
    secret.mkdir()
    publish(secret, "2026_01", pair(VALID, cn="first"))
    (tmp_path / "a.yaml").write_text("file_reload_interval_seconds: 0.1\n")
    args = ["--exporter", sim.url, "--config", str(tmp_path / "a.yaml"), "--grpc-listen", "127.0.0.1:0"]
    args += [f"--grpc-tls-cert-file={secret}/tls.crt", f"--grpc-tls-private-key-file={secret}/tls.key"]
    with adapter(args) as p:
        host, port = p.extra["grpc"].split(":")

        def subject() -> str:
            ctx = ssl.create_default_context()
            CA.configure_trust(ctx)
            ctx.set_alpn_protocols(["h2"])
            with (
                ssl.create_connection((host, int(port)), timeout=5) as raw,
                ctx.wrap_socket(raw, server_hostname=host) as tls,
            ):
                cert = tls.getpeercert()
            assert cert is not None
            return str(dict(x[0] for x in cert["subject"])["commonName"])

        assert subject() == "first"
        publish(secret, "2026_02", pair(EXPIRED, cn="expired"))
        wait_for(lambda: "reload failed" in p.log(), timeout=10, what="the refused gRPC reload")
        (line,) = [line for line in p.log().splitlines() if "reload failed" in line]
        assert "grpc.tls_cert_file" in line and "has expired" in line and "level=warning" in line, line
        assert subject() == "first"
        publish(secret, "2026_03", pair(VALID, cn="second"))
        wait_for(lambda: subject() == "second", timeout=10, what="the next valid gRPC certificate")
