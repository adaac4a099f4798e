"""The committed pod-resources stubs are what the .proto generates, and the wire contract holds."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpc_tools import protoc
from servers import ROOT

from exporter.sources.pods import podresources_pb2
from exporter.sources.pods.client import LIST_METHOD

PROTO = "exporter/sources/pods/podresources.proto"
GENERATED = ("podresources_pb2.py", "podresources_pb2.pyi", "podresources_pb2_grpc.py")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    (tmp_path / "exporter/sources/pods").mkdir(parents=True)
    shutil.copy(ROOT / PROTO, tmp_path / PROTO)
    args = [
        "protoc",
        f"-I{tmp_path}",
        f"--python_out={tmp_path}",
        f"--pyi_out={tmp_path}",
        f"--grpc_python_out={tmp_path}",
        str(tmp_path / PROTO),
    ]
    assert protoc.main(args) == 0
    for name in GENERATED:
        fresh = (tmp_path / "exporter/sources/pods" / name).read_text()
        committed = (ROOT / "exporter/sources/pods" / name).read_text()
        assert fresh == committed, f"{name} is stale: regenerate it (command in {PROTO})"


def test_wire_contract_matches_the_kubelet() -> None:
    """Names and field numbers of k8s.io/kubelet pkg/apis/podresources/v1/api.proto."""
    assert LIST_METHOD == "/v1.PodResourcesLister/List"
    service = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
    assert [m.name for m in service.methods] == ["List", "GetAllocatableResources", "Get"]
    numbers = {
        "ListPodResourcesResponse": {"pod_resources": 1},
        "PodResources": {"name": 1, "namespace": 2, "containers": 3},
        "ContainerResources": {"name": 1, "devices": 2, "cpu_ids": 3, "memory": 4, "dynamic_resources": 5},
        "ContainerDevices": {"resource_name": 1, "device_ids": 2, "topology": 3},
        "DynamicResource": {"claim_name": 2, "claim_namespace": 3, "claim_resources": 4},
        "ClaimResource": {"cdi_devices": 1, "driver_name": 2, "pool_name": 3, "device_name": 4},
    }
    for message, fields in numbers.items():
        desc = podresources_pb2.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in desc.fields} == fields, message
