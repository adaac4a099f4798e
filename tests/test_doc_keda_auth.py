"""The documented KEDA triggers work against the adapter as the chart and deploy/ ship it: its
external-scaler gRPC (:9443) listens only with mutual TLS (``adapter.kedaGrpcTls``,
deploy/components/keda-grpc-tls), so every gRPC trigger of README.md and docs/*.md names a
TriggerAuthentication that gives KEDA the CA and a client certificate and key (``caCert``,
``tlsClientCert``, ``tlsClientKey``: deploy/examples/keda-external-push.yaml's). Each snippet,
wrapped into its ScaledObject, is checked against KEDA's CRD schema with the reference in it."""

from __future__ import annotations

from typing import Any

import kube
import pytest
import yaml
from doc_blocks import Block, all_blocks, kind
from kube import DEPLOY

GRPC_TRIGGERS = ("external", "external-push")
TLS_PARAMETERS = {"caCert", "tlsClientCert", "tlsClientKey"}
SNIPPETS = [
    b for b in all_blocks() if kind(b) == "scaledobject-spec" and "triggers" in yaml.safe_load(b.body)
]
NO_REF = "has no authenticationRef (the gRPC needs a client certificate)"


def shipped_authentications() -> dict[str, set[str]]:
    """{TriggerAuthentication name: its parameters} of deploy/examples' KEDA files."""
    out: dict[str, set[str]] = {}
    for path in sorted((DEPLOY / "examples").glob("keda-*.yaml")):
        for obj in yaml.safe_load_all(path.read_text()):
            if obj and obj["kind"] == "TriggerAuthentication":
                out[obj["metadata"]["name"]] = {t["parameter"] for t in obj["spec"]["secretTargetRef"]}
    return out


def scaled_object(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": {"name": "worker", "namespace": "demo"},
        "spec": {"scaleTargetRef": {"name": "worker"}, **spec},
    }


def problems(block: Block) -> list[str]:
    """Why ``block``'s gRPC triggers would not be let in by the shipped mutual TLS."""
    auths = shipped_authentications()
    out = []
    for i, trigger in enumerate(yaml.safe_load(block.body)["triggers"]):
        if trigger["type"] not in GRPC_TRIGGERS or not trigger["metadata"]["scalerAddress"].endswith(":9443"):
            continue
        ref = (trigger.get("authenticationRef") or {}).get("name")
        if ref is None:
            out.append(f"{block.where}: trigger {i} {NO_REF}")
        elif not auths.get(ref, set()) >= TLS_PARAMETERS:
            out.append(f"{block.where}: trigger {i} names {ref!r}, no shipped TriggerAuthentication with "
                       f"{sorted(TLS_PARAMETERS)}")  # fmt: skip
    return out


def test_there_are_grpc_snippets() -> None:
    types = {b: {t["type"] for t in yaml.safe_load(b.body)["triggers"]} for b in SNIPPETS}
    grpc = [b for b in SNIPPETS if types[b] & set(GRPC_TRIGGERS)]
    assert {b.document for b in grpc} >= {"docs/adapter.md", "docs/slos.md"}


@pytest.mark.parametrize("block", SNIPPETS, ids=lambda b: b.where)
def test_grpc_snippet_names_the_mutual_tls_authentication(block: Block) -> None:
    kube.validate_custom(scaled_object(yaml.safe_load(block.body)))
    assert problems(block) == []


def test_a_snippet_without_the_reference_is_named() -> None:
    """What the test above says of a trigger written as the docs had it, and of a wrong name."""
    bare = Block("docs/x.md", 1, "yaml", "triggers:\n  - type: external-push\n    metadata:\n"
                 "      scalerAddress: rightsizer-adapter.rightsizer.svc:9443\n", None)  # fmt: skip
    assert problems(bare) == [f"docs/x.md:1: trigger 0 {NO_REF}"]
    other = "    authenticationRef: {name: rightsizer-metrics-api-bearer}\n"
    wrong = Block("docs/x.md", 1, "yaml", bare.body + other, None)
    assert "no shipped TriggerAuthentication" in problems(wrong)[0]
