"""Pod labels from the Kubernetes API, for the ``labelSelector`` of custom-metrics pods queries.

HPA asks for a Pods metric with the scale target's pod selector (``app=chat``); GPU series carry
the pod's name, not its labels. So the adapter lists the namespace's pods (metadata only, paged)
and keeps the list for ``pod_list_ttl_seconds``: one LIST per namespace per period however many
selectors ask, concurrent askers sharing one request. Needs ``list`` on ``pods`` (ClusterRole).
"""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from rightsizer_core.files import checked_path, read_secret

from ..config import KubernetesSettings

HINT = " (the adapter needs list on pods, or kubernetes.pod_labels: series)"
PodLabels = Mapping[str, Mapping[str, str]]  # pod name → its labels
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"


class PodListError(Exception):
    """The pods of a namespace could not be listed; the message is one line."""


def in_cluster() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def wanted(cfg: KubernetesSettings) -> bool:
    return cfg.pod_labels == "api" or (cfg.pod_labels == "auto" and in_cluster())


class PodLister:
    def __init__(self, cfg: KubernetesSettings) -> None:
        self.cfg = cfg
        if cfg.api_url:
            self.base = cfg.api_url.rstrip("/")
        else:
            host = os.environ.get("KUBERNETES_SERVICE_HOST", "kubernetes.default.svc")
            port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
            self.base = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
        self._session: aiohttp.ClientSession | None = None
        self._lists: dict[str, tuple[float, PodLabels]] = {}  # namespace → (monotonic time, pods)
        self._inflight: dict[str, asyncio.Future[tuple[float, PodLabels]]] = {}

    async def start(self) -> None:
        ctx: ssl.SSLContext | bool = True
        if self.base.startswith("https://"):
            ctx = ssl.create_default_context(
                cafile=checked_path(self.cfg.ca_file) if Path(self.cfg.ca_file).exists() else None
            )
            if self.cfg.insecure_skip_verify:
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=4, ssl=ctx))

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def pods(self, namespace: str) -> tuple[float, PodLabels]:
        """(version, pods) of ``namespace``, listed at most once per TTL; raises PodListError."""
        found = self._lists.get(namespace)
        if found is not None and time.monotonic() - found[0] < self.cfg.pod_list_ttl_seconds:
            return found
        pending = self._inflight.get(namespace)
        if pending is None:
            pending = asyncio.ensure_future(self._list(namespace))
            self._inflight[namespace] = pending
            pending.add_done_callback(lambda _: self._inflight.pop(namespace, None))
        result = await asyncio.shield(pending)
        self._lists[namespace] = result
        return result

    def _token(self) -> str | None:
        try:
            return read_secret(self.cfg.token_file) or None
        except OSError:
            return None

    async def _list(self, namespace: str) -> tuple[float, PodLabels]:
        assert self._session is not None, "start() first"
        headers = {"Accept": METADATA_ONLY}
        token = self._token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        pods: dict[str, Mapping[str, str]] = {}
        params = {"limit": "500"}
        url = f"{self.base}/api/v1/namespaces/{namespace}/pods"
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_seconds)
        try:
            while True:
                async with self._session.get(url, params=params, headers=headers, timeout=timeout) as resp:
                    body: Any = (
                        await resp.json(content_type=None) if resp.status == 200 else await resp.text()
                    )
                    if resp.status != 200:
                        hint = HINT if resp.status in (401, 403) else ""
                        raise PodListError(
                            f"listing pods in {namespace} answered HTTP {resp.status}{hint}: {body[:200]}"
                        )
                for item in body.get("items") or ():
                    meta = item.get("metadata") or {}
                    if meta.get("name"):
                        pods[str(meta["name"])] = {
                            str(k): str(v) for k, v in (meta.get("labels") or {}).items()
                        }
                cont = (body.get("metadata") or {}).get("continue")
                if not cont:
                    return time.monotonic(), pods
                params = {"limit": "500", "continue": str(cont)}
        except TimeoutError:
            raise PodListError(
                f"listing pods in {namespace} timed out after {self.cfg.timeout_seconds}s"
            ) from None
        except (aiohttp.ClientError, ValueError, AttributeError, ssl.SSLError, OSError) as exc:
            raise PodListError(
                f"cannot list pods in {namespace}: {type(exc).__name__}: {exc}"[:300]
            ) from None
