"""KEDA's metrics-api scaler endpoint: ``GET /keda/v1/metrics/{metric}?labelSelector=…&namespace=…``.

Answers ``{"value": <number>, "timestamp": "<RFC3339>"}`` with the value HPA would compute from the
external answer (the sum of the selected series); point the trigger's ``valueLocation`` at
``value``. No value is never 0: a selection matching nothing is a 404 Status, one whose source is
down, stale, frozen or answered partially (or the backend down) a 503, both errors to KEDA.
Authentication as KEDA's ``authModes`` send it: a configured API key (``X-API-KEY``), basic user and
password, or static bearer token admits the request; any other bearer token, or a client certificate
(``tls``), is authenticated and authorized as on the metrics APIs (TokenReview, then a
SubjectAccessReview to ``list`` the metric in ``external.metrics.k8s.io`` in the ``namespace``
parameter's namespace).
"""

from __future__ import annotations

import base64
import binascii
import hmac
import time

from aiohttp import web

from rightsizer_core.files import MAX_SECRET_BYTES

from ..cache import Answer, Cache
from ..config import MetricsApiSettings
from ..filewatch import WatchedFiles
from ..kubernetes.answers import Failure, dumps, rfc3339, selected, status, total
from ..kubernetes.apis import CACHE, respond
from ..kubernetes.auth import Denied
from ..kubernetes.gate import Gate
from . import unknown_keys


class MetricsApiAuth:
    """Static secrets KEDA's ``authModes`` apiKey, basic and bearer may send; the files are re-read
    when they change (at most once a second)."""

    def __init__(self, cfg: MetricsApiSettings) -> None:
        self.api_key = self._watch(cfg.api_key_file, "metrics_api.api_key_file")
        self.bearer = self._watch(cfg.bearer_token_file, "metrics_api.bearer_token_file")
        self.password = self._watch(cfg.basic_password_file, "metrics_api.basic_password_file")
        self.username = (cfg.basic_username or "").encode()

    @property
    def configured(self) -> bool:
        return bool(self.api_key or self.bearer or self.password)

    @staticmethod
    def _watch(path: str | None, what: str) -> WatchedFiles[bytes] | None:
        if path is None:
            return None

        def load(files: list[bytes]) -> bytes:
            secret = files[0].strip()
            if not secret:
                raise ValueError(f"{what}: {path} is empty")
            return secret

        try:
            return WatchedFiles(what, [path], load, limit=MAX_SECRET_BYTES)
        except ValueError as exc:
            why = str(exc)
            raise ValueError(why if why.startswith(f"{what}:") else f"{what}: {why}") from None

    @staticmethod
    def _matches(watched: WatchedFiles[bytes] | None, given: bytes) -> bool:
        if watched is None:
            return False
        watched.check()
        return hmac.compare_digest(given, watched.current)

    def check(self, request: web.Request) -> bool:
        """True when the request carries a configured static secret; False when it carries none
        of those (other credentials go through the Kubernetes authentication); raises Denied 401
        for a key or password that is not the configured one."""
        key = request.headers.get("X-API-KEY")
        if key is not None:
            if self._matches(self.api_key, _ascii(key, "X-API-KEY")):
                return True
            raise Denied(401, "the X-API-KEY is not the one configured")
        scheme, _, value = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() == "basic":
            try:
                user, _, password = base64.b64decode(_ascii(value.strip(), "basic credentials"),
                                                     validate=True).partition(b":")
            except binascii.Error:
                raise Denied(401, "the basic credentials are not base64") from None
            if self.password is not None and hmac.compare_digest(user, self.username) and self._matches(
                self.password, password
            ):
                return True
            raise Denied(401, "the basic-authentication user or password is not the one configured")
        if scheme.lower() == "bearer" and self.bearer is not None:
            return self._matches(self.bearer, _ascii(value.strip(), "bearer token"))
        return False


def _ascii(value: str, what: str) -> bytes:
    if not (value.isascii() and value.isprintable()):
        raise Denied(401, f"the {what} holds characters it cannot have")
    return value.encode()


async def admit(request: web.Request, gate: Gate) -> None:
    """A configured static secret admits the request; anything else goes through ``gate``, or,
    on plain HTTP without a gate, is refused when secrets are configured."""
    auth = request.app[METRICS_API_AUTH]
    if auth.check(request):
        return
    if gate.enabled:
        await gate.admit(request)
    elif auth.configured:
        raise Denied(401, "this endpoint needs an X-API-KEY header, basic credentials or a bearer token")


METRICS_API_AUTH = web.AppKey("metrics_api_auth", MetricsApiAuth)


def value_answer(cache: Cache, metric: str, namespace: str | None, selector: str) -> Answer:
    try:
        series, stamp = selected(cache, metric, namespace, selector)
        value = total(series)
    except Failure as exc:
        return status(exc.code, exc.message)
    return 200, dumps({"value": value, "timestamp": rfc3339(stamp)})


QUERY_KEYS = ("labelSelector", "namespace")


async def metric_value(request: web.Request) -> web.Response:
    cache = request.app[CACHE]
    metric = request.match_info["metric"]
    query = request.query
    unknown = unknown_keys(query.keys(), QUERY_KEYS, what="the query")
    if unknown:  # a typo (labelselector) would otherwise widen the selection to everything
        return respond(status(400, unknown))
    namespace = query.get("namespace") or None
    own = getattr(cache.source, "keda_series", None)  # prometheus-adapter files, per request
    if own is not None:
        try:
            found = await own(metric, namespace, query.get("labelSelector", ""))
            value = None if found is None else total(found)
        except Failure as exc:
            return respond(status(exc.code, exc.message))
        if value is not None:
            return respond((200, dumps({"value": value, "timestamp": rfc3339(time.time())})))
    key = ("keda", metric, namespace, query.get("labelSelector", ""))
    return respond(
        cache.memo(
            key,
            lambda: value_answer(cache, metric, namespace, query.get("labelSelector", "")),
            lambda a: a[0] != 400,
        )
    )


def add_routes(app: web.Application, auth: MetricsApiAuth) -> None:
    app[METRICS_API_AUTH] = auth
    app.router.add_get("/keda/v1/metrics/{metric}", metric_value)
