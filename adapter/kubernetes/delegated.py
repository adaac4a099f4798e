"""Delegated authentication (TokenReview) and authorization (SubjectAccessReview), cached.

As ``k8s.io/apiserver``'s delegating authenticator and authorizer do: a review's answer is reused
for a configured time (success and failure, allow and deny, separately; 10 s each by default);
concurrent askers of the same review share one request; a call that fails (the API server down,
a timeout, an error status) is not cached and gives 503 for the request, never "allow".
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from .auth import AUTHENTICATED, Denied, User
from .kubeapi import KubeApi, KubeApiError

TOKENREVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
SUBJECTACCESSREVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
MAX_ENTRIES = 8192
T = TypeVar("T")


class TtlCache(Generic[T]):
    """Answers kept for a time that depends on the answer; one request per key in flight."""

    def __init__(self, ttl: Callable[[T], float], max_entries: int = MAX_ENTRIES) -> None:
        self.ttl = ttl
        self.max_entries = max_entries
        self._kept: dict[Hashable, tuple[float, T]] = {}
        self._inflight: dict[Hashable, asyncio.Future[T]] = {}
        self.hits = self.misses = 0

    async def get(self, key: Hashable, fetch: Callable[[], Awaitable[T]]) -> T:
        found = self._kept.get(key)
        now = time.monotonic()
        if found is not None and found[0] > now:
            self.hits += 1
            return found[1]
        self.misses += 1
        pending = self._inflight.get(key)
        if pending is None:
            pending = asyncio.ensure_future(fetch())
            self._inflight[key] = pending
            pending.add_done_callback(lambda f: self._done(key, f))
        return await asyncio.shield(pending)

    def _done(self, key: Hashable, future: asyncio.Future[T]) -> None:
        self._inflight.pop(key, None)
        if future.cancelled() or future.exception() is not None:
            return  # failures to ask are not answers: ask again next time
        value = future.result()
        ttl = self.ttl(value)
        if ttl <= 0:
            return
        if len(self._kept) >= self.max_entries:
            now = time.monotonic()
            self._kept = {k: v for k, v in self._kept.items() if v[0] > now}
            while len(self._kept) >= self.max_entries:
                self._kept.pop(next(iter(self._kept)))
        self._kept[key] = (time.monotonic() + ttl, value)


class TokenReviewer:
    """Bearer token → User (or None when the API server says the token is not valid)."""

    def __init__(self, api: KubeApi, success_ttl: float, failure_ttl: float) -> None:
        self.api = api
        self.cache: TtlCache[User | None] = TtlCache(lambda u: success_ttl if u else failure_ttl)

    async def review(self, token: str) -> User:
        """Raises Denied 401 for a token the API server refuses, 503 when it cannot be asked."""
        key = hashlib.sha256(token.encode()).digest()
        try:
            user = await self.cache.get(key, lambda: self._ask(token))
        except KubeApiError as exc:
            raise Denied(503, f"cannot check the bearer token with the Kubernetes API: {exc}") from None
        if user is None:
            raise Denied(401, "the bearer token is not valid (TokenReview)")
        return user

    async def _ask(self, token: str) -> User | None:
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        status = (await self.api.create(TOKENREVIEWS, review)).get("status") or {}
        if not status.get("authenticated"):
            return None
        u = status.get("user") or {}
        if not u.get("username"):
            return None
        extras = (u.get("extra") or {}).items()
        extra = {str(k): [str(x) for x in v] for k, v in extras if isinstance(v, list)}
        groups = tuple(dict.fromkeys((*(str(g) for g in u.get("groups") or ()), AUTHENTICATED)))
        return User(str(u["username"]), groups, extra, str(u.get("uid", "")))


class AccessReviewer:
    """(user, attributes) → allowed, through SubjectAccessReview."""

    def __init__(self, api: KubeApi, allowed_ttl: float, denied_ttl: float) -> None:
        self.api = api
        self.cache: TtlCache[tuple[bool, str]] = TtlCache(lambda a: allowed_ttl if a[0] else denied_ttl)

    async def authorize(self, user: User, attributes: dict[str, Any]) -> None:
        """Raises Denied 403 unless allowed, 503 when the API server cannot be asked."""
        # the key holds everything the spec does (cheaper than serialising it on every request)
        ((kind, attrs),) = attributes.items()
        extra = tuple(sorted((k, tuple(v)) for k, v in user.extra.items())) if user.extra else ()
        key = (user.name, user.groups, extra, user.uid, kind, tuple(sorted(attrs.items())))
        try:
            allowed, reason = await self.cache.get(key, lambda: self._ask(user, attributes))
        except KubeApiError as exc:
            raise Denied(503, f"cannot check authorization with the Kubernetes API: {exc}") from None
        if not allowed:
            raise Denied(403, forbidden(user, attributes, reason))

    async def _ask(self, user: User, attributes: dict[str, Any]) -> tuple[bool, str]:
        spec: dict[str, Any] = {"user": user.name, "groups": list(user.groups), **attributes}
        if user.extra:
            spec["extra"] = user.extra
        if user.uid:
            spec["uid"] = user.uid
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
        status = (await self.api.create(SUBJECTACCESSREVIEWS, review)).get("status") or {}
        # allowed → allow; denied, or neither (no opinion) → 403, as the webhook authorizer does
        return bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or "")


def forbidden(user: User, attributes: dict[str, Any], reason: str = "") -> str:
    """The message of a 403, worded as kube-apiserver words it."""
    res = attributes.get("resourceAttributes")
    if res:
        what = f'resource "{res["resource"]}" in API group "{res["group"]}"'
        where = f' in the namespace "{res["namespace"]}"' if res.get("namespace") else " at the cluster scope"
        message = f'User "{user.name}" cannot {res["verb"]} {what}{where}'
    else:
        non = attributes["nonResourceAttributes"]
        message = f'User "{user.name}" cannot {non["verb"]} path "{non["path"]}"'
    return f"{message}: {reason}" if reason else message
