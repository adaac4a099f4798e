"""A small client of the Kubernetes API for delegated auth: POST reviews, GET and watch one object.

Uses the service account's token (re-read for every request, as projected tokens rotate) and
CA, or ``kubernetes.api_url`` with its settings outside a cluster. Every failure is a
``KubeApiError`` with a one-line message.
"""

from __future__ import annotations

import json
import os
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from rightsizer_core.files import checked_path, read_secret

from ..config import KubernetesSettings


class KubeApiError(Exception):
    """The API server could not be asked, or answered with an error; the message is one line."""


def api_base(cfg: KubernetesSettings) -> str | None:
    """The API server's base URL, or None when neither configured nor running in a cluster."""
    if cfg.api_url:
        return cfg.api_url.rstrip("/")
    host = os.environ.get("KUBERNETES_SERVICE_HOST")
    if not host:
        return None
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"


class KubeApi:
    def __init__(self, cfg: KubernetesSettings, base: str) -> None:
        self.cfg = cfg
        self.base = base
        self._session: aiohttp.ClientSession | None = None

    def _session_now(self) -> aiohttp.ClientSession:
        if self._session is None:
            ctx: ssl.SSLContext | bool = True
            if self.base.startswith("https://"):
                cafile = checked_path(self.cfg.ca_file) if Path(self.cfg.ca_file).exists() else None
                ctx = ssl.create_default_context(cafile=cafile)
                if self.cfg.insecure_skip_verify:
                    ctx.check_hostname = False
                    ctx.verify_mode = ssl.CERT_NONE
            self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=16, ssl=ctx))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json", "Content-Type": "application/json"}
        try:
            token = read_secret(self.cfg.token_file)
        except OSError:
            token = ""
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        """POST ``body`` to ``path``; the created object (a review's answer)."""
        return await self._call("POST", path, body)

    async def get(self, path: str) -> dict[str, Any]:
        return await self._call("GET", path, None)

    async def _call(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        timeout = aiohttp.ClientTimeout(total=self.cfg.timeout_seconds)
        try:
            async with self._session_now().request(
                method,
                self.base + path,
                data=json.dumps(body) if body else None,
                headers=self._headers(),
                timeout=timeout,
            ) as resp:
                text = await resp.text()
                if resp.status not in (200, 201):
                    raise KubeApiError(f"{method} {path} answered HTTP {resp.status}: {_message(text)}")
                answer = json.loads(text)
                if not isinstance(answer, dict):
                    raise KubeApiError(f"{method} {path} answered a JSON {type(answer).__name__}")
                return answer
        except TimeoutError:
            raise KubeApiError(f"{method} {path} timed out after {self.cfg.timeout_seconds}s") from None
        except (aiohttp.ClientError, ValueError, ssl.SSLError, OSError) as exc:
            raise KubeApiError(f"{method} {path}: {type(exc).__name__}: {exc}"[:300]) from None

    async def watch(self, path: str, resource_version: str, timeout: float) -> AsyncIterator[dict[str, Any]]:
        """Watch events (``{"type": ..., "object": ...}``) of the list at ``path`` (with its
        fieldSelector) from ``resource_version``, for at most ``timeout`` seconds."""
        sep = "&" if "?" in path else "?"
        url = (
            f"{self.base}{path}{sep}watch=1&allowWatchBookmarks=true"
            f"&resourceVersion={resource_version}&timeoutSeconds={int(timeout)}"
        )
        limit = aiohttp.ClientTimeout(total=timeout + 30, sock_connect=self.cfg.timeout_seconds)
        try:
            async with self._session_now().get(url, headers=self._headers(), timeout=limit) as resp:
                if resp.status != 200:
                    raise KubeApiError(
                        f"watch {path} answered HTTP {resp.status}: {_message(await resp.text())}"
                    )
                async for line in resp.content:
                    if line.strip():
                        yield json.loads(line)
        except TimeoutError:
            return
        except (aiohttp.ClientError, ValueError, ssl.SSLError, OSError) as exc:
            raise KubeApiError(f"watch {path}: {type(exc).__name__}: {exc}"[:300]) from None


def _message(text: str) -> str:
    try:
        status = json.loads(text)
        if isinstance(status, dict) and status.get("message"):
            return str(status["message"])[:200]
    except ValueError:
        pass
    return text[:200]
