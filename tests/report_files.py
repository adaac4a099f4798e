"""``rightsizer report`` written as files (JSON, HTML, Markdown) from a real Prometheus holding an
hour of scenario history (see ``report_history``): what the HTML and Markdown tests read.

``FLEETS``: the scenario suite's mixed inference fleet and the built-in MIG node, each as its own
``instance``; ``HOSTILE``: pods, namespaces and containers named with HTML (its own Prometheus, so
the README's picture shows a plain fleet).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import report_history

from exporter.sources.simulated.scenario import SCENARIO_DIR

HERE = Path(__file__).parent
FLEETS = (HERE / "scenarios" / "mixed_inference_fleet.yaml", SCENARIO_DIR / "mig.yaml")
HOSTILE = (HERE / "scenarios" / "status_hostile_labels.yaml",)
STEP = 15.0
HOUR = 3600.0


@dataclass(frozen=True)
class Written:
    url: str  # the Prometheus holding the history
    at: float  # the end of the report window
    dir: Path
    fleets: list[report_history.Fleet]

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        return report(self.url, self.at, *args)

    @property
    def json(self) -> dict[str, Any]:
        return json.loads((self.dir / "report.json").read_text())  # type: ignore[no-any-return]

    @property
    def html(self) -> str:
        return (self.dir / "report.html").read_text()

    @property
    def markdown(self) -> str:
        return (self.dir / "report.md").read_text()


def report(url: str, at: float, *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
           "--window", "1h", "--at", f"{at:.3f}", *args]  # fmt: skip
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180)


@contextlib.contextmanager
def written_reports(paths: Sequence[Path], directory: Path) -> Iterator[Written]:
    """The report over the fleets' hour as report.json, report.html and report.md in ``directory``."""
    with report_history.prometheus_with_history(paths, HOUR, STEP, instances=True) as (url, fleets):
        w = Written(url, max(f.last for f in fleets) + 1, directory, fleets)
        for fmt, name in (("json", "report.json"), ("html", "report.html"), ("markdown", "report.md")):
            done = w.run("--format", fmt, "--output", str(directory / name))
            assert done.returncode == 0, done.stderr
            assert done.stdout == "", "--output writes the file, not standard output"
        yield w


# Built once per test session and shared by the HTML, Markdown and browser tests, which only read
# them: one Prometheus and one set of report files per fleet.
@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    with written_reports(FLEETS, tmp_path_factory.mktemp("fleet")) as w:
        yield w


@pytest.fixture(scope="session")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    with written_reports(HOSTILE, tmp_path_factory.mktemp("hostile")) as w:
        yield w
