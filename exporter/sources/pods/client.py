"""The kubelet pod-resources v1 ``List`` call over its unix socket, with a deadline.

The exporter opens a channel for each refresh and closes it afterwards (``close()``): an open
gRPC channel keeps gRPC's poller threads waking (about 0.1 % of a core while idle), whereas a
fresh connection every ``pods.refresh_interval_seconds`` costs a few milliseconds of CPU, leaves
no thread behind and reaches a restarted kubelet (a new socket at the same path) at once. Every
failure becomes one ``PodResourcesError`` whose message says what went wrong in a single line.

The answer is bounded by what it may cost: gRPC refuses one over ``pods.max_answer_bytes``, and the
rest is decoded one pod at a time from the raw bytes (protobuf would otherwise build the whole
answer at once: 20 MB of 205,000 pods took 100 MiB more than the bytes themselves), after
counting the pods it lists (``pods.max_pods``); a device entry with more than
``MAX_IDS_PER_DEVICE`` ids is left out as malformed.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass

import grpc
import grpc.aio
from google.protobuf.message import DecodeError

from rightsizer_core.snapshot import PodRef

from . import podresources_pb2

_SERVICE = podresources_pb2.DESCRIPTOR.services_by_name["PodResourcesLister"]
LIST_METHOD = f"/{_SERVICE.full_name}/{_SERVICE.methods_by_name['List'].name}"  # /v1.PodResourcesLister/List

MAX_IDS_PER_DEVICE = 1024  # ids of one resource in one container: GPUs, or time-sliced replicas of them


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


def _varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise DecodeError("truncated varint")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, at
        shift += 7


def pod_entries(data: bytes, max_pods: int) -> list[memoryview]:
    """The ``pod_resources`` entries (field 1) of a serialized ListPodResourcesResponse, undecoded.
    Raises DecodeError on broken framing, PodResourcesError past ``max_pods``."""
    view, at = memoryview(data), 0
    pods: list[memoryview] = []
    while at < len(data):
        key, at = _varint(data, at)
        wire = key & 7
        if wire == 2:
            length, at = _varint(data, at)
            end = at + length
            if end > len(data):
                raise DecodeError("a field runs past the end of the message")
            if key >> 3 == 1:
                if len(pods) == max_pods:
                    raise PodResourcesError(
                        f"kubelet pod-resources answer lists more than {max_pods} pods (pods.max_pods)"
                    )
                pods.append(view[at:end])
            at = end
        elif wire == 0:
            _, at = _varint(data, at)
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise DecodeError(f"wire type {wire} is not valid here")
    return pods


def decode_pods(data: bytes, max_pods: int) -> Iterable[podresources_pb2.PodResources]:
    for entry in pod_entries(data, max_pods):
        yield podresources_pb2.PodResources.FromString(bytes(entry))  # one pod: a small copy


def parse_answer(
    pod_resources: Iterable[podresources_pb2.PodResources], resource_names: frozenset[str]
) -> KubeletAnswer:
    devices: list[ContainerDevices] = []
    skipped: list[str] = []
    pods = 0
    for pod in pod_resources:
        pods += 1
        for container in pod.containers:
            for dev in container.devices:
                if not is_gpu_resource(dev.resource_name, resource_names):
                    continue
                where = f"{pod.namespace or '?'}/{pod.name or '?'}/{container.name or '?'}"
                if not (pod.name and pod.namespace and container.name):
                    skipped.append(f"{where}: pod, namespace or container name is empty")
                    continue
                if len(dev.device_ids) > MAX_IDS_PER_DEVICE:
                    skipped.append(f"{where}: {dev.resource_name} lists more than {MAX_IDS_PER_DEVICE} ids")
                    continue
                ids = tuple(i for i in dev.device_ids if i)
                if not ids:
                    skipped.append(f"{where}: {dev.resource_name} lists no device ids")
                    continue
                devices.append(
                    ContainerDevices(PodRef(pod.name, pod.namespace, container.name), dev.resource_name, ids)
                )
    return KubeletAnswer(tuple(devices), pods, tuple(skipped))


def _describe(exc: grpc.aio.AioRpcError, socket: str, timeout: float, max_bytes: int) -> str:
    code = exc.code()
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        size = f"{max_bytes >> 20} MiB" if max_bytes % 2**20 == 0 else f"{max_bytes} bytes"
        return f"kubelet pod-resources answer larger than {size} (pods.max_answer_bytes)"
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

    def __init__(self, socket: str, max_answer_bytes: int, max_pods: int) -> None:
        self.socket = socket
        self.max_answer_bytes = max_answer_bytes
        self.max_pods = max_pods
        self._channel: grpc.aio.Channel | None = None
        self._list: grpc.aio.UnaryUnaryMultiCallable | None = None

    def _call(self) -> grpc.aio.UnaryUnaryMultiCallable:
        if self._list is None:
            options = [
                ("grpc.max_receive_message_length", self.max_answer_bytes),
                ("grpc.enable_http_proxy", 0),
                ("grpc.initial_reconnect_backoff_ms", 100),
                ("grpc.min_reconnect_backoff_ms", 100),
                ("grpc.max_reconnect_backoff_ms", 1000),
            ]
            self._channel = grpc.aio.insecure_channel(f"unix:{self.socket}", options=options)
            self._list = self._channel.unary_unary(
                LIST_METHOD,
                request_serializer=podresources_pb2.ListPodResourcesRequest.SerializeToString,
                response_deserializer=None,  # the bytes as they came: decoded one pod at a time
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
            raise PodResourcesError(_describe(exc, socket, timeout, self.max_answer_bytes)) from None
        if not isinstance(answer, bytes):
            raise PodResourcesError("malformed answer from the kubelet pod-resources List: no message")
        try:
            return parse_answer(decode_pods(answer, self.max_pods), resource_names)
        except DecodeError as exc:
            why = str(exc).replace("\n", " ")[:200]
            raise PodResourcesError(f"malformed answer from the kubelet pod-resources List: {why}") from None

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close(grace=None)
            self._channel = self._list = None

    async def __aenter__(self) -> PodResourcesClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
