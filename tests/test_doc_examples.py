"""Every fenced example of README.md and docs/*.md is checked, or says why not.

Each block is classified (tests/doc_blocks.py) and checked by its kind: configuration and scenario
YAML through the programs' own ``--check-config`` (every problem they print fails the test), a
scenario's ``expect`` through the right-sizing engine, Kubernetes fragments wrapped into their
object and validated strictly (built-in kinds by their OpenAPI schema, KEDA's by its CRD), the
adapter rules' PromQL by ``promtool check rules``, and shell commands against the ``--help`` of the
program they name and the repository's files. Executable and worked examples are run by their own
tests; this one makes sure those tests see them.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import grpc
import kube
import pytest
import test_adapter_keda as keda_rig
import test_readme_examples
import test_readme_rightsizing
import yaml
from doc_blocks import Block, all_blocks, kind
from servers import ROOT
from test_rightsizing_scenarios import conclusions

from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc
from adapter.rules import BUILTIN_RULES

BIN = Path(sys.executable).parent
BLOCKS = all_blocks()
CHECKED = {
    "output",
    "runs",
    "worked-example",
    "scenario",
    "scenario-gpus",
    "exporter-config",
    "adapter-config",
    "hpa-spec",
    "scaledobject-spec",
    "shell",
    "helm-values",  # tests/test_helm_docs.py
    "kustomization",  # tests/test_helm_docs.py
    "patch-manifest",  # tests/test_patches_docs.py
    "patch-output",  # tests/test_patches_docs.py
    "model-label-promql",  # tests/test_model_label.py
}
MOST_NOT_CHECKED = 3


def of_kind(*kinds: str) -> list[Block]:
    return [b for b in BLOCKS if kind(b) in kinds]


def params(*kinds: str) -> Any:
    return pytest.mark.parametrize("block", of_kind(*kinds), ids=lambda b: b.where)


def test_every_block_has_a_known_kind() -> None:
    assert len(BLOCKS) >= 25  # the parser still finds the blocks
    unknown = [
        f"{b.where} ({b.info or 'no info string'})"
        for b in BLOCKS
        if kind(b) not in CHECKED and not kind(b).startswith("not-checked (")
    ]
    assert unknown == [], "give these a marker <!-- example: KIND --> (see tests/doc_blocks.py)"
    skipped = [b for b in BLOCKS if kind(b).startswith("not-checked")]
    assert all(re.fullmatch(r"not-checked \(.{10,}\)", kind(b)) for b in skipped), "say why"
    assert len(skipped) <= MOST_NOT_CHECKED


def test_executable_and_worked_examples_are_run_by_their_tests() -> None:
    executed = {(e.document, e.body) for e in test_readme_examples.examples()}
    for b in of_kind("output", "runs"):
        assert (b.document, b.body) in executed, f"{b.where}: its marker is not one the runner reads"
    worked = {
        m["reason"]
        for m in test_readme_rightsizing.EXAMPLE.finditer((ROOT / "docs/rightsizing.md").read_text())
    }
    for b in of_kind("patch-manifest", "patch-output"):  # tests/test_patches_docs.py reads them there
        assert b.document == "docs/rightsizing.md", b.where
    for b in of_kind("worked-example"):
        assert b.document == "docs/rightsizing.md" and b.body.split("reason: ", 1)[1].strip() in worked, (
            b.where
        )


# --- YAML through the programs' own loaders ---------------------------------------------------


def check_config(program: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / program), *args, "--check-config"], capture_output=True, text=True, timeout=120, cwd=ROOT
    )


@params("exporter-config")
def test_exporter_configuration_loads(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(block.body)
    out = check_config("rightsizer-exporter", "--simulate", "--config", str(path))
    said = (out.returncode, out.stderr, out.stdout)
    assert said == (0, "", f"{path}: OK\n"), f"{block.where}:\n{out.stderr}"  # as docs/development.md says


@params("scenario", "scenario-gpus")
def test_scenario_loads(block: Block, tmp_path: Path) -> None:
    data = yaml.safe_load(block.body)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"gpus": data} if kind(block) == "scenario-gpus" else data))
    out = check_config("rightsizer-exporter", "--simulate", str(path))
    assert (out.returncode, out.stderr) == (0, ""), f"{block.where}:\n{out.stderr}"


@params("scenario", "scenario-gpus")
async def test_scenario_earns_what_it_expects(block: Block, tmp_path: Path) -> None:
    """A documented ``expect`` is what the engine concludes, as for the scenario files the suite
    runs (tests/test_rightsizing_scenarios.py); GPUs without one only need to be judged."""
    data = yaml.safe_load(block.body)
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump({"gpus": data} if kind(block) == "scenario-gpus" else data))
    wrong = []
    for name, got in (await conclusions(path)).items():
        expect = got["expect"]
        assert got["verdict"], f"{block.where}: {name} has no verdict"
        if expect is None:
            continue
        for what, want in (
            ("verdict", expect.verdict),
            ("recommended", expect.recommended),
            ("bottlenecks", list(expect.bottlenecks) if expect.verdict else None),
        ):
            if want is not None and got[what] != want:
                wrong.append(f"{name}: {what} {got[what]!r}, the example expects {want!r} ({got['reason']})")
    assert wrong == [], f"{block.where}:\n" + "\n".join(wrong)


@params("adapter-config")
def test_adapter_configuration_loads_in_both_modes(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "adapter.yaml"
    path.write_text(block.body)
    for mode in (["--prometheus-url", "http://127.0.0.1:9"], ["--exporter", "http://127.0.0.1:9"]):
        out = check_config("rightsizer-adapter", "--config", str(path), *mode)
        assert (out.returncode, out.stderr) == (0, ""), f"{block.where} with {mode[0]}:\n{out.stderr}"


@params("adapter-config")
def test_adapter_rule_queries_are_promql(block: Block, tmp_path: Path) -> None:
    """Each rule's query, rendered with a label matcher as the adapter renders it, parses in
    Prometheus's own parser (``promtool check rules`` parses every expression)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool is installed with Debian's prometheus (scripts/test)"
    rules = yaml.safe_load(block.body)["rules"]
    exprs = [r["query"].replace("<<.LabelMatchers>>", 'namespace="llm"') for r in rules if "query" in r]
    assert exprs, f"{block.where}: no query"
    group = {
        "groups": [
            {"name": "doc", "rules": [{"record": f"doc:query:{i}", "expr": e} for i, e in enumerate(exprs)]}
        ]
    }
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(group))
    out = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"{block.where}:\n{out.stdout}{out.stderr}"


