"""Render deploy/ as ``kubectl kustomize`` does and validate objects as the API server would.

``kubectl kustomize`` renders when kubectl is installed (scripts/k8s-tools installs it). Without
it, a kustomization made only of ``resources`` and ``images`` (deploy/base, deploy/monitoring) is
rendered here the same way: the listed files' documents, and listed directories' kustomizations,
in order, with the images set; anything more (patches) needs kustomize, and the caller is told so.

Core objects are validated with kubernetes-validate (strict: unknown fields are errors, as with
``kubectl apply --validate=strict``); custom resources against their CRD's ``openAPIV3Schema``,
read from ``../shared/crds`` and made strict the same way (structural schemas prune unknown
fields, which hides typos; here they fail).
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from k8s_tools import TOOLS
from servers import ROOT, SHARED

DEPLOY = ROOT / "deploy"
CRDS = SHARED / "crds"
MIN_SUPPORTED = (1, 29)  # oldest Kubernetes minor release we support (README "Deploy")


class NeedsKustomize(Exception):
    """The kustomization uses more than plain resources and kubectl is not installed."""


def supported_versions() -> list[str]:
    """Every Kubernetes minor release from MIN_SUPPORTED that kubernetes-validate has schemas for."""
    versions = {kubernetes_validate.utils.major_minor(v) for v in kubernetes_validate.utils.all_versions()}
    return [v for v in sorted(versions, key=lambda s: tuple(map(int, s.split("."))))
            if tuple(map(int, v.split("."))) >= MIN_SUPPORTED]


def kubectl() -> str | None:
    """scripts/k8s-tools' pinned kubectl, else one on PATH, else None."""
    own = TOOLS / "kubectl"
    return str(own) if own.is_file() else shutil.which("kubectl")


def render_with_kubectl(directory: Path) -> list[dict[str, Any]]:
    binary = kubectl()
    assert binary is not None
    result = subprocess.run([binary, "kustomize", str(directory)], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, f"kubectl kustomize {directory}: {result.stderr}"
    return [d for d in yaml.safe_load_all(result.stdout) if d]


def image_name(reference: str) -> str:
    """The image's name without tag or digest: ``registry:5000/team/app:1.0`` → ``registry:5000/team/app``."""
    name = reference.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


def set_images(objects: list[dict[str, Any]], images: list[dict[str, str]]) -> None:
    """Kustomize's ``images`` transformer on pod templates: name → newName, newTag or digest."""
    for obj in objects:
        pod = obj.get("spec", {}).get("template", {}).get("spec", {})
        for container in pod.get("initContainers", []) + pod.get("containers", []):
            for entry in images:
                if image_name(container["image"]) != entry["name"]:
                    continue
                old = container["image"].removeprefix(entry["name"])
                name = entry.get("newName", entry["name"])
                if "digest" in entry:
                    container["image"] = f"{name}@{entry['digest']}"
                elif "newTag" in entry:
                    container["image"] = f"{name}:{entry['newTag']}"
                else:
                    container["image"] = name + old


def render_plain(directory: Path) -> list[dict[str, Any]]:
    """A kustomization of resources and images, rendered as kustomize does (without its kind ordering)."""
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    extra = set(kustomization) - {"apiVersion", "kind", "resources", "images"}
    if extra:
        raise NeedsKustomize(f"{directory.relative_to(ROOT)} uses {sorted(extra)}, which needs kustomize "
                             "(kubectl is not installed)")
    out: list[dict[str, Any]] = []
    for entry in kustomization["resources"]:
        path = (directory / entry).resolve()
        if path.is_dir():
            out += render_plain(path)
        else:
            out += [d for d in yaml.safe_load_all(path.read_text()) if d]
    set_images(out, kustomization.get("images", []))
    return out


@cache
def _render(directory: Path) -> str:
    return json.dumps(render_with_kubectl(directory) if kubectl() else render_plain(directory))


def render(directory: Path) -> list[dict[str, Any]]:
    """The kustomization's objects (rendered once per test run; each caller gets its own copy)."""
    return list(json.loads(_render(directory.resolve())))


def named(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def key(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    meta = obj["metadata"]
    return obj["apiVersion"], obj["kind"], meta.get("namespace", ""), meta["name"]


# --- custom resources -------------------------------------------------------------------------

def _strict(schema: dict[str, Any]) -> dict[str, Any]:
    """Close every object schema that lists properties and does not keep unknown fields."""
    if isinstance(schema, dict):
        for value in schema.values():
            if isinstance(value, dict):
                _strict(value)
            elif isinstance(value, list):
                for item in value:
                    _strict(item)
        if ("properties" in schema and "additionalProperties" not in schema
                and not schema.get("x-kubernetes-preserve-unknown-fields")):
            schema["additionalProperties"] = False
    return schema


@cache
def crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    """{(apiVersion, kind): strict schema} for every served version of every CRD in shared/crds."""
    out = {}
    for path in sorted(CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            if version.get("served"):
                schema = copy.deepcopy(version["schema"]["openAPIV3Schema"])
                out[(f"{group}/{version['name']}", kind)] = _strict(schema)
    return out


def is_custom(obj: dict[str, Any]) -> bool:
    return (obj["apiVersion"], obj["kind"]) in crd_schemas()


def validate_custom(obj: dict[str, Any]) -> None:
    """Against the CRD's schema; metadata against Kubernetes' own ObjectMeta."""
    schema = crd_schemas()[(obj["apiVersion"], obj["kind"])]
    jsonschema.Draft7Validator(schema).validate(obj)
    holder = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj["metadata"]}
    kubernetes_validate.validate(holder, supported_versions()[-1], strict=True)


@cache
def _validate_core(text: str, version: str) -> None:
    kubernetes_validate.validate(json.loads(text), version, strict=True)


def validate_core(obj: dict[str, Any], version: str) -> None:
    """Strict validation; an object met again (overlays repeat the base) is not checked twice."""
    _validate_core(json.dumps(obj, sort_keys=True), version)
