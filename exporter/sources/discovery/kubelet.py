"""The kubelet's pod list (``GET /pods`` on its HTTPS port, a v1 PodList) and the page probe.

The kubelet authenticates the service account's bearer token and asks the API server whether it
may ``get`` ``nodes/pods`` (Kubernetes 1.33+, fine-grained kubelet authorization) or
``nodes/proxy``. Answers are bounded: at most ``discovery.max_answer_bytes`` is read, and a larger
one fails the refresh with the bound named. Every failure is one ``KubeletError`` line.
"""

from __future__ import annotations

import json
import os
import ssl
from typing import Any

import aiohttp

from ..queues.base import QueueSourceError, SecretFile, shorten
from .settings import DiscoverySettings
from .targets import SERVER_KINDS

# What each kind's page names first (its depth family's prefix), for pods whose kind nothing else tells.
PAGE_MARKERS = (
    ("vllm", b"vllm:"),
    ("sglang", b"sglang:"),
    ("tgi", b"tgi_"),
    ("triton", b"nv_inference_"),
)
PROBE_LIMIT = 4 * 2**20  # a page that names no server within this many bytes is not one


class KubeletError(Exception):
    """The pod list could not be read (one-line message)."""


def kubelet_url(settings: DiscoverySettings) -> str:
    if settings.kubelet_url:
        return settings.kubelet_url
    node = os.environ.get("NODE_IP", "").strip() or "127.0.0.1"
    host = f"[{node}]" if ":" in node else node
    return f"https://{host}:10250/pods"


def _ssl(settings: DiscoverySettings) -> ssl.SSLContext | bool:
    if settings.tls_insecure_skip_verify:
        return False
    return ssl.create_default_context(cafile=settings.tls_ca_file) if settings.tls_ca_file else True


async def _read_bounded(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    chunks, size = [], 0
    async for chunk in resp.content.iter_chunked(65536):
        size += len(chunk)
        if size > limit:
            raise KubeletError(f"{what} is larger than {limit} bytes (discovery.max_answer_bytes)")
        chunks.append(chunk)
    return b"".join(chunks)


class KubeletPods:
    """Reads the pod list over one keep-alive session; ``close()`` when done."""

    def __init__(self, settings: DiscoverySettings) -> None:
        self.settings = settings
        self.url = kubelet_url(settings)
        self._token = (
            SecretFile(settings.bearer_token_file, "discovery.bearer_token_file", token=True)
            if settings.bearer_token_file
            else None
        )
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            timeout = aiohttp.ClientTimeout(total=self.settings.timeout_seconds)
            self._session = aiohttp.ClientSession(timeout=timeout, trust_env=False)
        return self._session

    async def items(self) -> list[Any]:
        """The pods the kubelet runs (``items`` of its PodList). Raises ``KubeletError``."""
        headers = {"Accept": "application/json"}
        try:
            if self._token is not None:
                headers["Authorization"] = f"Bearer {self._token.value()}"
            async with self._client().get(self.url, headers=headers, ssl=_ssl(self.settings)) as resp:
                if resp.status in (401, 403):
                    raise KubeletError(
                        f"kubelet {self.url} answered {resp.status}: the exporter's service account needs "
                        "get on nodes/pods (or nodes/proxy before Kubernetes 1.33)"
                    )
                if resp.status != 200:
                    raise KubeletError(f"kubelet {self.url} answered HTTP {resp.status}")
                body = await _read_bounded(resp, self.settings.max_answer_bytes, "the kubelet's pod list")
        except QueueSourceError as exc:
            raise KubeletError(str(exc)) from None
        except TimeoutError:
            seconds = self.settings.timeout_seconds
            raise KubeletError(f"kubelet {self.url} did not answer within {seconds:g}s") from None
        except (aiohttp.ClientError, OSError, ssl.SSLError) as exc:
            raise KubeletError(shorten(f"cannot read {self.url}: {exc}")) from None
        try:
            doc = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise KubeletError(f"kubelet {self.url} did not answer JSON") from None
        except RecursionError:  # the C decoder stops at the interpreter's recursion limit
            raise KubeletError(f"kubelet {self.url} answered JSON nested too deep") from None
        items = doc.get("items") if isinstance(doc, dict) else None
        if not isinstance(items, list):
            raise KubeletError(f"kubelet {self.url} answered no PodList (no items list)")
        return items

    async def probe(self, url: str) -> str | None:
        """The server kind a page names (its first family prefix of a known server); None when the
        page names none within ``PROBE_LIMIT`` bytes. Raises ``KubeletError`` when unreachable."""
        found = b""
        try:
            async with self._client().get(url, ssl=False) as resp:
                if resp.status != 200:
                    raise KubeletError(f"{url} answered HTTP {resp.status}")
                size = 0
                async for chunk in resp.content.iter_chunked(65536):
                    window = found[-32:] + chunk
                    for kind, marker in PAGE_MARKERS:
                        at = window.find(b"\n" + marker)
                        if at >= 0 or window.startswith(marker):
                            assert kind in SERVER_KINDS
                            return kind
                    found, size = window, size + len(chunk)
                    if size > PROBE_LIMIT:
                        return None
        except TimeoutError:
            raise KubeletError(f"{url} did not answer within {self.settings.timeout_seconds:g}s") from None
        except (aiohttp.ClientError, OSError) as exc:
            raise KubeletError(shorten(f"cannot read {url}: {exc}")) from None
        return None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
