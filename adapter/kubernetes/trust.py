"""Whom client certificates may come from: the x509 client CA and the front-proxy (request-header) CA.

Read, as Kubernetes extension API servers do, from the ConfigMap
``kube-system/extension-apiserver-authentication`` (``client-ca-file``,
``requestheader-client-ca-file`` and the ``requestheader-*`` JSON string arrays), followed with a
watch; files and settings given in the configuration override it item by item, for clusters
where the ConfigMap cannot be read. Files are re-read when they change on disk.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from rightsizer_core.logs import event

from ..config import AuthenticationSettings, RequestHeaderSettings
from ..filewatch import WatchedFiles
from .kubeapi import KubeApi, KubeApiError

log = logging.getLogger("rightsizer.adapter.trust")
NAMESPACE, NAME = "kube-system", "extension-apiserver-authentication"
CONFIGMAP = f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}"
CONFIGMAPS = f"/api/v1/namespaces/{NAMESPACE}/configmaps?fieldSelector=metadata.name%3D{NAME}"


def parse_bundle(pem: bytes, what: str) -> tuple[x509.Certificate, ...]:
    """The certificates of a PEM bundle; raises ValueError naming ``what``."""
    if not pem.strip():
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError as exc:
        raise ValueError(f"{what} is not a PEM certificate bundle: {exc}") from None


@dataclass(frozen=True)
class Trust:
    client_cas: tuple[x509.Certificate, ...] = ()
    requestheader_cas: tuple[x509.Certificate, ...] = ()
    allowed_names: frozenset[str] = frozenset()
    username_headers: tuple[str, ...] = ("X-Remote-User",)
    group_headers: tuple[str, ...] = ("X-Remote-Group",)
    extra_prefixes: tuple[str, ...] = ("X-Remote-Extra-",)
    ca_pem: str = ""  # both bundles, for the TLS context's verify store

    @property
    def any_ca(self) -> bool:
        return bool(self.client_cas or self.requestheader_cas)


def _string_list(data: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    text = data.get(key)
    if text is None or text == "":
        return None
    value = json.loads(text)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} is not a JSON array of strings")
    return tuple(value)


class ClientTrust:
    """``current`` is the Trust in force; ``on_change`` callbacks run when it changes."""

    def __init__(self, authn: AuthenticationSettings, rh: RequestHeaderSettings) -> None:
        self.authn, self.rh = authn, rh
        self.client_file = self._watch("client CA", authn.client_ca_file)
        self.rh_file = self._watch("request-header client CA", rh.client_ca_file)
        self.configmap: dict[str, str] = {}
        self.on_change: list[Callable[[], None]] = []
        self.version = 0
        self.current = self._build(self.configmap)
        self._problem: str | None = None

    @staticmethod
    def _watch(what: str, path: str | None) -> WatchedFiles[bytes] | None:
        if not path:
            return None

        def load(files: list[bytes]) -> bytes:
            if not parse_bundle(files[0], f"{what} {path}"):
                raise ValueError(f"{what} {path} holds no certificate")
            return files[0]

        return WatchedFiles(what, [path], load, min_interval=0)

    def _build(self, cm: Mapping[str, str]) -> Trust:
        client = self.client_file.current if self.client_file else cm.get("client-ca-file", "").encode()
        rh = self.rh_file.current if self.rh_file else cm.get("requestheader-client-ca-file", "").encode()
        names = self.rh.allowed_names or _string_list(cm, "requestheader-allowed-names") or ()
        users = _string_list(cm, "requestheader-username-headers") or tuple(self.rh.username_headers)
        groups = _string_list(cm, "requestheader-group-headers") or tuple(self.rh.group_headers)
        extras = _string_list(cm, "requestheader-extra-headers-prefix") or tuple(self.rh.extra_headers_prefix)
        client_cas = parse_bundle(client, "client-ca-file")
        rh_cas = parse_bundle(rh, "requestheader-client-ca-file")
        pem = "\n".join(b.decode("ascii", "replace").strip() for b in (client, rh) if b.strip())
        return Trust(client_cas, rh_cas, frozenset(names), users, groups, extras, pem)

    def _apply(self, cm: Mapping[str, str]) -> None:
        try:
            trust = self._build(cm)
        except ValueError as exc:
            self._say(f"{NAMESPACE}/{NAME}: {exc}; keeping the previous client CAs")
            return
        self.configmap = dict(cm)
        if trust != self.current:
            self.current = trust
            self.version += 1
            event(
                log,
                logging.INFO,
                "client trust changed",
                client_cas=len(trust.client_cas),
                requestheader_cas=len(trust.requestheader_cas),
                allowed_names=",".join(sorted(trust.allowed_names)) or "any",
            )
            for callback in self.on_change:
                callback()

    def poll_files(self) -> None:
        changed = [w.check(force=True) for w in (self.client_file, self.rh_file) if w is not None]
        if any(changed):
            self._apply(self.configmap)

    def _say(self, problem: str) -> None:
        if problem != self._problem:
            self._problem = problem
            event(log, logging.WARNING, problem)

    async def load_once(self, api: KubeApi) -> None:
        """One GET before serving, so the first handshakes already know the cluster's CAs."""
        try:
            self._apply(_data(await api.get(CONFIGMAP)))
        except KubeApiError as exc:
            self._say(f"cannot read {NAMESPACE}/{NAME} (files and flags still apply): {exc}")

    async def follow(self, api: KubeApi, retry: float = 5.0) -> None:
        """GET the ConfigMap, then watch it, for ever; failures are logged once and retried."""
        while True:
            try:
                obj = await api.get(CONFIGMAP)
                self._apply(_data(obj))
                self._problem = None
                version = str((obj.get("metadata") or {}).get("resourceVersion", ""))
                async for ev in api.watch(CONFIGMAPS, version, timeout=300):
                    if not isinstance(ev, dict) or not isinstance(ev.get("object") or {}, dict):
                        continue
                    kind, item = ev.get("type"), ev.get("object") or {}
                    if kind in ("ADDED", "MODIFIED"):
                        self._apply(_data(item))
                    elif kind == "DELETED":
                        self._apply({})
                    elif kind == "ERROR":
                        break  # e.g. 410 Gone: too old a resourceVersion; list again
                continue
            except KubeApiError as exc:
                self._say(f"cannot read {NAMESPACE}/{NAME} (files and flags still apply): {exc}")
            await asyncio.sleep(retry)


def _data(obj: dict[str, Any]) -> dict[str, str]:
    data = obj.get("data") or {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
