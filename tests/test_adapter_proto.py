"""The committed KEDA external-scaler stubs are what the .proto generates, and match KEDA's contract."""

from __future__ import annotations

import shutil
from pathlib import Path

from grpc_tools import protoc
from servers import ROOT

from adapter.keda import externalscaler_pb2

PROTO = "adapter/keda/externalscaler.proto"
GENERATED = ("externalscaler_pb2.py", "externalscaler_pb2.pyi", "externalscaler_pb2_grpc.py")


def test_committed_stubs_match_the_proto(tmp_path: Path) -> None:
    (tmp_path / "adapter/keda").mkdir(parents=True)
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
        fresh = (tmp_path / "adapter/keda" / name).read_text()
        committed = (ROOT / "adapter/keda" / name).read_text()
        assert fresh == committed, f"{name} is stale: regenerate it (command in {PROTO})"


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
