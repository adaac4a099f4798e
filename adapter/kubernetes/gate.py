"""Who a request is and whether it may have what it asks, as ``k8s.io/apiserver`` decides it.

Authentication, in the delegating authenticator's order: a client certificate from the
request-header (front-proxy) CA with an allowed CN names the user in ``X-Remote-User``/``-Group``/
``-Extra-*``; one from the x509 client CA is the user CN in groups O; a bearer token is checked
with a TokenReview. Authenticated users get ``system:authenticated``. No credentials: 401, unless
``authentication.anonymous`` (then ``system:anonymous``). Only ``always_allow_paths`` skip both.

Authorization: a SubjectAccessReview with the attributes kube-apiserver derives from the path
(``attributes``), or the static allowed users/groups offline; with neither, every
authenticated user is allowed (and the adapter says so at start).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from aiohttp import web
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import NameOID

from ..config import AuthenticationSettings, AuthorizationSettings
from .answers import CUSTOM_GROUP, EXTERNAL_GROUP
from .auth import ANONYMOUS, AUTHENTICATED, Denied, User
from .delegated import AccessReviewer, TokenReviewer, forbidden
from .trust import ClientTrust, Trust

NAMESPACE_SUBRESOURCES = frozenset({"status", "finalize"})
KEDA_PREFIX = "/keda/v1/metrics/"


def always_allowed(path: str, patterns: Sequence[str]) -> bool:
    """Exact match, or a prefix when the pattern ends in ``*`` (``pkg/authorization/path``)."""
    return any(path.startswith(p[:-1]) if p.endswith("*") else path == p for p in patterns)


def attributes(request: web.Request) -> dict[str, Any]:
    """The SubjectAccessReview attributes of a request (``pkg/endpoints/request/requestinfo.go``);
    KEDA's metrics-api reads an external metric, so it is asked as the external API would be.
    Callers must not change the dict: it is shared by requests for the same path."""
    path = request.path
    namespace = request.query.get("namespace", "") if path.startswith(KEDA_PREFIX) else ""
    return _attributes(request.method, path, namespace)


@functools.lru_cache(maxsize=4096)
def _attributes(method: str, path: str, keda_namespace: str) -> dict[str, Any]:
    verb = method.lower()
    if path.startswith(KEDA_PREFIX):
        return _resource(
            keda_namespace,
            "list",
            EXTERNAL_GROUP,
            "v1beta1",
            path[len(KEDA_PREFIX) :],
            "",
            "",
        )
    parts = [p for p in path.strip("/").split("/") if p]
    # /apis/{group}/{version} and shorter are discovery: non-resource requests
    if len(parts) < 4 or parts[0] != "apis" or parts[1] not in (EXTERNAL_GROUP, CUSTOM_GROUP):
        return {"nonResourceAttributes": {"path": path, "verb": verb}}
    group, version, rest = parts[1], parts[2], parts[3:]
    namespace = ""
    if rest and rest[0] == "namespaces" and len(rest) > 1:
        namespace = rest[1]
        if len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
            rest = rest[2:]
    resource = rest[0] if rest else ""
    name = rest[1] if len(rest) >= 2 else ""
    subresource = rest[2] if len(rest) >= 3 else ""
    if verb == "get" and not name:
        verb = "list"
    return _resource(namespace, verb, group, version, resource, name, subresource)


def _resource(
    namespace: str, verb: str, group: str, version: str, resource: str, name: str, subresource: str
) -> dict[str, Any]:
    attrs = {
        "namespace": namespace,
        "verb": verb,
        "group": group,
        "version": version,
        "resource": resource,
        "subresource": subresource,
        "name": name,
    }
    return {"resourceAttributes": {k: v for k, v in attrs.items() if v or k in ("verb", "resource")}}


def _names(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> list[str]:
    return [str(a.value) for a in cert.subject.get_attributes_for_oid(oid)]


def _signed_by(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
            return True
        except (ValueError, TypeError, InvalidSignature):  # another issuer, or another key type
            continue
    return False


class Gate:
    """``admit`` raises Denied (401, 403, 503) or returns the user a request acts as."""

    def __init__(
        self,
        authn: AuthenticationSettings,
        authz: AuthorizationSettings,
        trust: ClientTrust | None = None,
        tokens: TokenReviewer | None = None,
        access: AccessReviewer | None = None,
        enabled: bool = True,
    ) -> None:
        self.enabled = enabled
        self.trust, self.tokens, self.access = trust, tokens, access
        self.anonymous = authn.anonymous
        self.always_allow = tuple(authz.always_allow_paths)
        self.users, self.groups = frozenset(authz.allowed_users), frozenset(authz.allowed_groups)
        self.static = bool(self.users or self.groups)
        self._certs: dict[tuple[bytes, int], tuple[str, str, tuple[str, ...]]] = {}

    @classmethod
    def off(cls) -> Gate:
        """Plain HTTP on loopback: nothing is checked."""
        return cls(AuthenticationSettings(), AuthorizationSettings(), enabled=False)

    @property
    def authorizer(self) -> str:
        return "static" if self.static else "delegated" if self.access else "none"

    async def admit(self, request: web.Request) -> User | None:
        if not self.enabled or always_allowed(request.path, self.always_allow):
            return None
        user = await self.authenticate(request)
        await self.authorize(user, attributes(request))
        return user

    def _classify(self, der: bytes, trust: Trust, version: int) -> tuple[str, str, tuple[str, ...]]:
        """(requestheader | client | untrusted, CN, O...) of a leaf certificate, memoized."""
        key = (der, version)
        found = self._certs.get(key)
        if found is None:
            cert = x509.load_der_x509_certificate(der)
            cn = next(iter(_names(cert, NameOID.COMMON_NAME)), "")
            kind = (
                "requestheader"
                if _signed_by(cert, trust.requestheader_cas)
                else "client"
                if _signed_by(cert, trust.client_cas)
                else "untrusted"
            )
            found = (kind, cn, tuple(_names(cert, NameOID.ORGANIZATION_NAME)))
            if len(self._certs) > 1024:
                self._certs.clear()
            self._certs[key] = found
        return found

    async def authenticate(self, request: web.Request) -> User:
        ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
        der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
        if der and self.trust is not None:
            trust = self.trust.current
            kind, cn, orgs = self._classify(der, trust, self.trust.version)
            if kind == "requestheader":
                return self._from_headers(cn, trust, request.headers)
            if kind == "client":
                return User(cn, (*orgs, AUTHENTICATED))
            raise Denied(401, "the client certificate is not signed by a CA trusted now")
        header = request.headers.get("Authorization")
        if header is not None:
            scheme, _, token = header.partition(" ")
            token = token.strip()
            if scheme.lower() != "bearer" or not token:
                raise Denied(401, "the Authorization header is not a bearer token")
            if not (token.isascii() and token.isprintable()):
                raise Denied(401, "the bearer token holds characters a token cannot have")
            if self.tokens is None:
                raise Denied(401, "bearer tokens need the Kubernetes API (TokenReview); none is configured")
            return await self.tokens.review(token)  # with system:authenticated among its groups
        if self.anonymous:
            return ANONYMOUS
        raise Denied(401, "authentication required: a client certificate or a bearer token")

    def _from_headers(self, cn: str, trust: Trust, headers: Any) -> User:
        if trust.allowed_names and cn not in trust.allowed_names:
            raise Denied(401, f"client certificate CN {cn!r} is not among the allowed request-header names")
        name = next((v for h in trust.username_headers for v in headers.getall(h, ()) if v), None)
        if not name:
            raise Denied(401, f"no user named in {', '.join(trust.username_headers)}")
        groups = [v for h in trust.group_headers for v in headers.getall(h, ()) if v]
        extra: dict[str, list[str]] = {}
        for header, value in headers.items():
            for prefix in trust.extra_prefixes:
                if header.lower().startswith(prefix.lower()):
                    extra.setdefault(header[len(prefix) :].lower(), []).append(value)
        return User(name, tuple(dict.fromkeys((*groups, AUTHENTICATED))), extra)

    async def authorize(self, user: User, attrs: dict[str, Any]) -> None:
        if "system:masters" in user.groups:
            return  # as kube-apiserver; the aggregator's availability checks come as this group
        if self.static:
            if user.name in self.users or self.groups.intersection(user.groups):
                return
            raise Denied(403, forbidden(user, attrs, "not among authorization.allowed_users/allowed_groups"))
        if self.access is not None:
            await self.access.authorize(user, attrs)
