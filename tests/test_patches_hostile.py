"""Hostile label values make a valid patch or a refusal, never a broken file.

Pod, namespace, container and owner names come from labels anyone can set. A value that cannot
name a Kubernetes object is refused with the reason; a valid name that YAML would read as something
else (``yes``, ``null``, ``123``, ``1e3``) is written quoted and reaches the object unchanged through
the real ``kubectl kustomize``; text in comments (owner sources, reasons) never ends the comment.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from patches_rig import kustomize, objects, pod_spec, validate_strictly
from patches_units import held, patch_set

from rightsizing.patches.owners import OwnerSeries

HOSTILE = [
    "Bad_NS", "llm\nkind: Secret", "x: y", "~", "", "-lead", "a" * 64, "ünïcode", "a\u2028b", "a\x85b",
    "{x}", "'q'", '"q"', "#c", "a b", "null\x00",
]  # fmt: skip


def files_parse(files: dict[str, str]) -> None:
    for name, text in files.items():
        if name.endswith(".yaml"):
            docs = list(yaml.safe_load_all(text))
            assert len(docs) == 1 and isinstance(docs[0], dict), name
            head = text.split("\napiVersion:", 1)[0].splitlines()
            assert all(line.startswith("# ") for line in head), name
    for line in files["README.md"].splitlines():
        if line.startswith("| "):
            assert line.endswith(" |"), line  # one table row per line


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_a_hostile_name_anywhere_is_refused_with_the_reason(value: str) -> None:
    for where in ("namespace", "container"):
        ps = patch_set([held("chat-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB", **{where: value})])
        files_parse(ps.files)
        (m,) = ps.moves
        assert m.outcome == "refused" and "is not a Kubernetes name" in m.why, (where, m.why)
    # An owner name from kube-state-metrics (the pod's and its ReplicaSet's). An object name may be
    # a DNS subdomain of up to 253 characters: 64 letters name one.
    if value == "a" * 64:
        value = "a" * 254
    replicaset = {("llm", "p"): ("ReplicaSet", "rs")}
    for series in (
        OwnerSeries(pods={("llm", "p"): ("StatefulSet", value)}, present=True),
        OwnerSeries(pods=replicaset, replicasets={("llm", "rs"): ("Deployment", value)}, present=True),
    ):
        ps = patch_set([held("p", "H100-SXM-80GB", "L4-24GB")], owners=series)
        files_parse(ps.files)
        assert ps.moves[0].outcome == "refused" and ps.files.keys() == {"kustomization.yaml", "README.md"}


def test_text_from_labels_stays_inside_comments() -> None:
    """A ReplicaSet's name only appears in the owner's source: the Deployment is patched, and the
    name, newlines and all, stays a comment."""
    evil = "rs\n---\napiVersion: v1\nkind: Secret\r\u2028\x85\ufeff\x00"
    series = OwnerSeries(pods={("llm", "p-7b9c4-x2k9q"): ("ReplicaSet", evil)},
                         replicasets={("llm", evil): ("Deployment", "web")}, present=True)  # fmt: skip
    reason = "fits L4-24GB\n# injected: true\napiVersion: v9\u2029"
    ps = patch_set([held("p-7b9c4-x2k9q", "H100-SXM-80GB", "L4-24GB", reason=reason)], owners=series)
    files_parse(ps.files)
    text = ps.files["llm_deployment_web.yaml"]
    assert yaml.safe_load(text)["metadata"] == {"name": "web", "namespace": "llm"}
    assert "kind: Secret" not in text.split("\napiVersion:", 1)[1] and "\\u000a" in text


SPECIAL = [("null", "yes", "on"), ("true", "123", "no"), ("off", "1e3", "y"), ("0x1f", "0o17", "nan"),
           ("0b101", "1-000", "inf")]  # fmt: skip


@pytest.mark.parametrize(("namespace", "name", "container"), SPECIAL)
def test_names_yaml_reads_otherwise_reach_the_object_unchanged(
    namespace: str, name: str, container: str, tmp_path: Path
) -> None:
    series = OwnerSeries(pods={(namespace, f"{name}-0"): ("StatefulSet", name)}, present=True)
    ps = patch_set([held(f"{name}-0", "H100-SXM-80GB", "H100-SXM-80GB/1g.20gb", namespace=namespace,
                         container=container)], owners=series)  # fmt: skip
    (m,) = ps.moves
    assert m.outcome == "patch", m.why
    base = {
        "apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": name, "namespace": namespace},
        "spec": {"serviceName": name, "selector": {"matchLabels": {"app": "x"}}, "template": {
            "metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": container, "image": "busybox",
                                     "resources": {"limits": {"nvidia.com/gpu": 1}}}]}}},
    }  # fmt: skip
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "sts.yaml").write_text(json.dumps(base))  # JSON: every string quoted
    (tmp_path / "base" / "kustomization.yaml").write_text("resources: [sts.yaml]\n")
    (tmp_path / "patches").mkdir()
    for file, text in ps.files.items():
        (tmp_path / "patches" / file).write_text(text)
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        "resources: [../base]\ncomponents: [../patches]\n"
    )
    # Read as a resource, the patch itself goes through the YAML reading Kubernetes tools share
    # (sigs.k8s.io/yaml): every name must come back a string, the same string.
    (tmp_path / "as-read").mkdir()
    (tmp_path / "as-read" / m.file).write_text(ps.files[m.file])
    (tmp_path / "as-read" / "kustomization.yaml").write_text(f"resources: [{m.file}]\n")
    (read,) = objects(kustomize(tmp_path / "as-read")).values()
    assert read == yaml.safe_load(ps.files[m.file])
    (obj,) = objects(kustomize(tmp_path / "overlay")).values()
    assert (obj["metadata"]["namespace"], obj["metadata"]["name"]) == (namespace, name)
    spec = pod_spec(obj)
    assert spec["containers"][0]["name"] == container
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/mig-1g.20gb": 1}
    assert spec["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    validate_strictly(obj)


def test_a_very_long_name_makes_a_file_name_a_file_system_takes() -> None:
    names = ["a" * 200 + "." + "b" * 52, "a" * 200 + "." + "c" * 52]
    series = OwnerSeries(
        pods={("llm", f"p{i}"): ("StatefulSet", n) for i, n in enumerate(names)}, present=True
    )
    ps = patch_set([held(f"p{i}", "H100-SXM-80GB", "L4-24GB") for i in range(2)], owners=series)
    patched = [f for f in ps.files if f.startswith("llm_")]
    assert len(patched) == 2 and all(len(f.encode()) <= 255 for f in patched)
