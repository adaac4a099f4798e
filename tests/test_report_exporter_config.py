"""``rightsizer report`` and ``plan`` read the engine's sections of the exporter's configuration
(``--exporter-config``); a top-level key the exporter refuses is refused by them too, with the same
line, instead of being skipped (a mistyped ``catlog:`` was a report priced without its overrides)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest
from servers import ROOT

from exporter.config import ExporterConfig
from rightsizing.command.exporter_config import EXPORTER_KEYS, read_exporter_config

RIGHTSIZER = [sys.executable, "-m", "rightsizing.command.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_the_exporter_keys_are_the_exporters() -> None:
    assert set(EXPORTER_KEYS) == {f.name for f in dataclasses.fields(ExporterConfig)}


@pytest.mark.parametrize("typo", ["catlog", "pricing"])
def test_an_unknown_top_level_key_is_refused_as_the_exporter_refuses_it(tmp_path: Path, typo: str) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(f"{typo}:\n  prices: {{L4: 0.5}}\ninterval: 2\n")
    exporter = run(sys.executable, "-m", "exporter", "--config", str(path), "--check-config")
    assert exporter.returncode == 2
    (line,) = exporter.stderr.splitlines()
    problem = line.removeprefix("rightsizer-exporter: ")
    assert problem.startswith(f"{path}: unknown key {typo!r} (known keys: "), problem
    report = run(*RIGHTSIZER, "report", "--prometheus-url", "http://127.0.0.1:9", f"--exporter-config={path}")
    plan = run(*RIGHTSIZER, "plan", "--params", "7B", "--exporter-config", str(path))
    for done in (report, plan):
        assert done.returncode == 2, done
        assert done.stderr.splitlines() == [f"rightsizer: {problem}"], done.stderr


def test_the_exporters_own_sections_are_accepted_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text("interval: 2\nnvml: {call_timeout_seconds: 1}\nqueues: []\n")
    path.write_text(path.read_text() + "catalog:\n  prices: {L4: 0.5}\n")
    assert read_exporter_config(str(path)).catalog.prices == {"L4": 0.5}
