"""deploy/: every kustomization renders offline and every object validates for every supported
Kubernetes release (kubernetes-validate, strict); custom resources against the CRDs published in
``../shared/crds``; the plain Prometheus scrape configuration keeps what the ServiceMonitors keep.
"""

from __future__ import annotations

from typing import Any

import deploy_checks as checks
import jsonschema
import kubernetes_validate
import pytest
import yaml
from kube import (
    DEPLOY,
    NeedsKustomize,
    crd_schemas,
    is_custom,
    key,
    kubectl,
    named,
    render,
    render_plain,
    render_with_kubectl,
    supported_versions,
    validate_core,
    validate_custom,
)

KUSTOMIZATIONS = sorted(p.parent.relative_to(DEPLOY).as_posix() for p in DEPLOY.rglob("kustomization.yaml"))
EXAMPLE_FILES = sorted(p.relative_to(DEPLOY).as_posix() for p in (DEPLOY / "examples").glob("*.yaml"))
# Kinds whose CRDs are not published in ../shared/crds; checked by their wiring tests instead.
UNPUBLISHED = {("cert-manager.io/v1", "Issuer"), ("cert-manager.io/v1", "ClusterIssuer"),
               ("cert-manager.io/v1", "Certificate")}
# Where cert-manager objects may appear (cert-manager must be installed to apply them).
USES_CERT_MANAGER = {"examples/cert-manager", "examples/keda-cluster", "examples/demo-keda",
                     "components/keda-grpc-tls", "examples/keda-external-push.yaml"}


def rendered(name: str) -> list[dict[str, Any]]:
    try:
        return render(DEPLOY / name)
    except NeedsKustomize as exc:
        pytest.skip(str(exc))


def objects_of(source: str) -> list[dict[str, Any]]:
    if source.endswith(".yaml"):
        return [d for d in yaml.safe_load_all((DEPLOY / source).read_text()) if d]
    return rendered(source)


def test_there_is_something_to_test() -> None:
    assert {"base", "monitoring", "examples/demo", "examples/demo-keda", "examples/keda-cluster",
            "examples/cert-manager"} <= set(KUSTOMIZATIONS)
    assert len(EXAMPLE_FILES) >= 4
    assert supported_versions()[0] == "1.29" and len(supported_versions()) >= 5


def test_base_renders_without_kustomize_exactly_as_kubectl_does() -> None:
    """Plain resources only, so a user without kubectl gets the same objects from the files."""
    plain = {key(o): o for o in render_plain(DEPLOY / "base")}
    assert len(plain) == len(render_plain(DEPLOY / "base")), "duplicate objects in deploy/base"
    if kubectl() is None:
        pytest.skip("kubectl is not installed: compared only with itself")
    assert {key(o): o for o in render_with_kubectl(DEPLOY / "base")} == plain


@pytest.mark.parametrize("source", KUSTOMIZATIONS + EXAMPLE_FILES)
def test_core_objects_validate_strictly_for_every_supported_release(source: str) -> None:
    core = [o for o in objects_of(source)
            if not is_custom(o) and (o["apiVersion"], o["kind"]) not in UNPUBLISHED]
    for version in supported_versions():
        for obj in core:
            try:
                validate_core(obj, version)
            except kubernetes_validate.ValidationError as exc:
                what = f"{obj['kind']}/{obj['metadata']['name']}"
                pytest.fail(f"{source}: {what} on Kubernetes {version}: {exc}")


@pytest.mark.parametrize("source", KUSTOMIZATIONS + EXAMPLE_FILES)
def test_custom_resources_validate_against_published_crds(source: str) -> None:
    for obj in objects_of(source):
        if is_custom(obj):
            try:
                validate_custom(obj)
            except jsonschema.ValidationError as exc:
                pytest.fail(f"{source}: {obj['kind']}/{obj['metadata']['name']}: {exc.message} at "
                            f"{'/'.join(map(str, exc.absolute_path))}")
        else:
            assert (obj["apiVersion"], obj["kind"]) not in UNPUBLISHED or source in USES_CERT_MANAGER


def test_every_kind_we_ship_is_validated_somewhere() -> None:
    kinds = {(o["apiVersion"], o["kind"]) for s in KUSTOMIZATIONS + EXAMPLE_FILES for o in objects_of(s)}
    custom = {k for k in kinds if k in crd_schemas()}
    assert {("monitoring.coreos.com/v1", "ServiceMonitor"), ("monitoring.coreos.com/v1", "PrometheusRule"),
            ("keda.sh/v1alpha1", "ScaledObject")} <= custom
    assert kinds - custom - UNPUBLISHED, "no core objects?"


