"""docs/rightsizing.md's "From recommendation to merge request": the manifest it shows is the
fixture the patch tests use, and the patch it shows is what ``rightsizer report --format patches``
writes for it (the scenario's clock pinned to 2026-01-01, so the history, the figures and the dates
are the same every run)."""

from __future__ import annotations

from pathlib import Path

import report_history
import yaml
from doc_blocks import blocks, kind
from patches_rig import FIXTURES, SCENARIO, ksm_series
from servers import ROOT
from test_patches_report import HOUR, STEP, patches

START = 1767225600.0  # 2026-01-01T00:00:00Z
DOC = ROOT / "docs" / "rightsizing.md"


def block(which: str) -> str:
    (found,) = [b.body for b in blocks(DOC) if kind(b) == which]
    return found


def test_the_documented_manifest_is_the_fixture() -> None:
    fixture = yaml.safe_load((FIXTURES / "summarizer.yaml").read_text())
    assert yaml.safe_load(block("patch-manifest")) == fixture


def test_the_documented_patch_is_what_the_report_writes(tmp_path: Path) -> None:
    extra = ksm_series(START)
    history = report_history.prometheus_with_history([SCENARIO], HOUR, STEP, True, extra=extra, start=START)
    with history as (url, _):
        files = patches(url, START, tmp_path / "gpu-patches", "--manifests", str(FIXTURES))
    assert files["llm_deployment_summarizer.yaml"] == block("patch-output")
