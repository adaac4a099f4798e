"""docs/rightsizing.md's "From recommendation to merge request": each manifest it shows is the
fixture the patch tests use, and each patch it shows is what ``rightsizer report --format patches``
writes for it (the scenario's clock pinned to 2026-01-01, so the history, the figures and the dates
are the same every run): the GPU Feature Discovery example (tests/test_patches_report.py's fleet)
and one per cloud (tests/test_patches_clouds.py's), byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest
import report_history
import yaml
from doc_blocks import blocks, kind
from patches_rig import FIXTURES, SCENARIO, ksm_series
from servers import ROOT
from test_patches_clouds import FIXTURES as CLOUDS
from test_patches_clouds import HISTORY_END, cloud_patches
from test_patches_report import HOUR, STEP, patches

START = 1767225600.0  # 2026-01-01T00:00:00Z
DOC = ROOT / "docs" / "rightsizing.md"


def block(which: str) -> str:
    (found,) = [b.body for b in blocks(DOC) if b.marker == which]
    return found


def named(which: str) -> dict[str, str]:
    """The blocks of a kind that name their file: file name -> body."""
    return {b.marker.split(",", 1)[1].strip(): b.body for b in blocks(DOC)
            if kind(b) == which and b.marker and "," in b.marker}  # fmt: skip


def test_the_documented_manifest_is_the_fixture() -> None:
    fixture = yaml.safe_load((FIXTURES / "summarizer.yaml").read_text())
    assert yaml.safe_load(block("patch-manifest")) == fixture


@pytest.mark.usefixtures("prometheus_version")
def test_the_documented_patch_is_what_the_report_writes(tmp_path: Path) -> None:
    extra = ksm_series(START)
    history = report_history.prometheus_with_history([SCENARIO], HOUR, STEP, True, extra=extra,
                                                     start=HISTORY_END)
    with history as (url, _):
        files = patches(url, START, tmp_path / "gpu-patches", "--manifests", str(FIXTURES))
    assert files["llm_deployment_summarizer.yaml"] == block("patch-output")


@pytest.mark.usefixtures("prometheus_version")
def test_one_worked_example_per_cloud_is_what_the_report_writes(tmp_path: Path) -> None:
    manifests, outputs = named("patch-manifest"), named("patch-output")
    assert set(manifests) == {"gke-chat.yaml", "eks-summarizer.yaml", "karpenter-summarizer.yaml",
                              "aks-embedder.yaml"}  # fmt: skip
    for name, body in manifests.items():
        assert body == (CLOUDS / name).read_text(), name
    files = cloud_patches(tmp_path / "gpu-patches")
    assert set(outputs) == {"gke_deployment_chat.yaml", "eks_deployment_summarizer.yaml",
                            "karpenter_deployment_summarizer.yaml",
                            "aks_deployment_embedder.yaml"}  # fmt: skip
    for name, body in outputs.items():
        assert files[name] == body, name