def test_strict_validation_rejects_typos() -> None:
    """What the two validators above would say about a misspelt field or a wrong type."""
    daemonset = next(o for o in rendered("base") if o["kind"] == "DaemonSet")
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    pod = broken["spec"]["template"]["spec"]
    pod["nodeSelecter"] = pod.pop("nodeSelector")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate_core(broken, supported_versions()[-1])
    monitor = next(o for o in rendered("monitoring") if o["kind"] == "ServiceMonitor")
    typo = yaml.safe_load(yaml.safe_dump(monitor))
    typo["spec"]["endpoints"][0]["honourLabels"] = True
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(typo)
    scaled = next(o for o in objects_of("examples/keda-external-push.yaml") if o["kind"] == "ScaledObject")
    wrong = yaml.safe_load(yaml.safe_dump(scaled))
    wrong["spec"]["triggers"][0]["metadata"]["target"] = 5  # trigger metadata values are strings
    with pytest.raises(jsonschema.ValidationError):
        validate_custom(wrong)


def test_prometheus_rule_groups_are_the_ones_promtool_checks() -> None:
    (rule,) = [o for o in rendered("monitoring") if o["kind"] == "PrometheusRule"]
    source = yaml.safe_load((DEPLOY / "monitoring" / "prometheusrule.yaml").read_text())
    assert rule["spec"] == source["spec"]  # tests/test_rules.py runs promtool on exactly these


def test_cert_manager_overlay_wires_certificate_secret_and_ca_injection() -> None:
    objs = rendered("examples/cert-manager")
    (cert,) = [o for o in objs if o["kind"] == "Certificate"]
    (issuer,) = [o for o in objs if o["kind"] == "Issuer"]
    assert cert["spec"]["issuerRef"]["name"] == issuer["metadata"]["name"]
    service = named(objs, "Service", "rightsizer-adapter")
    fqdn = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc"
    assert fqdn in cert["spec"]["dnsNames"], "the aggregator connects to <service>.<namespace>.svc"
    for api in (o for o in objs if o["kind"] == "APIService"):
        assert "insecureSkipTLSVerify" not in api["spec"]
        assert api["metadata"]["annotations"]["cert-manager.io/inject-ca-from"] == \
            f"{cert['metadata']['namespace']}/{cert['metadata']['name']}"
    pod = named(objs, "Deployment", "rightsizer-adapter")["spec"]["template"]["spec"]
    (volume,) = [v for v in pod["volumes"] if "secret" in v]
    assert volume["secret"]["secretName"] == cert["spec"]["secretName"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == volume["name"])
    args = pod["containers"][0]["args"]
    assert f"--tls-cert-file={mount['mountPath']}/tls.crt" in args
    assert f"--tls-private-key-file={mount['mountPath']}/tls.key" in args


@pytest.mark.parametrize(("overlay", "of"),
                         [("examples/keda-cluster", "base"), ("examples/demo-keda", "examples/demo")])
def test_keda_overlays_leave_external_metrics_to_keda(overlay: str, of: str) -> None:
    names = {o["metadata"]["name"] for o in rendered(overlay) if o["kind"] == "APIService"}
    assert names == {"v1beta1.custom.metrics.k8s.io", "v1beta2.custom.metrics.k8s.io"}
    original = {o["metadata"]["name"] for o in rendered(of) if o["kind"] == "APIService"}
    assert original == names | {"v1beta1.external.metrics.k8s.io"}
    ours = [o for o in rendered(overlay) if o["apiVersion"] != "cert-manager.io/v1"]  # gRPC TLS PKI
    assert len(ours) == len(rendered(of)) - 1


@pytest.mark.parametrize("overlay", [k for k in KUSTOMIZATIONS if k != "monitoring"
                                     and not k.startswith("components/")])
def test_no_adapter_data_endpoint_answers_without_authentication_as_shipped(overlay: str) -> None:
    objs = rendered(overlay)
    if [o for o in objs if o["kind"] == "Deployment" and o["metadata"]["name"] == "rightsizer-adapter"]:
        checks.no_adapter_data_endpoint_answers_without_authentication(objs)


@pytest.mark.parametrize("example", EXAMPLE_FILES)
def test_keda_examples_authenticate(example: str) -> None:
    objs = objects_of(example)
    auths = {o["metadata"]["name"]: o for o in objs if o["kind"] == "TriggerAuthentication"}
    for scaled in (o for o in objs if o["kind"] == "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            ref = trigger["authenticationRef"]["name"]
            params = {t["parameter"] for t in auths[ref]["spec"]["secretTargetRef"]}
            if trigger["type"] in ("external", "external-push"):
                assert {"caCert", "tlsClientCert", "tlsClientKey"} <= params
            if trigger["type"] == "metrics-api":
                assert trigger["metadata"]["authModes"] == "bearer" and "bearerToken" in params


def test_files_are_small_and_parse() -> None:
    for path in DEPLOY.rglob("*.yaml"):
        assert len(path.read_text().splitlines()) <= 300, path
        if "templates" not in path.relative_to(DEPLOY).parts:  # the Helm chart's: tests/test_helm_*.py
            list(yaml.safe_load_all(path.read_text()))
