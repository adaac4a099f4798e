"""Every documented autoscaler scales the right way for its metric (PROTOCOLS-4 §15):

- a total that grows with load and is shared out among replicas (the queue depth) takes
  ``AverageValue``: desired = ceil(total / target), whatever the count now;
- a figure that is already one for the whole workload (the SLO latency ratio) takes ``Value``:
  desired = ceil(ready x value / target); ``AverageValue`` would divide it by the replicas and
  scale a workload that misses its SLO down;
- the attainment is higher when better, so it is no scaling target at all;
- a Pods metric is averaged over the pods (``AverageValue``, its only type).

Read from every HPA and KEDA snippet of README.md and docs/, the example files and the chart's
NOTES.txt. tests/test_control_plane_slo.py shows both directions on a real HPA controller."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from doc_blocks import all_blocks, kind
from kube import DEPLOY
from test_control_plane_dry_run import NOTES, notes_metrics

TOTALS = {"rightsizer_queue_depth"}
RATIOS = {"rightsizer_workload_slo_latency_ratio"}
NEVER = {"rightsizer_workload_slo_attainment_ratio"}


def hpa_targets(metrics: list[dict[str, Any]]) -> Iterator[tuple[str, str, str]]:
    """(metric type, metric name, target type) of each metric of an HPA."""
    for m in metrics:
        source = m[m["type"].lower()]
        yield m["type"], source["metric"]["name"], source["target"]["type"]


def keda_targets(spec: dict[str, Any]) -> Iterator[tuple[str, str, str]]:
    for trigger in spec.get("triggers", []):
        meta = trigger.get("metadata", {})
        name = meta.get("metric") or meta.get("url", "").split("/keda/v1/metrics/")[-1].split("?")[0]
        yield "External", name, trigger.get("metricType", "AverageValue")  # KEDA's default


def documented() -> list[tuple[str, tuple[str, str, str]]]:
    out: list[tuple[str, tuple[str, str, str]]] = []
    for block in all_blocks():
        data = yaml.safe_load(block.body) if kind(block) in ("hpa-spec", "scaledobject-spec") else None
        if kind(block) == "hpa-spec":
            out += [(block.where, t) for t in hpa_targets(data["metrics"])]
        elif kind(block) == "scaledobject-spec":
            out += [(block.where, t) for t in keda_targets(data)]
    for path in sorted((DEPLOY / "examples").glob("*.yaml")):
        for obj in (o for o in yaml.safe_load_all(path.read_text()) if o):
            where = f"{path.relative_to(DEPLOY.parent)} {obj['kind']} {obj['metadata']['name']}"
            if obj["kind"] == "HorizontalPodAutoscaler":
                out += [(where, t) for t in hpa_targets(obj["spec"]["metrics"])]
            elif obj["kind"] == "ScaledObject":
                out += [(where, t) for t in keda_targets(obj["spec"])]
    out += [("NOTES.txt", t) for t in hpa_targets(notes_metrics(NOTES))]
    return out


@pytest.mark.parametrize(("where", "target"), documented(), ids=[w for w, _ in documented()])
def test_target_type_fits_the_metric(where: str, target: tuple[str, str, str]) -> None:
    metric_type, name, target_type = target
    assert name not in NEVER, f"{where}: {name} is higher when better; HPA would scale the wrong way"
    if metric_type == "Pods" or name in TOTALS:
        assert target_type == "AverageValue", f"{where}: {name} is a total (or per pod): AverageValue"
    elif name in RATIOS:
        assert target_type == "Value", f"{where}: {name} is one figure for the workload: Value"
    else:
        pytest.fail(f"{where}: {name}: say here whether it is a total or a ratio")


def test_both_kinds_are_documented() -> None:
    names = {t[1] for _, t in documented()}
    assert names >= TOTALS | RATIOS, names
