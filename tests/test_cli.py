"""The exporter's command line: expected faults give one clear line and exit 2, never a traceback;
SIGTERM stops it cleanly."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

from servers import ROOT, exporter, http_get


def run(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "exporter", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def assert_one_line_failure(result: subprocess.CompletedProcess[str], *fragments: str) -> None:
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("rightsizer-exporter: ")
    assert "Traceback" not in result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def test_version() -> None:
    result = run("--version")
    assert result.returncode == 0 and result.stdout.startswith("rightsizer-exporter ")


def test_check_config_ok(tmp_path: Path) -> None:
    cfg = tmp_path / "ok.yaml"
    cfg.write_text("interval: 2\nhostname_label: hostname\n")
    result = run("--config", str(cfg), "--check-config")
    assert result.returncode == 0 and "OK" in result.stdout


def test_check_config_bad(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("interval: 2\nnvml:\n  call_timeout: 1\n")
    assert_one_line_failure(
        run("--config", str(cfg), "--check-config"), str(cfg), "nvml: unknown key 'call_timeout'"
    )


def test_bad_config_when_starting(tmp_path: Path) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("listen: 9430\n")
    assert_one_line_failure(run("--config", str(cfg), "--simulate"), "listen must be HOST:PORT")


def test_bad_flag_value() -> None:
    assert_one_line_failure(run("--simulate", "--interval", "-1"), "command line", "interval")


def test_unknown_scenario() -> None:
    assert_one_line_failure(run("--simulate", "no-such-scenario"), "no-such-scenario")


def test_port_in_use() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("--simulate", "--listen", f"127.0.0.1:{port}")
    assert_one_line_failure(result, f"127.0.0.1:{port}", "address already in use")


def test_sigterm_stops_cleanly() -> None:
    with exporter(["--simulate"]) as p:
        assert http_get(p.url + "/metrics")[0] == 200
        code = p.stop(signal.SIGTERM)
    assert code == 0, p.log()
    assert "Traceback" not in p.log() and "msg=stopping" in p.log()
