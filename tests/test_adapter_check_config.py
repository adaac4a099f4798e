"""``--check-config`` reads every file the start reads: what it calls OK starts, what the start
would refuse it refuses with the same one line (exit 2). Each case below stopped the start with
exit 2 while ``--check-config`` said OK."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from servers import ROOT

DIRECT = ["--exporter", "http://127.0.0.1:1"]
CASES = {  # name -> (flags, a piece of the one line both say)
    "serving certificate /dev/zero": (
        ["--tls-cert-file", "/dev/zero", "--tls-private-key-file", "/dev/zero"], "not a regular file"),
    "client CA /dev/zero": (["--client-ca-file", "/dev/zero"], "/dev/zero: not a regular file"),
    "garbage serving certificate": (
        ["--tls-cert-file", "{garbage}", "--tls-private-key-file", "{garbage}"], "cannot load the serving"),
    "garbage gRPC certificate": (
        ["--grpc-listen", "127.0.0.1:0", "--grpc-tls-cert-file", "{garbage}", "--grpc-tls-private-key-file",
         "{garbage}"], "grpc.tls_cert_file"),
    "missing request-header CA": (["--requestheader-client-ca-file", "{tmp}/none.pem"], "No such file"),
    "empty metrics-api key file": (["--metrics-api-key-file", "{empty}"], "is empty"),
    "metrics-api key file is a directory": (["--metrics-api-key-file", "{tmp}"], "is a directory"),
    "empty Prometheus bearer token file": (
        ["--prometheus-url", "http://p:9", "--prometheus-bearer-token-file", "{empty}"], "it is empty"),
    "Prometheus CA /dev/zero": (
        ["--prometheus-url", "https://p:9090", "--prometheus-ca-file", "/dev/zero"], "Prometheus TLS files"),
}  # fmt: skip


def adapter(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "adapter", *args], capture_output=True, text=True, timeout=60, cwd=ROOT
    )


@pytest.mark.parametrize("case", list(CASES))
def test_check_config_refuses_what_the_start_refuses(case: str, tmp_path: Path) -> None:
    flags, why = CASES[case]
    (tmp_path / "garbage.pem").write_text("garbage\n")
    (tmp_path / "empty.key").write_text("")
    paths = {"garbage": f"{tmp_path}/garbage.pem", "empty": f"{tmp_path}/empty.key", "tmp": str(tmp_path)}
    args = [flag.format(**paths) for flag in flags]
    mode = [] if "--prometheus-url" in args else DIRECT
    checked = adapter(*mode, *args, "--check-config")
    started = adapter(*mode, *args, "--listen", "127.0.0.1:0")
    assert started.returncode == 2, started
    assert checked.returncode == 2, checked
    assert checked.stderr == started.stderr, (checked.stderr, started.stderr)
    assert why in checked.stderr and len(checked.stderr.splitlines()) == 1, checked.stderr
    assert "Traceback" not in checked.stderr + started.stderr


def test_check_config_still_says_ok_for_a_sound_configuration(tmp_path: Path) -> None:
    (tmp_path / "key").write_text("s3cret\n")
    checked = adapter(*DIRECT, "--metrics-api-key-file", str(tmp_path / "key"), "--check-config")
    assert checked.returncode == 0 and checked.stdout.startswith("configuration: OK"), checked
