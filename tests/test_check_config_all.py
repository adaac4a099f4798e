"""``--check-config`` reports every problem of a configuration file, one line each, not only the
first (exporter and adapter), and exits 2; a ``RIGHTSIZER_*`` variable that names no setting is a
warning (there and in the log of a running exporter)."""

from __future__ import annotations

from pathlib import Path

import pytest
from servers import exporter

from adapter.cli import main as adapter_main
from exporter.cli import main as exporter_main
from rightsizer_core.settings import ConfigError, build


def test_exporter_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "interval: fast\ncolour: blue\nnvml:\n  call_timeout_seconds: -1\n"
        "queues:\n  - name: a\n    kind: nope\n  - name: b\n    kind: also-nope\n"
        "rightsizing:\n  window_seconds: x\n"
    )
    assert exporter_main(["--check-config", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    keys = ["'colour'", "interval:", "nvml.call_timeout_seconds:", "queues[0]:", "queues[1]:"]
    keys.append("rightsizing.window_seconds:")
    assert len(lines) == len(keys), lines
    for key in keys:
        assert [line for line in lines if key in line], (key, lines)
    assert all(line.startswith(f"rightsizer-exporter: {path}: ") for line in lines)


def test_adapter_reports_every_problem(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("bogus: 1\nlog_level: loud\nmax_cached_answers: many\n")
    assert adapter_main(["--check-config", "--config", str(path)]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3, lines
    for key in ("'bogus'", "log_level:", "max_cached_answers:"):
        assert [line for line in lines if key in line], (key, lines)
    assert all(line.startswith(f"rightsizer-adapter: {path}: ") for line in lines)


def test_a_good_file_still_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "good.yaml"
    path.write_text("interval: 2\n")
    assert exporter_main(["--check-config", "--config", str(path)]) == 0
    assert capsys.readouterr().out.strip() == f"{path}: OK"


def test_problems_carry_their_place() -> None:
    from exporter.config import ExporterConfig

    with pytest.raises(ConfigError) as caught:
        build(ExporterConfig, {"interval": "x", "log_level": "loud"}, "")
    problems = caught.value.within("f.yaml").problems
    assert [p.split(":")[:2] for p in problems] == [["f.yaml", " interval"], ["f.yaml", " log_level"]]


def test_unknown_environment_variables_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A misspelt RIGHTSIZER_* variable is a warning naming the close one, not silence; the other
    program's variables are not the exporter's business."""
    monkeypatch.setenv("RIGHTSIZER_INTERVALL", "2")
    monkeypatch.setenv("RIGHTSIZER_RIGHTSIZING_MEMORY_MARGIN", "0.2")
    monkeypatch.setenv("RIGHTSIZER_ADAPTER_PROMETHEUS_URLL", "http://prometheus:9090")
    monkeypatch.setenv("RIGHTSIZER_ADAPTER_LISTEN", "127.0.0.1:6443")
    monkeypatch.setenv("RIGHTSIZER_LOG_LEVEL", "info")  # a setting: no word
    assert exporter_main(["--check-config"]) == 0
    out = capsys.readouterr()
    assert out.out == "configuration: OK\n"
    assert out.err.splitlines() == [
        "rightsizer-exporter: warning: environment variable RIGHTSIZER_INTERVALL is not a setting and is "
        "ignored; did you mean RIGHTSIZER_INTERVAL?",
        "rightsizer-exporter: warning: environment variable RIGHTSIZER_RIGHTSIZING_MEMORY_MARGIN is not a "
        "setting and is ignored; did you mean RIGHTSIZER_RIGHTSIZING_MEMORY_MARGIN_RATIO?",
    ]
    assert adapter_main(["--check-config", "--exporter", "http://127.0.0.1:9430", "--no-file-checks"]) == 0
    out = capsys.readouterr()
    assert out.err.splitlines() == [
        "rightsizer-adapter: warning: environment variable RIGHTSIZER_ADAPTER_PROMETHEUS_URLL is not a "
        "setting and is ignored; did you mean RIGHTSIZER_ADAPTER_PROMETHEUS_URL?",
    ]
    assert out.out.startswith("configuration: OK")


def test_a_running_exporter_logs_the_unknown_variable() -> None:
    with exporter(["--simulate", "golden"], env={"RIGHTSIZER_LISTEN_ADDRESS": "0.0.0.0:1"}) as p:
        (line,) = [line for line in p.log().splitlines() if "RIGHTSIZER_LISTEN_ADDRESS" in line]
    assert "level=warning" in line and 'msg="environment variable ignored: not a setting"' in line, line
    assert "variable=RIGHTSIZER_LISTEN_ADDRESS closest=RIGHTSIZER_LISTEN" in line, line
