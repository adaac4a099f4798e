"""The Helm chart, with the real helm binary and no cluster: it lints strictly with its default
values and every values file of its ci/ folder; every object it renders validates strictly for
every supported Kubernetes release (custom resources against the published CRDs); the rendered
installation passes the same wiring checks as deploy/'s kustomizations (tests/deploy_checks.py),
including the programs' own ``--check-config`` of the rendered configuration files; the packaged
chart carries its values and its rule file; NOTES.txt names what was installed.
"""

from __future__ import annotations

import re
import tarfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import deploy_checks as checks
import jsonschema
import kubernetes_validate
import pytest
import yaml
from doc_blocks import commands
from helm import CHART, CI_VALUES, NAMESPACE, RELEASE, errors, helm, template, values_args
from kube import MIN_SUPPORTED, is_custom, supported_versions, validate_core, validate_custom
from servers import ROOT
from test_doc_shell_examples import check_flags, program_of

VALUES = [None, *CI_VALUES]  # None: the defaults
CERT_MANAGER = {("cert-manager.io/v1", k) for k in ("Issuer", "ClusterIssuer", "Certificate")}


def rendered(values_file: str | None) -> list[dict[str, Any]]:
    return template(*values_args(values_file))


def test_there_is_something_to_test() -> None:
    assert {"ci/demo-values.yaml", "ci/full-values.yaml", "ci/adapter-only-values.yaml",
            "ci/exporter-only-values.yaml"} <= set(CI_VALUES)
    assert helm("version", "--short").stdout.startswith("v4.")


def test_chart_is_versioned_with_the_package() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    package = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert chart["apiVersion"] == "v2"
    assert chart["appVersion"] == chart["version"] == package
    assert chart["kubeVersion"] == f">={MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]}.0-0"


@pytest.mark.parametrize("values_file", VALUES)
def test_lint_strict(values_file: str | None) -> None:
    result = helm("lint", "--strict", str(CHART), *values_args(values_file))
    assert result.returncode == 0, result.stdout + errors(result)
    assert "1 chart(s) linted, 0 chart(s) failed" in result.stdout
    assert not re.search(r"\[(WARNING|ERROR)\]", result.stdout), result.stdout


@pytest.mark.parametrize("values_file", VALUES)
def test_every_object_validates_strictly_for_every_supported_release(values_file: str | None) -> None:
    objs = rendered(values_file)
    assert objs
    for obj in objs:
        what = f"{values_file or 'defaults'}: {obj['kind']}/{obj['metadata']['name']}"
        if is_custom(obj):
            try:
                validate_custom(obj)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{what}: {exc.message} at {'/'.join(map(str, exc.absolute_path))}")
            continue
        if (obj["apiVersion"], obj["kind"]) in CERT_MANAGER:  # no published CRD: wiring tests below
            continue
        for version in supported_versions():
            try:
                validate_core(obj, version)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(f"{what} on Kubernetes {version}: {exc}")


