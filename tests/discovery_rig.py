"""A node for discovery tests: the kubelet's two APIs, its checkpoint, and inference-server replicas.

- ``KubeletPods``: the kubelet's ``GET /pods`` over HTTPS (a real TLS server with a certificate
  from a test CA, the bearer token checked), answering a v1 PodList built from ``PodSpec`` values
  that a test changes while it runs.
- The pod-resources gRPC API is ``pods_fake_kubelet.kubelet_process`` (the real protocol), and
  the device-manager checkpoint is the kubelet's JSON format (``checkpoint_json``).
- ``Replicas``: one aiohttp server per pod IP, each on a loopback alias 127.0.0.x and the same
  port (as pods of one Deployment share a port and differ by IP), each serving its own page.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web
from queue_servers import FakeHttpServer

TOKEN = "discovery-test-token"


@dataclass
class PodSpec:
    """One pod as the kubelet lists it (only the fields discovery reads, in the API's own shapes)."""

    name: str
    uid: str
    ip: str
    port: int
    gpus: tuple[str, ...] = ()
    namespace: str = "prod"
    annotations: dict[str, str] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    owner: tuple[str, str] | None = None  # (kind, name) of the controller
    image: str = "registry.example/serving:1"
    ready: bool = True
    terminating: bool = False
    container: str = "server"

    def item(self) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "uid": self.uid,
            "annotations": self.annotations,
            "labels": self.labels,
        }
        if self.owner is not None:
            kind, name = self.owner
            meta["ownerReferences"] = [
                {"apiVersion": "apps/v1", "kind": kind, "name": name, "uid": f"owner-{name}",
                 "controller": True, "blockOwnerDeletion": True}
            ]  # fmt: skip
        if self.terminating:
            meta["deletionTimestamp"] = "2026-11-27T21:00:00Z"
        return {
            "metadata": meta,
            "spec": {
                "nodeName": "node",
                "containers": [
                    {
                        "name": self.container,
                        "image": self.image,
                        "ports": [{"containerPort": self.port, "protocol": "TCP"}],
                    }
                ],
            },
            "status": {
                "phase": "Running",
                "podIP": self.ip,
                "conditions": [{"type": "Ready", "status": "True" if self.ready else "False"}],
            },
        }

    def pod_resources(self) -> dict[str, Any]:
        devices = [{"resource_name": "nvidia.com/gpu", "device_ids": list(self.gpus)}] if self.gpus else []
        return {"name": self.name, "namespace": self.namespace,
                "containers": [{"name": self.container, "devices": devices}]}  # fmt: skip


def pod_list(pods: Iterable[PodSpec]) -> bytes:
    return json.dumps({"kind": "PodList", "apiVersion": "v1", "metadata": {},
                       "items": [p.item() for p in pods]}).encode()  # fmt: skip


def checkpoint_json(pods: Iterable[PodSpec]) -> str:
    entries = [
        {"PodUID": p.uid, "ContainerName": p.container, "ResourceName": "nvidia.com/gpu",
         "DeviceIDs": {"0": list(p.gpus)}, "AllocResp": ""}
        for p in pods
        if p.gpus
    ]  # fmt: skip
    return json.dumps({"Data": {"PodDeviceEntries": entries, "RegisteredDevices": {}}, "Checksum": 0})


class KubeletPods:
    """The kubelet's /pods over HTTPS; ``pods`` is what it lists, ``ca_file`` verifies it."""

    def __init__(self, tmp: Path, pods: list[PodSpec]) -> None:
        self.pods = pods
        ca = trustme.CA()
        self.ca_file = tmp / "kubelet-ca.pem"
        ca.cert_pem.write_to_path(str(self.ca_file))
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ca.issue_cert("127.0.0.1").configure_cert(ctx)
        self.server = FakeHttpServer(ssl_context=ctx)
        self.route = self.server.route(
            "/pods",
            body=lambda: pod_list(self.pods),
            content_type="application/json",
            require={"Authorization": f"Bearer {TOKEN}"},
        )

    @property
    def url(self) -> str:
        return self.server.url("/pods")

    def __enter__(self) -> KubeletPods:
        self.server.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.__exit__(*exc)


class Replicas:
    """Inference-server pages on loopback aliases, one per pod IP, all on one port; ``pages[ip]``
    renders that replica's page (``None`` in ``down`` closes nothing: the server is stopped)."""

    def __init__(self, pages: dict[str, Callable[[], bytes]], port: int) -> None:
        self.pages = pages
        self.port = port
        self.requests: dict[str, int] = dict.fromkeys(pages, 0)
        self._runners: dict[str, web.AppRunner] = {}
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def _app(self, ip: str) -> web.Application:
        async def metrics(request: web.Request) -> web.Response:
            self.requests[ip] += 1
            return web.Response(body=self.pages[ip](), content_type="text/plain")

        app = web.Application()
        app.router.add_get("/metrics", metrics)
        return app

    async def _start(self, ip: str) -> None:
        runner = web.AppRunner(self._app(ip), access_log=None, shutdown_timeout=0.2)
        await runner.setup()
        await web.TCPSite(runner, ip, self.port).start()
        self._runners[ip] = runner

    async def _stop(self, ip: str) -> None:
        runner = self._runners.pop(ip, None)
        if runner is not None:
            await runner.cleanup()

    def start(self, ip: str) -> None:
        asyncio.run_coroutine_threadsafe(self._start(ip), self._loop).result(10)

    def stop(self, ip: str) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(ip), self._loop).result(10)

    def __enter__(self) -> Replicas:
        self._thread.start()
        for ip in self.pages:
            self.start(ip)
        return self

    def __exit__(self, *exc: object) -> None:
        for ip in list(self._runners):
            self.stop(ip)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
