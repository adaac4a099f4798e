"""The KEDA external-scaler stubs speak KEDA's wire contract (names and field numbers)."""

from __future__ import annotations

from adapter.keda import externalscaler_pb2


def test_wire_contract_matches_keda() -> None:
    """Package, service, methods and field numbers of kedacore/keda externalscaler.proto (PROTOCOLS §6)."""
    assert externalscaler_pb2.DESCRIPTOR.package == "externalscaler"
    service = externalscaler_pb2.DESCRIPTOR.services_by_name["ExternalScaler"]
    methods = {m.name: (m.input_type.name, m.output_type.name, m.server_streaming) for m in service.methods}
    assert methods == {
        "IsActive": ("ScaledObjectRef", "IsActiveResponse", False),
        "StreamIsActive": ("ScaledObjectRef", "IsActiveResponse", True),
        "GetMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", False),
        "GetMetrics": ("GetMetricsRequest", "GetMetricsResponse", False),
        "StreamMetricSpec": ("ScaledObjectRef", "GetMetricSpecResponse", True),
    }
    numbers = {
        "ScaledObjectRef": {"name": 1, "namespace": 2, "scalerMetadata": 3},
        "IsActiveResponse": {"result": 1},
        "GetMetricSpecResponse": {"metricSpecs": 1},
        "MetricSpec": {"metricName": 1, "targetSize": 2, "targetSizeFloat": 3},
        "GetMetricsRequest": {"scaledObjectRef": 1, "metricName": 2},
        "GetMetricsResponse": {"metricValues": 1},
        "MetricValue": {"metricName": 1, "metricValue": 2, "metricValueFloat": 3},
    }
    for message, fields in numbers.items():
        desc = externalscaler_pb2.DESCRIPTOR.message_types_by_name[message]
        assert {f.name: f.number for f in desc.fields} == fields, message
    types = {
        f.name: f.type for f in externalscaler_pb2.DESCRIPTOR.message_types_by_name["MetricValue"].fields
    }
    assert types == {"metricName": 9, "metricValue": 3, "metricValueFloat": 1}  # string, int64, double
