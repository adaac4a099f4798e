"""The image both programs run is a real, configurable reference: deploy/base runs
ghcr.io/rightsizer/rightsizer at the package version (its kustomization's ``images``), an overlay's
``images`` entry (what ``kustomize edit set image`` writes) replaces it by tag or by digest, and the
Helm chart's image values do the same; every container gets the reference configured, no other.
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from helm import template
from kube import DEPLOY, render, render_plain, render_with_kubectl
from servers import ROOT

VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
PUBLISHED = "ghcr.io/rightsizer/rightsizer"
DIGEST = "sha256:" + "0123456789abcdef" * 4


def images(objs: list[dict[str, Any]]) -> list[str]:
    """The image of every container of every pod template, Rightsizer's and any other."""
    pods = [o["spec"]["template"]["spec"] for o in objs if "template" in o.get("spec", {})]
    return [c["image"] for p in pods for c in p.get("initContainers", []) + p["containers"]]


def pull_policies(objs: list[dict[str, Any]]) -> set[str]:
    return {c.get("imagePullPolicy", "") for o in objs if "template" in o.get("spec", {})
            for c in o["spec"]["template"]["spec"]["containers"]}


def test_deploy_base_runs_the_published_image_at_the_package_version() -> None:
    kustomization = yaml.safe_load((DEPLOY / "base" / "kustomization.yaml").read_text())
    assert kustomization["images"] == [{"name": PUBLISHED, "newTag": VERSION}]
    assert images(render(DEPLOY / "base")) == [f"{PUBLISHED}:{VERSION}"] * 2
    assert pull_policies(render(DEPLOY / "base")) == {"IfNotPresent"}


def overlay(tmp_path: Path, entry: dict[str, str]) -> Path:
    """A user's overlay of deploy/base with an ``images`` entry, as ``kustomize edit set image`` writes it."""
    folder = tmp_path / "my-rightsizer"
    folder.mkdir()
    base = os.path.relpath(DEPLOY / "base", folder)  # kustomize refuses absolute paths
    (folder / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
        "resources": [base], "images": [{"name": PUBLISHED, **entry}]}))
    return folder


KUSTOMIZE = [
    ({"newName": "registry.example.com/platform/rightsizer", "newTag": "0.1.0"},
     "registry.example.com/platform/rightsizer:0.1.0"),
    ({"newTag": "0.2.0-rc.1"}, f"{PUBLISHED}:0.2.0-rc.1"),
    ({"newName": "registry.example.com:5000/rightsizer", "digest": DIGEST},
     f"registry.example.com:5000/rightsizer@{DIGEST}"),
    ({"newName": "mirror.example.com/ghcr/rightsizer/rightsizer"},
     f"mirror.example.com/ghcr/rightsizer/rightsizer:{VERSION}"),
]


@pytest.mark.parametrize(("entry", "expected"), KUSTOMIZE, ids=[e for _, e in KUSTOMIZE])
def test_kustomize_images_entry_sets_every_container(entry: dict[str, str], expected: str,
                                                      tmp_path: Path) -> None:
    folder = overlay(tmp_path, entry)
    assert images(render_with_kubectl(folder)) == [expected] * 2
    # the tests' own renderer (for machines without kubectl) agrees with kustomize
    assert sorted(images(render_plain(folder))) == [expected] * 2


HELM = [
    ([], f"{PUBLISHED}:{VERSION}"),  # the tag defaults to appVersion
    (["image.tag=0.2.0"], f"{PUBLISHED}:0.2.0"),
    (["image.registry=registry.example.com", "image.repository=platform/rightsizer"],
     f"registry.example.com/platform/rightsizer:{VERSION}"),
    (["image.registry=registry.example.com:5000", f"image.digest={DIGEST}", "image.tag=ignored"],
     f"registry.example.com:5000/rightsizer/rightsizer@{DIGEST}"),
    (["image.registry=", "image.repository=rightsizer"], f"rightsizer:{VERSION}"),
]


@pytest.mark.parametrize(("values", "expected"), HELM, ids=[e for _, e in HELM])
def test_helm_image_values_set_every_container(values: list[str], expected: str) -> None:
    objs = template(*[a for v in values for a in ("--set", v)])
    assert images(objs) == [expected] * 2


def test_helm_pull_policy_and_secrets_reach_both_pods() -> None:
    objs = template("--set", "image.pullPolicy=Always", "--set", "imagePullSecrets[0].name=registry-creds")
    assert pull_policies(objs) == {"Always"}
    pods = [o["spec"]["template"]["spec"] for o in objs if o["kind"] in ("DaemonSet", "Deployment")]
    assert len(pods) == 2 and all(p["imagePullSecrets"] == [{"name": "registry-creds"}] for p in pods)
    assert "imagePullSecrets" not in str(template())  # none unless asked for


def test_helm_and_kustomize_default_to_the_same_image() -> None:
    assert images(template()) == images(render(DEPLOY / "base"))
    assert pull_policies(template()) == pull_policies(render(DEPLOY / "base"))
