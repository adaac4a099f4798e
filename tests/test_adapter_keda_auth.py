"""KEDA's two ways in, authenticated, through a real adapter process: the external scaler over
gRPC with TLS client certificates (client generated from the project's KEDA proto), and the
metrics-api endpoint in each of KEDA's authModes (apiKey, basic, bearer, tls)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
import trustme
from adapter_support import adapter, exporter_with_queues, get
from fake_apiserver import FakeApiServer, Identity, rbac
from servers import Process, wait_for
from test_adapter_delegated import bearer, write_config
from test_adapter_rotation import client_context, publish, serving

from adapter.keda import externalscaler_pb2 as pb
from adapter.keda import externalscaler_pb2_grpc as pb_grpc

REQUEST = pb.GetMetricsRequest(
    scaledObjectRef=pb.ScaledObjectRef(
        name="worker", namespace="prod", scalerMetadata={"metric": "rightsizer_queue_depth"}
    ),
    metricName="queue",
)
KEDA = "/keda/v1/metrics/rightsizer_queue_depth?namespace=prod"
POLICY = rbac(
    {
        "user": "keda-operator",
        "verbs": ["list"],
        "group": "external.metrics.k8s.io",
        "resources": ["*"],
        "namespaces": ["prod"],
    },
    {"user": "keda-client", "verbs": ["list"], "group": "external.metrics.k8s.io", "resources": ["*"]},
)


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Process]:
    # a queue in prod and in dev: queue rules answer 404 where there is none
    with exporter_with_queues(tmp_path_factory.mktemp("queues")) as p:
        yield p


def get_metrics(address: str, server_ca: trustme.CA, client_ca: trustme.CA | None) -> float:
    """One GetMetrics call on a new channel; raises grpc.RpcError when refused."""
    key = cert = None
    if client_ca is not None:
        leaf = client_ca.issue_cert(common_name="keda-operator")
        key, cert = leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()
    creds = grpc.ssl_channel_credentials(server_ca.cert_pem.bytes(), key, cert)
    with grpc.secure_channel(address, creds) as channel:
        reply = pb_grpc.ExternalScalerStub(channel).GetMetrics(REQUEST, timeout=5)
        return float(reply.metricValues[0].metricValueFloat)


def test_grpc_needs_a_client_certificate_from_its_ca_and_follows_rotation(
    tmp_path: Path, sim: Process
) -> None:
    server_ca, client_ca, other = trustme.CA(), trustme.CA(), trustme.CA()
    secret = tmp_path / "grpc-tls"
    secret.mkdir()
    publish(secret, "2026_01", serving(server_ca) | {"ca.crt": client_ca.cert_pem.bytes()})
    args = ["--exporter", sim.url, "--grpc-listen", "127.0.0.1:0", "--config", str(tmp_path / "a.yaml")]
    args += [f"--grpc-tls-cert-file={secret}/tls.crt", f"--grpc-tls-private-key-file={secret}/tls.key"]
    args += [f"--grpc-client-ca-file={secret}/ca.crt"]
    (tmp_path / "a.yaml").write_text("file_reload_interval_seconds: 0.1\n")
    with adapter(args) as p:
        address = p.extra["grpc"]
        assert get_metrics(address, server_ca, client_ca) >= 0
        for refused in (None, other):
            with pytest.raises(grpc.RpcError) as err:
                get_metrics(address, server_ca, refused)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        assert "data endpoints answer without authentication" not in p.log()
        # rotation: a new serving certificate and a new client CA, taken at the next handshake
        creds = grpc.ssl_channel_credentials(
            server_ca.cert_pem.bytes(),
            *(lambda leaf: (leaf.private_key_pem.bytes(), leaf.cert_chain_pems[0].bytes()))(
                client_ca.issue_cert(common_name="keda-operator")
            ),
        )
        with grpc.secure_channel(address, creds) as kept:
            stub = pb_grpc.ExternalScalerStub(kept)
            stub.GetMetrics(REQUEST, timeout=5)
            new_server_ca, new_client_ca = trustme.CA(), trustme.CA()
            publish(secret, "2026_02", serving(new_server_ca) | {"ca.crt": new_client_ca.cert_pem.bytes()})

            def rotated() -> bool:
                try:
                    return get_metrics(address, new_server_ca, new_client_ca) >= 0
                except grpc.RpcError:
                    return False

            wait_for(rotated, timeout=10, what="the rotated gRPC certificate and client CA")
            with pytest.raises(grpc.RpcError):
                get_metrics(address, server_ca, client_ca)  # a new connection on the old pair: refused
            assert stub.GetMetrics(REQUEST, timeout=5).metricValues  # the open connection keeps working


def test_grpc_without_client_ca_is_announced_as_open(sim: Process) -> None:
    with adapter(["--exporter", sim.url, "--grpc-listen", "127.0.0.1:0"]) as p:
        line = [x for x in p.log().splitlines() if "data endpoints answer without authentication" in x]
        assert len(line) == 1 and "keda-grpc" in line[0]


@pytest.fixture
def keda_adapter(tmp_path: Path, sim: Process) -> Iterator[tuple[Process, FakeApiServer, trustme.CA, Path]]:
    client_ca = trustme.CA()
    (tmp_path / "client-ca.crt").write_bytes(client_ca.cert_pem.bytes())
    secret = tmp_path / "keda-secret"
    secret.mkdir()
    publish(secret, "2026_01", {"api-key": b"k3y-one\n", "password": b"p4ss\n"})
    api = FakeApiServer(tmp_path, {"keda-token": Identity("keda-operator")}, POLICY)
    api.configmap_forbidden = True  # the files given must be enough
    config = write_config(
        tmp_path,
        api,
        authentication={"client_ca_file": str(tmp_path / "client-ca.crt")},
        metrics_api={
            "api_key_file": f"{secret}/api-key",
            "basic_username": "keda",
            "basic_password_file": f"{secret}/password",
        },
    )
    try:
        with adapter(["--exporter", sim.url, "--config", config]) as p:
            yield p, api, client_ca, secret
    finally:
        api.stop()


def test_metrics_api_in_each_auth_mode(keda_adapter: tuple[Process, FakeApiServer, trustme.CA, Path]) -> None:
    p, api, client_ca, _ = keda_adapter
    url = p.url + KEDA

    def code(headers: dict[str, str] | None = None, ctx: object = None) -> int:
        return get(url, headers, context=ctx)[0]  # type: ignore[arg-type]

    assert code() == 401
    # apiKey (KEDA's default header X-API-KEY)
    code_, _, body = get(url, {"X-API-KEY": "k3y-one"})
    assert code_ == 200 and "value" in json.loads(body)
    assert code({"X-API-KEY": "wrong"}) == 401
    # basic
    assert code({"Authorization": "Basic a2VkYTpwNHNz"}) == 200  # keda:p4ss
    assert code({"Authorization": "Basic a2VkYTp3cm9uZw=="}) == 401  # keda:wrong
    # bearer: TokenReview, then a SubjectAccessReview for the namespace asked
    assert code(bearer("keda-token")) == 200
    assert get(p.url + KEDA.replace("prod", "dev"), bearer("keda-token"))[0] == 403
    assert code(bearer("forged")) == 401
    asked = [s["resourceAttributes"] for s in api.access_reviews if s["user"] == "keda-operator"]
    assert {
        "namespace": "dev",
        "verb": "list",
        "group": "external.metrics.k8s.io",
        "version": "v1beta1",
        "resource": "rightsizer_queue_depth",
    } in asked
    # tls: a client certificate from the x509 client CA (a file here: the ConfigMap is forbidden)
    assert code(ctx=client_context(client_ca, "keda-client")) == 200
    assert "cannot read kube-system/extension-apiserver-authentication" in p.log()


def test_metrics_api_key_file_rotates(keda_adapter: tuple[Process, FakeApiServer, trustme.CA, Path]) -> None:
    p, _, _, secret = keda_adapter
    url = p.url + KEDA
    assert get(url, {"X-API-KEY": "k3y-one"})[0] == 200
    publish(secret, "2026_02", {"api-key": b"k3y-two\n", "password": b"p4ss\n"})
    wait_for(lambda: get(url, {"X-API-KEY": "k3y-two"})[0] == 200, timeout=10, what="the new API key")
    assert get(url, {"X-API-KEY": "k3y-one"})[0] == 401
