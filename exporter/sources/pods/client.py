"""The kubelet pod-resources v1 ``List`` call over its unix socket, with a deadline.

The exporter opens a channel for each refresh and closes it afterwards (``close()``): an open
gRPC channel keeps gRPC's poller threads waking (about 0.1 % of a core while idle), whereas a
fresh connection every ``pods.refresh_interval_seconds`` costs a few milliseconds of CPU, leaves
no thread behind and reaches a restarted kubelet (a new socket at the same path) at once. Every
failure becomes one ``PodResourcesError`` whose message says what went wrong in a single line.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from rightsizer_core.snapshot import PodRef

from . import podresources_pb2

_SERVICE = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
LIST_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['List'].name}"  # /v1.PodResourcesLister/List

MAX_ANSWER_BYTES = 64 * 1024 * 1024  # a node with 110 pods answers a few tens of KiB


class PodResourcesError(Exception):
    """The kubelet could not be asked or its answer was unusable (one-line message)."""


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """One container's devices of one resource, as the kubelet reports them."""

    pod: PodRef
    resource: str
    device_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class KubeletAnswer:
    devices: tuple[ContainerDevices, ...]  # only the GPU resources asked for
    pods: int  # pods in the answer (any resources)
    skipped: tuple[str, ...]  # why entries were left out (malformed), one line each


def is_gpu_resource(name: str, resource_names: frozenset[str]) -> bool:
    return name in resource_names or name.startswith("nvidia.com/mig-")


def parse_answer(
    answer: podresources_pb2.ListPodResourcesResponse, resource_names: frozenset[str]
) -> KubeletAnswer:
    devices: list[ContainerDevices] = []
    skipped: list[str] = []
    for pod in answer.pod_resources:
        for container in pod.containers:
            for dev in container.devices:
                if not is_gpu_resource(dev.resource_name, resource_names):
                    continue
                where = f"{pod.namespace or '?'}/{pod.name or '?'}/{container.name or '?'}"
                if not (pod.name and pod.namespace and container.name):
                    skipped.append(f"{where}: pod, namespace or container name is empty")
                    continue
                ids = tuple(i for i in dev.device_ids if i)
                if not ids:
                    skipped.append(f"{where}: {dev.resource_name} lists no device ids")
                    continue
                devices.append(
                    ContainerDevices(PodRef(pod.name, pod.namespace, container.name), dev.resource_name, ids)
                )
    return KubeletAnswer(tuple(devices), len(answer.pod_resources), tuple(skipped))


def _describe(exc: grpc.aio.AioRpcError, socket: str, timeout: float) -> str:
    code = exc.code()
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return f"kubelet pod-resources List did not answer within {timeout:g}s ({socket})"
    if code == grpc.StatusCode.UNAVAILABLE:
        return f"kubelet pod-resources socket {socket} refuses connections: {exc.details() or 'unavailable'}"
    if code == grpc.StatusCode.UNIMPLEMENTED:
        return "kubelet does not serve pod-resources v1 List (Kubernetes 1.20 or newer needed)"
    if code == grpc.StatusCode.INTERNAL and "deserializ" in (exc.details() or "").lower():
        return "malformed answer from the kubelet pod-resources List (not a v1 ListPodResourcesResponse)"
    detail = (exc.details() or "").replace("\n", " ")[:200]
    return f"kubelet pod-resources List failed: {code.name}: {detail}"


class PodResourcesClient:
    """``List`` over one channel to the kubelet's socket; ``close()`` when done."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self._channel: grpc.aio.Channel | None = None
        self._list: grpc.aio.UnaryUnaryMultiCallable | None = None

    def _call(self) -> grpc.aio.UnaryUnaryMultiCallable:
        if self._list is None:
            options = [
                ("grpc.max_receive_message_length", MAX_ANSWER_BYTES),
                ("grpc.enable_http_proxy", 0),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ]
            self._channel = grpc.aio.insecure_channel(f"unix:{self.socket}", options=options)
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=podresources_pb2.ListPodResourcesRequest.SerializeToString,
                response_deserializer=_decode,
            )
        return self._list

    async def list(self, timeout: float, resource_names: frozenset[str]) -> KubeletAnswer:
        """Ask the kubelet which devices each container holds. Raises ``PodResourcesError``."""
        socket = self.socket
        try:
            mode = os.stat(socket).st_mode
        except FileNotFoundError:
            raise PodResourcesError(f"kubelet pod-resources socket {socket} does not exist") from None
        except OSError as exc:
            raise PodResourcesError(f"cannot reach {socket}: {exc.strerror or exc}") from None
        if not stat.S_ISSOCK(mode):
            raise PodResourcesError(f"{socket} is not a unix socket")
        try:
            answer = await self._call()(podresources_pb2.ListPodResourcesRequest(), timeout=timeout)
        except grpc.aio.AioRpcError as exc:
            raise PodResourcesError(_describe(exc, socket, timeout)) from None
        if isinstance(answer, _Malformed):
            raise PodResourcesError(f"malformed answer from the kubelet pod-resources List: {answer.error}")
        if not isinstance(answer, podresources_pb2.ListPodResourcesResponse):
            raise PodResourcesError("malformed answer from the kubelet pod-resources List: no message")
        return parse_answer(answer, resource_names)

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = self._list = None

    async def __aenter__(self) -> PodResourcesClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


@dataclass(frozen=True, slots=True)
class _Malformed:
    error: str


def _decode(data: bytes) -> podresources_pb2.ListPodResourcesResponse | _Malformed:
    """Never raises: gRPC would log a stack trace for a deserializer exception."""
    try:
        return podresources_pb2.ListPodResourcesResponse.FromString(data)
    except DecodeError as exc:
        return _Malformed(str(exc).replace("\n", " ")[:200])
