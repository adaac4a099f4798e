"""``--check-config`` reports every problem of a configuration file, one line each, not only the
first (exporter and adapter), and exits 2."""

from __future__ import annotations

from pathlib import Path

import pytest

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
