"""The kubelet pod-resources stubs speak the upstream wire contract (names and field numbers)."""

from __future__ import annotations

from exporter.sources.pods import podresources_pb2
from exporter.sources.pods.client import LIST_METHOD


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
