"""The adapter behind a real kube-apiserver (1.20.2, tests/control_plane.py) with the shipped
objects: its APIServices become Available, discovery and values go through the aggregator and
equal what the adapter and the exporter answer, and its doors stay shut (a user without RBAC is
403 at both, forged front-proxy headers without the front-proxy certificate are 401)."""

from __future__ import annotations

import contextlib
import json
import urllib.parse

import pytest
from adapter_support import get
from control_plane_pki import client_context
from control_plane_rig import Rig, apiservices_available, quantity
from servers import wait_for

pytestmark = pytest.mark.control_plane

EXT = "/apis/external.metrics.k8s.io/v1beta1"
ADAPTER = "https://127.0.0.1:443"


def ext_path(namespace: str, metric: str, selector: str) -> str:
    return f"{EXT}/namespaces/{namespace}/{metric}?" + urllib.parse.urlencode({"labelSelector": selector})


def test_apiservices_are_available_and_discovery_lists_the_metrics(kube_rig: Rig) -> None:
    available = apiservices_available(kube_rig.cluster)
    assert sorted(available) == [
        "v1beta1.custom.metrics.k8s.io",
        "v1beta1.external.metrics.k8s.io",
        "v1beta2.custom.metrics.k8s.io",
    ], available
    assert all(v.startswith("True Passed") for v in available.values()), available
    groups = {
        g["name"]: [v["version"] for v in g["versions"]] for g in kube_rig.cluster.get("/apis")["groups"]
    }
    assert groups["external.metrics.k8s.io"] == ["v1beta1"]
    assert sorted(groups["custom.metrics.k8s.io"]) == ["v1beta1", "v1beta2"]
    resources = {r["name"] for r in kube_rig.cluster.get(EXT)["resources"]}
    assert {"rightsizer_queue_depth", "rightsizer_workload_slo_latency_ratio"} <= resources, resources
    # kubectl reads the same discovery through the aggregator
    listed = ("api-resources", "--api-group=external.metrics.k8s.io", "-o", "name")
    with contextlib.suppress(AssertionError):  # the call below says why, if it still fails
        wait_for(lambda: kube_rig.cluster.kubectl(*listed, check=False).returncode == 0, 30)
    out = kube_rig.cluster.kubectl(*listed).stdout
    assert "rightsizer_queue_depth.external.metrics.k8s.io" in out.split(), out


def test_values_through_the_aggregator_equal_the_adapters_and_the_exporters(kube_rig: Rig) -> None:
    rig = kube_rig
    rig.set_depth("jobs", 17)
    wait_for(lambda: rig.exporter_value("rightsizer_queue_depth", queue="jobs") == 17, 30, what="depth 17")
    path = ext_path("demo", "rightsizer_queue_depth", "queue=jobs")
    admin = client_context(rig.cluster.ca, None, "rig-admin", "system:masters")

    def three() -> tuple[object, object, float | None]:
        via_api = [i["value"] for i in rig.cluster.get(path)["items"]]
        code, _, body = get(ADAPTER + path, context=admin)
        assert code == 200, body
        direct = [i["value"] for i in json.loads(body)["items"]]
        return via_api, direct, rig.exporter_value("rightsizer_queue_depth", queue="jobs")

    via_api, direct, exported = wait_for(
        lambda: (t := three())[0] == ["17"] and t, 30, what="17 through the API"
    )
    assert via_api == direct == ["17"] and exported == 17.0

    # The SLO ratio: the exporter's scaling-window ratio, served as the workload's latency ratio.
    ratio_path = ext_path("chat", "rightsizer_workload_slo_latency_ratio", "workload=llama3-8b")

    def ratios() -> tuple[float, float, float] | None:
        exported = rig.exporter_value("rightsizer_workload_slo_scaling_latency_ratio", workload="llama3-8b")
        [via_api] = rig.cluster.get(ratio_path)["items"]
        _, _, body = get(ADAPTER + ratio_path, context=admin)
        [direct] = json.loads(body)["items"]
        if exported is None:
            return None
        return quantity(via_api["value"]), quantity(direct["value"]), exported

    # The feeder's requests are steady, so the three agree once the window is full of them.
    got = wait_for(
        lambda: (r := ratios()) and abs(r[0] - r[2]) < 1e-3 and abs(r[1] - r[2]) < 1e-3 and r,
        60,
        what="the same ratio from the API, the adapter and the exporter",
    )
    assert got[0] == pytest.approx(got[2], abs=1e-3)


def test_a_user_without_rbac_is_403_at_the_apiserver_and_at_the_adapter(kube_rig: Rig) -> None:
    path = ext_path("demo", "rightsizer_queue_depth", "queue=jobs")
    nobody = kube_rig.cluster.context("nobody", None)
    code, body = kube_rig.cluster.request("GET", path, ctx=nobody)
    assert code == 403 and body["reason"] == "Forbidden", body
    # Straight to the adapter with the same certificate: its SubjectAccessReview says no.
    code, _, raw = get(ADAPTER + path, context=client_context(kube_rig.cluster.ca, None, "nobody"))
    assert code == 403, raw
    assert b"nobody" in raw, raw


def test_forged_front_proxy_headers_without_its_certificate_are_401(kube_rig: Rig) -> None:
    path = ext_path("demo", "rightsizer_queue_depth", "queue=jobs")
    forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
    code, _, raw = get(
        ADAPTER + path, headers=forged, context=client_context(kube_rig.cluster.ca, None, None)
    )
    assert code == 401, raw
    # ... and with a certificate from the cluster's client CA (not the front-proxy CA): the
    # headers are ignored, the certificate's own user is asked about, and refused.
    ctx = client_context(kube_rig.cluster.ca, None, "front-proxy-client")
    code, _, raw = get(ADAPTER + path, headers=forged, context=ctx)
    assert code == 403, raw
