"""A fake Kubernetes API server for delegated auth, over HTTPS, speaking the real wire format.

``POST /apis/authentication.k8s.io/v1/tokenreviews`` and
``POST /apis/authorization.k8s.io/v1/subjectaccessreviews`` (kubernetes/api ``authentication/v1``
and ``authorization/v1`` types), ``GET`` of the ConfigMap
``kube-system/extension-apiserver-authentication`` and its watch (``?watch=1&fieldSelector=…``,
newline-delimited ``{"type": "MODIFIED", "object": …}`` events, held open up to
``timeoutSeconds``). Callers must send the adapter's service-account token. It runs on its own
event loop in a thread, so adapters in subprocesses and in-process tests can both use it.
``down = True`` makes it drop every connection, as a dead API server would look.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trustme
from aiohttp import web

SA_TOKEN = "adapter-service-account-token"
CM_PATH = "/api/v1/namespaces/kube-system/configmaps/extension-apiserver-authentication"


@dataclass
class Identity:
    username: str
    groups: list[str] = field(default_factory=list)
    uid: str = ""


# A policy answers a SubjectAccessReview spec with (allowed, denied, reason).
Policy = Callable[[dict[str, Any]], tuple[bool, bool, str]]


def rbac(*grants: dict[str, Any]) -> Policy:
    """Grants like ``{"user": "alice", "verbs": ["list"], "group": "external.metrics.k8s.io",
    "resources": ["*"], "namespaces": ["prod"]}`` or ``{"group_name": "g", "paths": ["/metrics"]}``;
    anything not granted has no opinion (allowed false, denied false), as RBAC answers."""

    def decide(spec: dict[str, Any]) -> tuple[bool, bool, str]:
        for g in grants:
            if "user" in g and g["user"] != spec["user"]:
                continue
            if "group_name" in g and g["group_name"] not in spec.get("groups", []):
                continue
            res, non = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
            if (
                res
                and "resources" in g
                and (
                    res["verb"] in g.get("verbs", [res["verb"]])
                    and res.get("group", "") == g["group"]
                    and (g["resources"] == ["*"] or res["resource"] in g["resources"])
                    and ("namespaces" not in g or res.get("namespace", "") in g["namespaces"])
                )
            ):
                return True, False, "granted"
            if non and non["path"] in g.get("paths", []):
                return True, False, "granted"
        return False, False, ""

    return decide


class FakeApiServer:
    def __init__(
        self,
        tmp: Path,
        tokens: dict[str, Identity] | None = None,
        policy: Policy | None = None,
        configmap: dict[str, str] | None = None,
    ) -> None:
        self.tokens = dict(tokens or {})
        self.policy: Policy = policy or rbac()
        self.configmap = dict(configmap or {})
        self.resource_version = 1
        self.down = False
        self.configmap_forbidden = False  # RBAC without the extension-apiserver-authentication-reader binding
        self.token_reviews: list[dict[str, Any]] = []
        self.access_reviews: list[dict[str, Any]] = []
        self.watches = 0
        self.ca = trustme.CA()
        self.ca_file = tmp / "apiserver-ca.crt"
        self.ca.cert_pem.write_to_path(str(self.ca_file))
        self.token_file = tmp / "sa-token"
        self.token_file.write_text(SA_TOKEN)
        self._watchers: list[asyncio.Queue[dict[str, Any]]] = []
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    # --- what the adapter needs to find it ---
    def config(self) -> dict[str, Any]:
        return {"api_url": self.url, "ca_file": str(self.ca_file), "token_file": str(self.token_file)}

    def set_configmap(self, data: dict[str, str]) -> None:
        """Replace the ConfigMap's data and tell the watchers (MODIFIED), as kube-apiserver does."""

        def apply() -> None:
            self.configmap = dict(data)
            self.resource_version += 1
            for q in self._watchers:
                q.put_nowait({"type": "MODIFIED", "object": self._object()})

        self._loop.call_soon_threadsafe(apply)

    def stop(self) -> None:
        def end_watches() -> None:
            for q in self._watchers:
                q.put_nowait({})

        self._loop.call_soon_threadsafe(end_watches)
        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)

    # --- the server ---
    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        app = web.Application()
        app.router.add_post("/apis/authentication.k8s.io/v1/tokenreviews", self._token_review)
        app.router.add_post("/apis/authorization.k8s.io/v1/subjectaccessreviews", self._access_review)
        app.router.add_get(CM_PATH, self._get_configmap)
        app.router.add_get("/api/v1/namespaces/kube-system/configmaps", self._watch)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.ca.issue_cert("127.0.0.1").configure_cert(ctx)
        self._runner = web.AppRunner(app, access_log=None)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=ctx)
        self._loop.run_until_complete(site.start())
        port = self._runner.addresses[0][1]
        self.url = f"https://127.0.0.1:{port}"
        self._ready.set()
        self._loop.run_forever()

    def _refuse(self, request: web.Request) -> web.Response | None:
        if self.down:
            assert request.transport is not None
            request.transport.abort()  # the caller sees the connection drop, as with a dead server
            return web.Response(status=503)
        if request.headers.get("Authorization") != f"Bearer {SA_TOKEN}":
            return _status(401, "Unauthorized", "Unauthorized")
        return None

    async def _token_review(self, request: web.Request) -> web.Response:
        refused = self._refuse(request)
        if refused:
            return refused
        body = await request.json()
        assert body["apiVersion"] == "authentication.k8s.io/v1" and body["kind"] == "TokenReview", body
        self.token_reviews.append(body)
        who = self.tokens.get(body["spec"]["token"])
        status: dict[str, Any] = {"authenticated": False, "error": "invalid bearer token"}
        if who is not None:
            user = {"username": who.username, "groups": who.groups, "uid": who.uid}
            status = {"authenticated": True, "user": user, "audiences": ["https://kubernetes.default.svc"]}
        return web.json_response(
            {**body, "metadata": {"creationTimestamp": None}, "status": status}, status=201
        )

    async def _access_review(self, request: web.Request) -> web.Response:
        refused = self._refuse(request)
        if refused:
            return refused
        body = await request.json()
        assert body["apiVersion"] == "authorization.k8s.io/v1" and body["kind"] == "SubjectAccessReview"
        self.access_reviews.append(body["spec"])
        allowed, denied, reason = self.policy(body["spec"])
        status: dict[str, Any] = {"allowed": allowed}
        if denied:
            status["denied"] = True
        if reason:
            status["reason"] = reason
        return web.json_response(
            {**body, "metadata": {"creationTimestamp": None}, "status": status}, status=201
        )

    def _object(self) -> dict[str, Any]:
        return {
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {
                "name": "extension-apiserver-authentication",
                "namespace": "kube-system",
                "resourceVersion": str(self.resource_version),
            },
            "data": self.configmap,
        }

    async def _get_configmap(self, request: web.Request) -> web.Response:
        if self.configmap_forbidden:
            return _status(
                403,
                "Forbidden",
                'configmaps "extension-apiserver-authentication" is forbidden: '
                'User "system:serviceaccount:rightsizer:rightsizer-adapter" cannot get resource '
                '"configmaps" in API group "" in the namespace "kube-system"',
            )
        return self._refuse(request) or web.json_response(self._object())

    async def _watch(self, request: web.Request) -> web.StreamResponse:
        refused = self._refuse(request)
        if refused:
            return refused
        q = request.query
        assert (
            q.get("watch") in ("1", "true")
            and q.get("fieldSelector") == "metadata.name=extension-apiserver-authentication"
        ), dict(q)
        self.watches += 1
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        events: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        if int(q.get("resourceVersion") or 0) < self.resource_version:
            events.put_nowait({"type": "MODIFIED", "object": self._object()})
        self._watchers.append(events)
        try:
            async with asyncio.timeout(float(q.get("timeoutSeconds", 300))):
                while event := await events.get():
                    await resp.write(json.dumps(event).encode() + b"\n")
        except TimeoutError:
            pass
        finally:
            self._watchers.remove(events)
        return resp


def _status(code: int, reason: str, message: str) -> web.Response:
    return web.json_response(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        },
        status=code,
    )