def test_every_kind_the_chart_can_render_is_validated() -> None:
    kinds = {(o["apiVersion"], o["kind"]) for v in VALUES for o in rendered(v)}
    custom = {k for k in kinds if k[0] == "monitoring.coreos.com/v1"}
    assert {k for _, k in custom} == {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert {("cert-manager.io/v1", "Certificate"), ("cert-manager.io/v1", "ClusterIssuer")} <= kinds
    core = {k for _, k in kinds}
    assert {"DaemonSet", "Deployment", "APIService", "Namespace", "PodDisruptionBudget"} <= core


def test_kubernetes_older_than_supported_is_refused() -> None:
    oldest = f"{MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1]}.0"
    older = f"{MIN_SUPPORTED[0]}.{MIN_SUPPORTED[1] - 1}.9"
    assert helm("template", RELEASE, str(CHART), "--kube-version", oldest).returncode == 0
    result = helm("template", RELEASE, str(CHART), "--kube-version", older)
    assert result.returncode != 0 and "kubeVersion" in errors(result), errors(result)


# --- the same wiring checks as deploy/'s kustomizations ---------------------------------------

WIRING: dict[str, Callable[..., None]] = {
    "exporter-args-and-config": checks.exporter_accepts_its_arguments_and_config,
    "kubelet-paths": checks.exporter_sees_the_kubelet_paths_it_is_configured_with,
    "adapter-args-and-config": checks.adapter_accepts_its_arguments_and_config,
}
STATIC: dict[str, Callable[[list[dict[str, Any]]], None]] = {
    "file-arguments-mounted": checks.every_file_argument_lies_in_a_mounted_volume_holding_it,
    "selectors-and-names": checks.selectors_select_and_names_resolve,
    "adapter-needs-credentials": checks.no_adapter_data_endpoint_answers_without_authentication,
    "exporter-locked-down": checks.exporter_is_locked_down,
}


def about(check: str) -> str:
    """The component a check is about, or "" for checks of every object."""
    if "adapter" in check:
        return "adapter"
    return "exporter" if "exporter" in check or "kubelet" in check else ""


def has(objs: list[dict[str, Any]], check: str) -> bool:
    kind = {"adapter": "Deployment", "exporter": "DaemonSet"}.get(about(check))
    return kind is None or any(o["kind"] == kind for o in objs)


@pytest.mark.parametrize("values_file", VALUES)
@pytest.mark.parametrize("check", sorted(WIRING))
def test_wiring_with_the_programs(values_file: str | None, check: str, tmp_path: Path) -> None:
    """Arguments and rendered configuration files pass the programs' own --check-config."""
    objs = rendered(values_file)
    if not has(objs, check):
        pytest.skip(f"{values_file} installs no {about(check)}")
    WIRING[check](objs, tmp_path)


@pytest.mark.parametrize("values_file", VALUES)
@pytest.mark.parametrize("check", sorted(STATIC))
def test_wiring_of_the_objects(values_file: str | None, check: str) -> None:
    objs = rendered(values_file)
    if not has(objs, check):
        pytest.skip(f"{values_file} installs no {about(check)}")
    STATIC[check](objs)


def test_probes_are_answered_as_configured(tmp_path: Path) -> None:
    objs = rendered(None)
    checks.exporter_answers_its_probes(objs, tmp_path)
    checks.adapter_answers_probes_and_authenticated_scrapes_only(objs, tmp_path)


def test_another_release_name_prefixes_every_name_and_references_follow() -> None:
    objs = template(release="gpu", namespace="observability")
    names = {o["metadata"]["name"] for o in objs if o["kind"] != "APIService"}
    assert names and all(n.startswith("gpu-rightsizer") for n in names), names
    assert {o["metadata"].get("namespace") for o in objs} <= {"observability", "kube-system", None}
    checks.selectors_select_and_names_resolve(objs)
    for api in (o for o in objs if o["kind"] == "APIService"):
        assert api["spec"]["service"] == {"name": "gpu-rightsizer-adapter", "namespace": "observability",
                                          "port": 443}


# --- packaging and notes ----------------------------------------------------------------------

def test_package_carries_the_values_and_the_rule_file(tmp_path: Path) -> None:
    result = helm("package", str(CHART), "--destination", str(tmp_path))
    assert result.returncode == 0, errors(result)
    (archive,) = tmp_path.glob("rightsizer-*.tgz")
    shown = helm("show", "values", str(archive))
    assert shown.returncode == 0, errors(shown)
    assert shown.stdout.removesuffix("\n") == (CHART / "values.yaml").read_text()  # helm adds a newline
    with tarfile.open(archive) as tar:
        member = tar.getmember("rightsizer/files/prometheusrule.yaml")
        assert member.isfile(), "the link is packaged as the file it points to"
        packaged = tar.extractfile(member)
        assert packaged is not None
        assert packaged.read() == (ROOT / "deploy/monitoring/prometheusrule.yaml").read_bytes()
        assert "rightsizer/values.schema.json" in tar.getnames()
    unpacked = helm("template", RELEASE, str(archive), "--namespace", NAMESPACE,
                    "--set", "monitoring.prometheusRule.enabled=true")
    assert unpacked.returncode == 0, errors(unpacked)
    assert [d for d in yaml.safe_load_all(unpacked.stdout) if d] == \
        template("--set", "monitoring.prometheusRule.enabled=true")


def notes(*args: str) -> str:
    result = helm("install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--dry-run=client", *args)
    assert result.returncode == 0, errors(result)
    return result.stdout.split("NOTES:\n", 1)[1]


@pytest.mark.parametrize("values_file", VALUES)
def test_notes_name_what_was_installed_and_commands_that_work(values_file: str | None) -> None:
    text = notes(*values_args(values_file))
    objs = rendered(values_file)
    images = {c["image"] for o in objs if o["kind"] in ("DaemonSet", "Deployment")
              for c in o["spec"]["template"]["spec"]["containers"]}
    assert f"(image {images.pop()})" in text.splitlines()[0] and not images
    kinds = {"daemonset": "DaemonSet", "deployment": "Deployment"}
    problems = []
    for line in (t.strip() for t in text.splitlines() if t.strip().startswith("kubectl ")):
        for words in commands(line):
            problems += check_flags(program_of(words), [w for w in words if w.startswith("--")], line)
            for ref in (w for w in words if w.split("/")[0] in kinds and w.count("/") == 1):
                kind, name = ref.split("/")
                if not [o for o in objs if o["kind"] == kinds[kind] and o["metadata"]["name"] == name]:
                    problems.append(f"{line}: no {ref} installed")
    assert problems == []
    workloads = [o for o in objs if o["kind"] in kinds.values()]
    for workload in workloads:
        assert f"{workload['kind'].lower()}/{workload['metadata']['name']}" in text
    if any(o["kind"] == "APIService" for o in objs):
        assert "kubectl get apiservices" in text
