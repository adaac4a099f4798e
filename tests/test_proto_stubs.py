"""The committed gRPC stubs are exactly what their .proto files generate (regenerate with the
protoc command in each .proto's header when this fails)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from grpc_tools import protoc
from servers import ROOT

PROTOS = ["adapter/keda/externalscaler.proto", "exporter/sources/pods/podresources.proto"]


@pytest.mark.parametrize("proto", PROTOS)
def test_committed_stubs_match_the_proto(proto: str, tmp_path: Path) -> None:
    folder, stem = str(Path(proto).parent), Path(proto).stem
    (tmp_path / folder).mkdir(parents=True)
    shutil.copy(ROOT / proto, tmp_path / proto)
    args = ["protoc", f"-I{tmp_path}", f"--python_out={tmp_path}", f"--pyi_out={tmp_path}",
            f"--grpc_python_out={tmp_path}", str(tmp_path / proto)]  # fmt: skip
    assert protoc.main(args) == 0
    for name in (f"{stem}_pb2.py", f"{stem}_pb2.pyi", f"{stem}_pb2_grpc.py"):
        fresh = (tmp_path / folder / name).read_text()
        committed = (ROOT / folder / name).read_text()
        assert fresh == committed, f"{folder}/{name} is stale: regenerate it (command in {proto})"
