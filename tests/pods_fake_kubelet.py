"""A fake kubelet pod-resources server: the real v1 gRPC API on a unix socket.

It is a grpc.aio server registered through the generated ``add_PodResourcesListerServicer_to_server``
(the same service, method and message definitions the kubelet serves). The answer to ``List`` is
a JSON list of pods in the API's own field names, re-read on every call so a test can change it::

    [{"name": "train-0", "namespace": "ml", "containers": [{"name": "main",
      "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-..."]}]}]}]

Modes (also re-read on every call, from ``<answer>.mode`` when that file exists): ``ok``;
``hang`` (never answers, so only the client's deadline ends the call); ``garbage`` (answers bytes
that are not a ListPodResourcesResponse); ``unimplemented``; ``raw`` (answers the bytes of
``<answer>.bin`` as they are: a serialized answer too large to convert from JSON on every call,
written by ``write_raw_answer``).

In-process: ``async with FakeKubelet(socket, answer_path):``. As a separate process, so a test can
kill it: ``kubelet_process(socket, answer_path)``, which runs this file as a script.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from google.protobuf import json_format

from exporter.sources.pods import podresources_pb2, podresources_pb2_grpc


def short_socket_dir() -> Path:
    """A fresh directory with a short path: unix socket paths are limited to 107 bytes."""
    return Path(tempfile.mkdtemp(prefix="kubelet-"))


def write_answer(path: Path, pods: list[dict[str, Any]], mode: str = "ok") -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(pods))
    tmp.replace(path)  # atomic: the server never reads half a file
    set_mode(path, mode)


def write_raw_answer(path: Path, pods: list[dict[str, Any]]) -> int:
    """Serialize ``pods`` once into ``<path>.bin`` and switch to ``raw`` mode; the answer's size."""
    data = json_format.ParseDict(
        {"pod_resources": pods}, podresources_pb2.ListPodResourcesResponse()
    ).SerializeToString()
    Path(f"{path}.bin").write_bytes(data)
    set_mode(path, "raw")
    return len(data)


def set_mode(answer_path: Path, mode: str) -> None:
    Path(f"{answer_path}.mode").write_text(mode)


# Bytes no ListPodResourcesResponse parser accepts: field 1, with a length far past the end.
GARBAGE = b"\x0a\xff\xff\xff\xff\x0f\x01"


class _RawBytesAllowed(grpc.aio.ServerInterceptor):
    """Lets a handler answer raw bytes (``garbage`` mode); messages go through the generated serializer."""

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.response_serializer is None:
            return handler
        serialize = handler.response_serializer
        return handler._replace(response_serializer=lambda r: r if isinstance(r, bytes) else serialize(r))


class _Lister(podresources_pb2_grpc.PodResourcesListerServicer):
    def __init__(self, answer_path: Path) -> None:
        self.answer_path = answer_path
        self.calls = 0

    def mode(self) -> str:
        try:
            return Path(f"{self.answer_path}.mode").read_text().strip() or "ok"
        except FileNotFoundError:
            return "ok"

    async def List(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        self.calls += 1
        mode = self.mode()
        if mode == "hang":
            await asyncio.sleep(3600)
        if mode == "unimplemented":
            await context.abort(grpc.StatusCode.UNIMPLEMENTED, "unknown method List")
        if mode == "garbage":
            return GARBAGE
        if mode == "raw":
            return Path(f"{self.answer_path}.bin").read_bytes()
        pods = json.loads(self.answer_path.read_text())
        return json_format.ParseDict({"pod_resources": pods}, podresources_pb2.ListPodResourcesResponse())


class FakeKubelet:
    def __init__(self, socket_path: Path, answer_path: Path) -> None:
        self.socket_path = socket_path
        self.lister = _Lister(answer_path)
        self.server: grpc.aio.Server | None = None

    async def start(self) -> None:
        self.server = grpc.aio.server(interceptors=(_RawBytesAllowed(),))
        podresources_pb2_grpc.add_PodResourcesListerServicer_to_server(self.lister, self.server)
        self.server.add_insecure_port(f"unix:{self.socket_path}")
        await self.server.start()

    async def stop(self) -> None:
        if self.server is not None:
            await self.server.stop(grace=None)
            self.server = None
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.socket_path)

    async def __aenter__(self) -> FakeKubelet:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


@contextlib.contextmanager
def kubelet_process(socket_path: Path, answer_path: Path) -> Iterator[subprocess.Popen[str]]:
    """This fake kubelet in its own process (so a test can SIGKILL it); stopped at the end."""
    proc = subprocess.Popen(
        [sys.executable, __file__, "--socket", str(socket_path), "--answer", str(answer_path)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the server prints "ready" once it listens
        if line.strip() != "ready":
            raise AssertionError(f"fake kubelet did not start: {line!r}, exit {proc.poll()}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)


async def _serve(socket_path: Path, answer_path: Path) -> None:
    kubelet = FakeKubelet(socket_path, answer_path)
    await kubelet.start()
    print("ready", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await kubelet.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="fake kubelet pod-resources server")
    ap.add_argument("--socket", required=True, type=Path)
    ap.add_argument("--answer", required=True, type=Path)
    args = ap.parse_args()
    asyncio.run(_serve(args.socket, args.answer))