# --- Kubernetes fragments, wrapped into their objects ------------------------------------------

TARGET = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "worker"}


def hpa(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "worker", "namespace": "demo"},
        "spec": {"scaleTargetRef": TARGET, "minReplicas": 1, "maxReplicas": 10, **spec},
    }


def scaled_object(spec: dict[str, Any]) -> dict[str, Any]:
    trigger = {
        "type": "external-push",
        "metadata": {"scalerAddress": "rightsizer-adapter.rightsizer.svc:9443"},
    }
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker", "namespace": "demo"},
        "spec": {"scaleTargetRef": {"name": "worker"}, "triggers": [trigger], **spec},
    }


@params("hpa-spec")
def test_hpa_fragment_is_a_valid_hpa(block: Block) -> None:
    obj = hpa(yaml.safe_load(block.body))
    for version in kube.supported_versions():
        kube.validate_core(obj, version)
    # Each metric it asks for is one the adapter serves on that API with no configuration.
    served = {(api, r.name) for r in BUILTIN_RULES for api in r.apis}
    for metric in obj["spec"]["metrics"]:
        api = {"External": "external", "Pods": "custom", "Object": "custom"}[metric["type"]]
        name = metric[metric["type"].lower()]["metric"]["name"]
        assert (api, name) in served, f"{block.where}: the adapter serves no {api} metric {name}"


# What the adapter's external scaler reads from a trigger's metadata (adapter/keda/scaler.py), and
# KEDA's own scalerAddress; metric and target are required for scaling.
KEDA_METADATA = {"scalerAddress", "metric", "labelSelector", "target", "activationThreshold"}


@params("scaledobject-spec")
def test_keda_fragment_is_a_valid_scaled_object(block: Block) -> None:
    fragment = yaml.safe_load(block.body)
    kube.validate_custom(scaled_object(fragment))
    for trigger in fragment.get("triggers", []):
        assert trigger["type"] in ("external", "external-push"), block.where
        assert set(trigger["metadata"]) <= KEDA_METADATA, f"{block.where}: unknown metadata"
        assert {"scalerAddress", "metric", "target"} <= set(trigger["metadata"]), f"{block.where}: missing"
        assert 0 < float(trigger["metadata"]["target"]) <= 1e18, block.where


@pytest.mark.parametrize(
    "block",
    [b for b in of_kind("scaledobject-spec") if "triggers" in yaml.safe_load(b.body)],
    ids=lambda b: b.where,
)
async def test_keda_trigger_is_served_over_grpc(block: Block) -> None:
    """The documented triggers, sent as KEDA sends them to the adapter's external scaler over real
    gRPC, against an exporter whose queue ``jobs`` holds 5 items (tests/test_adapter_keda.py):
    the spec carries the documented target, the value is the queue's depth, and 5 > the
    activation threshold makes it active."""
    for trigger in yaml.safe_load(block.body)["triggers"]:
        metadata = {k: str(v) for k, v in trigger["metadata"].items()}
        async with (
            keda_rig.running() as (_, _, port, _),
            grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel,
        ):
            stub = pb_grpc.ExternalScalerStub(channel)
            [spec] = (await stub.GetMetricSpec(keda_rig.ref(**metadata))).metricSpecs
            assert spec.targetSizeFloat == float(metadata["target"]), block.where
            request = pb.GetMetricsRequest(
                scaledObjectRef=keda_rig.ref(**metadata), metricName=spec.metricName
            )
            [value] = (await stub.GetMetrics(request)).metricValues
            assert value.metricValueFloat == 5.0, block.where
            active = (await stub.IsActive(keda_rig.ref(**metadata))).result
            assert active == (float(metadata.get("activationThreshold", 0)) < 5.0), block.where
