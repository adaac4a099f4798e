"""What the docs tell a user to install renders: every helm command that installs or upgrades the
chart (an upgrade with ``--reuse-values`` on top of the document's install before it), every Helm
values file and every user kustomization shown, each validated and wired like the chart's own
values files; and the image a command or kustomization runs is one the document builds and pushes
(or loads into kind), so the docs cannot send a user to an image they never made.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import deploy_checks as checks
import pytest
import yaml
from doc_blocks import Block, all_blocks, commands, kind
from helm import CHART, template
from kube import is_custom, render_with_kubectl, supported_versions, validate_core, validate_custom
from servers import ROOT

BLOCKS = all_blocks()
CHART_PATH = CHART.relative_to(ROOT).as_posix()


def of_kind(name: str) -> list[Block]:
    return [b for b in BLOCKS if kind(b) == name]


def document_commands(document: str) -> list[list[str]]:
    shell = [b for b in BLOCKS if b.document == document and kind(b) == "shell"]
    return [words for b in shell for words in commands(b.body)]


def made_images(document: str) -> set[str]:
    """Images the document's commands push to a registry or load into kind."""
    out = set()
    for words in document_commands(document):
        if words[:2] == ["docker", "push"]:
            out.add(words[2])
        if words[:3] == ["kind", "load", "docker-image"]:
            out.add(words[3])
    return out


def images(objs: list[dict[str, Any]]) -> set[str]:
    return {c["image"] for o in objs if o["kind"] in ("DaemonSet", "Deployment")
            for c in o["spec"]["template"]["spec"]["containers"]}


def check_installation(objs: list[dict[str, Any]], tmp_path: Path) -> None:
    for obj in objs:
        if is_custom(obj):
            validate_custom(obj)
        elif obj["apiVersion"] != "cert-manager.io/v1":
            for version in (supported_versions()[0], supported_versions()[-1]):
                validate_core(obj, version)
    if any(o["kind"] == "DaemonSet" for o in objs):
        checks.exporter_accepts_its_arguments_and_config(objs, tmp_path)
    if any(o["kind"] == "Deployment" for o in objs):
        checks.adapter_accepts_its_arguments_and_config(objs, tmp_path)
    checks.every_file_argument_lies_in_a_mounted_volume_holding_it(objs)
    checks.selectors_select_and_names_resolve(objs)


def helm_installs() -> list[tuple[str, str, str, list[str]]]:
    """(document, release, namespace, ``helm template`` arguments) of each documented helm
    install or upgrade of the chart."""
    found = []
    for document in sorted({b.document for b in BLOCKS}):
        installed: dict[str, list[str]] = {}
        for words in document_commands(document):
            if words[0] != "helm" or words[1] not in ("install", "upgrade") or CHART_PATH not in words:
                continue
            release = words[2]
            args, namespace, i = [], "default", 4
            while i < len(words):
                if words[i] in ("-n", "--namespace"):
                    namespace, i = words[i + 1], i + 2
                elif words[i] in ("--create-namespace", "--reuse-values"):
                    i += 1
                else:
                    args.append(words[i])
                    i += 1
            if "--reuse-values" in words:
                assert release in installed, f"{document}: helm upgrade {release} before its install"
                args = installed[release] + args
            installed[release] = args
            found.append((document, release, namespace, args))
    return found


INSTALLS = helm_installs()


def test_the_docs_install_the_chart() -> None:
    assert {d for d, *_ in INSTALLS} >= {"docs/deploy.md"} and len(INSTALLS) >= 3
    assert of_kind("helm-values") and of_kind("kustomization")


@pytest.mark.parametrize(("document", "release", "namespace", "args"), INSTALLS,
                         ids=[f"{d}:{' '.join(a)[:60]}" for d, _, _, a in INSTALLS])
def test_documented_helm_command_renders(document: str, release: str, namespace: str, args: list[str],
                                         tmp_path: Path) -> None:
    objs = template(*args, release=release, namespace=namespace)
    check_installation(objs, tmp_path)
    assert images(objs) <= made_images(document), f"{document}: runs {images(objs)}, never built and pushed"


@pytest.mark.parametrize("block", of_kind("helm-values"), ids=lambda b: b.where)
def test_documented_values_file_renders(block: Block, tmp_path: Path) -> None:
    path = tmp_path / "values.yaml"
    path.write_text(block.body)
    objs = template("-f", str(path))
    check_installation(objs, tmp_path)
    assert images(objs) <= made_images(block.document), block.where


@pytest.mark.parametrize("block", of_kind("kustomization"), ids=lambda b: b.where)
def test_documented_kustomization_runs_the_image_it_sets(block: Block, tmp_path: Path) -> None:
    """Written in a folder next to deploy/ (``../deploy/base``), as the document's commands make it."""
    kustomization = yaml.safe_load(block.body)
    folder = tmp_path / "my-rightsizer"
    folder.mkdir()
    kustomization["resources"] = [os.path.relpath((ROOT / "my-rightsizer" / r).resolve(), folder)
                                  for r in kustomization["resources"]]
    (folder / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    objs = render_with_kubectl(folder)
    (entry,) = kustomization["images"]
    wanted = f"{entry['newName']}{'@' + entry['digest'] if 'digest' in entry else ':' + entry['newTag']}"
    assert images(objs) == {wanted}
    assert wanted in made_images(block.document), f"{block.where}: {wanted} is never built and pushed"
    edits = [w for w in document_commands(block.document) if w[:4] == ["kustomize", "edit", "set", "image"]]
    assert [w[4] for w in edits] == [f"{entry['name']}={wanted}"], "the block is what the commands write"
    check_installation(objs, tmp_path)
