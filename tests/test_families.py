"""The exporter's ``families`` setting and its presets, derived here from what reads the metrics.

``headless`` must be exactly the families the shipped rules, the adapter's built-in rules and
``rightsizer report`` name; ``shipped`` that plus the dashboards'. The exporter run with a preset
publishes those families and no other, and the example ServiceMonitor's relabelling keeps the same
samples out of a full exposition.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

import pytest
import yaml
from report_history import prometheus_with_history
from servers import ROOT, exporter, http_get
from test_dashboards import targets, variable_selectors
from test_rules import all_rules

from adapter.rules import BUILTIN_RULES
from adapter.sources.pace import STAMP_FAMILY
from exporter.families import HEADLESS, PRESETS, SHIPPED, resolve
from exporter.metrics import FAMILIES_BY_NAME

OURS = re.compile(r"(?<![\w:])(rightsizer_[a-z0-9_]+|DCGM_FI_[A-Z0-9_]+)(?![\w:])")
REPORT_SOURCES = [
    ROOT / "rightsizing" / "command" / name
    for name in ("report.py", "report_queues.py", "report_span.py", "report_charts.py", "report_slo.py")
]
SERVICE_MONITOR = ROOT / "deploy" / "examples" / "servicemonitor-headless.yaml"


def families_named(texts: Iterable[str]) -> set[str]:
    """The exporter's families that ``texts`` name (a counter also by its sample name)."""
    out: set[str] = set()
    for text in texts:
        for name in OURS.findall(text):
            if name in FAMILIES_BY_NAME:
                out.add(name)
            elif name.removesuffix("_total") in FAMILIES_BY_NAME:
                out.add(name.removesuffix("_total"))
    return out


def headless_readers() -> list[str]:
    rules = [r["expr"] for r in all_rules()]
    adapter = [r.query or "" for r in BUILTIN_RULES] + [r.direct.family for r in BUILTIN_RULES if r.direct]
    adapter += [r.states_family for r in BUILTIN_RULES if r.states_family]
    adapter += [STAMP_FAMILY]  # whether each exporter is current (both modes; direct mode needs it)
    report = [path.read_text() for path in REPORT_SOURCES]
    return rules + adapter + report


def dashboard_readers() -> list[str]:
    return [expr for _, expr in targets()] + [selector for _, selector, _ in variable_selectors()]


def test_headless_is_what_rules_adapter_and_report_read() -> None:
    derived = families_named(headless_readers())
    assert derived == HEADLESS, f"add {sorted(derived - HEADLESS)}, remove {sorted(HEADLESS - derived)}"


def test_shipped_adds_what_the_dashboards_read() -> None:
    derived = families_named(headless_readers() + dashboard_readers())
    assert derived == SHIPPED, f"add {sorted(derived - SHIPPED)}, remove {sorted(SHIPPED - derived)}"
    assert HEADLESS < SHIPPED < set(FAMILIES_BY_NAME)


def test_resolve_names_presets_and_families_and_refuses_anything_else() -> None:
    assert resolve([]) is None
    assert resolve(["headless", "DCGM_FI_DEV_POWER_USAGE"]) == HEADLESS | {"DCGM_FI_DEV_POWER_USAGE"}
    with pytest.raises(ValueError, match="'DCGM_FI_DEV_NOPE' is neither a metric family nor a preset"):
        resolve(["headless", "DCGM_FI_DEV_NOPE"])


def sample_names(exposition: str) -> set[str]:
    """The families of the exposition's samples (a summary's _sum and _count are its own)."""
    lines = [line for line in exposition.splitlines() if line and line[0] != "#"]
    names = {line.split("{", 1)[0].split(" ", 1)[0] for line in lines}
    summaries = {f.name for f in FAMILIES_BY_NAME.values() if f.type == "summary"}
    return {n.rsplit("_", 1)[0] if n.rsplit("_", 1)[0] in summaries else n for n in names}


def scrape(config: Path | None) -> str:
    with exporter(["--simulate", *(["--config", str(config)] if config else [])]) as p:
        code, _, body = http_get(p.url + "/metrics")
        assert code == 200
        return body.decode()


@pytest.fixture(scope="module")
def full() -> str:
    return scrape(None)


@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_the_exporter_publishes_only_the_preset(full: str, preset: str, tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"families": [preset]}))
    chosen = scrape(config)
    names = sample_names(chosen)
    assert names and names <= PRESETS[preset], names - PRESETS[preset]
    assert names == sample_names(full) & PRESETS[preset]  # nothing of the preset is lost
    series = [line for line in chosen.splitlines() if line and line[0] != "#"]
    assert len(series) < len([line for line in full.splitlines() if line and line[0] != "#"])


def test_service_monitor_keeps_what_the_headless_exporter_publishes(full: str, tmp_path: Path) -> None:
    doc = yaml.safe_load(SERVICE_MONITOR.read_text())
    (keep,) = doc["spec"]["endpoints"][0]["metricRelabelings"]
    assert keep["action"] == "keep" and keep["sourceLabels"] == ["__name__"]
    pattern = re.compile(keep["regex"])  # Prometheus anchors relabelling regexes: fullmatch
    kept = {name for name in sample_names(full) if pattern.fullmatch(name)}
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"families": ["headless"]}))
    assert kept == sample_names(scrape(config))
    assert {name for name in HEADLESS if pattern.fullmatch(name)} == HEADLESS


def test_an_unknown_family_is_one_clear_line(tmp_path: Path) -> None:
    config = tmp_path / "exporter.yaml"
    config.write_text(yaml.safe_dump({"families": ["headless", "DCGM_FI_DEV_NOPE"]}))
    out = subprocess.run([sys.executable, "-m", "exporter", "--simulate", "--config", str(config)],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "'DCGM_FI_DEV_NOPE' is neither a metric family nor a preset (headless, shipped)" in out.stderr


def report_conclusions(published: frozenset[str] | None) -> dict[tuple[str, str], tuple[object, ...]]:
    """``rightsizer report``'s conclusions over an hour of the scenario suite's mixed fleet as an
    exporter with ``published`` families would have published it."""
    scenario = ROOT / "tests" / "scenarios" / "mixed_inference_fleet.yaml"
    with prometheus_with_history([scenario], 3600, 15, published=published) as (url, fleets):
        cmd = [sys.executable, "-m", "rightsizing.command.cli", "report", "--prometheus-url", url,
               "--window", "1h", "--at", f"{fleets[0].last + 1:.3f}", "--format", "json"]  # fmt: skip
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    gpus = json.loads(out.stdout)["gpus"]
    return {(g["uuid"], g["mig_profile"] or ""): (g["verdict"], g["bottlenecks"], g["recommended"],
                                                  g["hourly_savings_dollars"]) for g in gpus}


def test_the_report_concludes_the_same_from_a_headless_exporter() -> None:
    full = report_conclusions(None)
    assert full and report_conclusions(HEADLESS) == full
