"""Prometheus holding the past hour of what the exporter published for simulated fleets.

Each fleet runs through the real simulated source, the real right-sizing extension (the live
engine) and the simulated queues' extension, one exposition every ``step`` seconds, rendered by
the exporter's own renderer and written as OpenMetrics with timestamps; ``promtool tsdb
create-blocks-from openmetrics`` turns that into TSDB blocks before Prometheus starts. Every
sample of a fleet carries ``instance="<fleet>"``, as a scrape of that node's exporter would, so
several fleets live in one Prometheus without their host CPUs mixing.

The same samples go to VictoriaMetrics through its import API (``engine="victoria-metrics"``), so
both engines answer from identical data.
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from servers import prometheus, prometheus_build
from side_by_side import side_by_side
from victoria_metrics import import_text, victoria_metrics

from exporter.render import Renderer
from exporter.rightsizing_live.extension import RightsizingExtension
from exporter.sources.simulated.queues import SimulatedQueues
from exporter.sources.simulated.scenario import SCENARIO_DIR
from exporter.sources.simulated.source import SimulatedSource, load_scenario
from rightsizer_core.snapshot import Snapshot
from rightsizing.catalog import load_catalog
from rightsizing.settings import RightsizingSettings

_NAME = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{?)")


@dataclass
class Fleet:
    name: str
    source: SimulatedSource
    live: RightsizingExtension  # the live engine, fed the same readings
    last: float


def _with_instance(line: str, instance: str | None) -> tuple[str, str]:
    m = _NAME.match(line)
    assert m is not None, line
    if instance is None:
        return m.group(1), line
    label = f'instance="{instance}"'
    if m.group(2):
        return m.group(1), f"{m.group(1)}{{{label},{line[m.end():]}"
    return m.group(1), f"{m.group(1)}{{{label}}}{line[m.end():]}"


def exporter_history(
    path: Path, seconds: float, step: float, families: dict[str, list[str]], instance: str | None,
    published: frozenset[str] | None = None, start: float | None = None,
) -> Fleet:
    """Adds the fleet's samples to ``families`` (name -> OpenMetrics lines); ``published``: the
    exporter's ``families`` setting (None: all); ``start``: the history ends there, clock frozen
    (the same samples every run) instead of now."""
    scenario = load_scenario(str(path))
    if start is not None:
        scenario = dataclasses.replace(scenario, start=start, frozen=True)
    source = SimulatedSource(scenario)
    ext = RightsizingExtension(RightsizingSettings(), load_catalog(), step, source)
    queues = SimulatedQueues(source)
    renderer = Renderer("Hostname", published)
    last = 0.0
    for reading in source.history(seconds, step):
        rows = dict(ext.contribute(reading, reading.gpus).rows)
        rows.update(queues.contribute(reading, reading.gpus).rows)
        snap = Snapshot(reading.timestamp, "sim-node", reading.gpus, (reading.status,), rows, {})
        for line in renderer.render(snap).text.decode().splitlines():
            if line and not line.startswith("#"):
                name, labelled = _with_instance(line, instance)
                families.setdefault(name, []).append(f"{labelled} {reading.timestamp:.3f}")
        last = reading.timestamp
    return Fleet(path.stem, source, ext, last)


ENGINES = ("prometheus", "victoria-metrics")


def _milliseconds(line: str) -> str:
    """An OpenMetrics sample line (timestamp in seconds) as Prometheus text (milliseconds)."""
    sample, _, timestamp = line.rpartition(" ")
    return f"{sample} {round(float(timestamp) * 1000)}"


@contextlib.contextmanager
def prometheus_with_history(
    paths: Sequence[Path], seconds: float, step: float, instances: bool = False, engine: str = "prometheus",
    published: frozenset[str] | None = None, extra: dict[str, list[str]] | None = None,
    start: float | None = None,
) -> Iterator[tuple[str, list[Fleet]]]:
    """``engine`` (one of ENGINES) holding the fleets' history and ``extra`` samples (name ->
    OpenMetrics lines); yields its URL and the fleets. ``published``: the exporter's ``families``
    setting (None: all)."""
    families: dict[str, list[str]] = {}
    fleets = [exporter_history(p, seconds, step, families, p.stem if instances else None, published, start)
              for p in paths]  # fmt: skip
    for name, lines in (extra or {}).items():
        families.setdefault(name, []).extend(lines)
    with engine_holding(engine, families) as url:
        yield url, fleets


@contextlib.contextmanager
def engines_with_history(
    paths: Sequence[Path], seconds: float, step: float, extra: dict[str, list[str]] | None = None
) -> Iterator[tuple[dict[str, str], list[Fleet]]]:
    """Every engine of ENGINES holding the same history (each fleet as its own ``instance``) plus
    ``extra`` samples (name -> OpenMetrics lines); yields {engine: URL} and the fleets."""
    families: dict[str, list[str]] = {}
    fleets = [exporter_history(p, seconds, step, families, p.stem) for p in paths]
    with engines_holding(families, extra) as urls:
        yield urls, fleets


@contextlib.contextmanager
def engines_holding(
    families: dict[str, list[str]], extra: dict[str, list[str]] | None = None
) -> Iterator[dict[str, str]]:
    """Every engine of ENGINES holding ``families`` plus ``extra`` (name -> OpenMetrics lines;
    ``families`` is left as it was); yields {engine: URL}."""
    both = dict(families)
    for name, lines in (extra or {}).items():
        both[name] = [*both.get(name, ()), *lines]
    with contextlib.ExitStack() as stack:
        urls = {e: stack.enter_context(engine_holding(e, both)) for e in ENGINES}
        del both  # the engines hold the samples now
        yield urls


# Every scenario fleet of the tests and the embedded default: an hour of them is what the report's
# parity with the live engine and the rules' parity between engines read (``scenario_hour``).
SCENARIO_FLEETS = (
    *sorted((Path(__file__).parent / "scenarios").glob("*.yaml")),
    SCENARIO_DIR / "default.yaml",
)
HOUR, HOUR_STEP = 3600.0, 15.0
_hour: list[tuple[dict[str, list[str]], list[Fleet]]] = []


def scenario_hour(keep: bool) -> tuple[dict[str, list[str]], list[Fleet]]:
    """The past hour of every fleet of SCENARIO_FLEETS (each its own ``instance``, a sample every
    HOUR_STEP seconds; family -> OpenMetrics lines) and the fleets fed it, ending when first built.
    Building it takes minutes on two cores, so it is built once a session for the two modules that
    read it: ``keep`` leaves it for the other one, else it is let go (a gigabyte of lines)."""
    if not _hour:
        families: dict[str, list[str]] = {}
        fleets: list[Fleet] = []
        # Each fleet's hour is its own: they are built side by side and put together in
        # SCENARIO_FLEETS' order (the same lines in the same order as one after the other).
        for own, fleet in side_by_side(_fleet_hour, SCENARIO_FLEETS):
            for name, lines in own.items():
                families.setdefault(name, []).extend(lines)
            fleets.append(fleet)
            del own
        _hour.append((families, fleets))
    return _hour[0] if keep else _hour.pop()


def _fleet_hour(path: Path) -> tuple[dict[str, list[str]], Fleet]:
    """One fleet's share of ``scenario_hour`` (a worker process's task)."""
    families: dict[str, list[str]] = {}
    return families, exporter_history(path, HOUR, HOUR_STEP, families, path.stem)


class Samples:
    """Sample lines by family (OpenMetrics, time in seconds), as ``engine_holding`` takes them."""

    def __init__(self) -> None:
        self.families: dict[str, list[str]] = {}

    def add(self, name: str, labels: str, value: float, t: float) -> None:
        self.families.setdefault(name, []).append(f"{name}{{{labels}}} {value} {t:.3f}")

    def healthy(self, target: str, t: float) -> None:
        """A scrape at ``t`` of ``target`` (its ``instance`` and ``job`` labels) that succeeded, of an
        exporter whose sample time moves (up 1, ``rightsizer_last_sample_timestamp_seconds``)."""
        self.add("up", target, 1, t)
        self.add("rightsizer_last_sample_timestamp_seconds", target, t - 0.5, t)


@contextlib.contextmanager
def engine_holding(engine: str, families: dict[str, list[str]]) -> Iterator[str]:
    """A running ``engine`` holding ``families`` (name -> OpenMetrics sample lines); yields its URL."""
    if engine == "victoria-metrics":
        with victoria_metrics() as vm:
            import_text(vm.url, (_milliseconds(line) for lines in families.values() for line in lines))
            yield vm.url
        return
    assert engine == "prometheus", engine
    promtool = prometheus_build().promtool
    text = "\n".join(f"# TYPE {name} unknown\n" + "\n".join(lines) for name, lines in families.items())
    tsdb = Path(tempfile.mkdtemp(prefix="report-tsdb-"))
    try:
        (tsdb / "history.om").write_text(text + "\n# EOF\n")
        create = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(tsdb / "history.om")]
        done = subprocess.run([*create, str(tsdb / "data")], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        (tsdb / "history.om").unlink()
        with prometheus({}, data_dir=tsdb / "data") as prom:
            yield prom.url
    finally:
        shutil.rmtree(tsdb, ignore_errors=True)


def engine_fixture(history: Callable[[float], dict[str, list[str]]]) -> Any:
    """A test module's ``engine`` fixture: each of ``ENGINES`` holding ``history(now)`` (``engine_holding``),
    started once per module; its URL."""

    @pytest.fixture(scope="module", params=ENGINES)
    def engine(request: pytest.FixtureRequest) -> Iterator[str]:
        with engine_holding(request.param, history(time.time())) as url:
            yield url

    return engine
