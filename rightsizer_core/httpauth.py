"""What to say when an HTTP API refuses our credentials (401 or 403), and which credentials those were.

A Prometheus behind an authenticating proxy (kube-rbac-proxy, oauth2-proxy, a cloud's managed
Prometheus) answers 401 or 403 with a body of its own (text, HTML or JSON), so the answer's body
says nothing useful; its status says it all. The message names the status, what it means
(authentication: the server does not know these credentials; authorization: it knows them and
refuses this query) and the credentials that were sent, so the fix is obvious.
"""

from __future__ import annotations

from collections.abc import Mapping

AUTH_STATUSES = (401, 403)


def describe_credentials(
    bearer_token_file: str | None = None,
    username: str | None = None,
    headers: Mapping[str, str] | None = None,
    client_cert_file: str | None = None,
    bearer_setting: str = "bearer token file",
) -> str:
    """The credentials a request carries, in words ("none" when it carries none)."""
    used = []
    if bearer_token_file:
        used.append(f"the bearer token of {bearer_setting} {bearer_token_file}")
    elif username:
        used.append(f"basic authentication as {username!r}")
    else:
        given = {k.lower(): v for k, v in (headers or {}).items()}
        if "authorization" in given:
            scheme = given["authorization"].split(" ", 1)[0].lower()
            what = {"bearer": "a bearer token", "basic": "basic authentication"}.get(scheme, "credentials")
            used.append(f"{what} in a configured Authorization header")
    if client_cert_file:
        used.append(f"the client certificate {client_cert_file}")
    return " and ".join(used) or "none"


def auth_refusal(server: str, url: str, status: int, credentials: str) -> str | None:
    """The one-line reason for a 401 or 403 from ``server`` at ``url``; None for any other status."""
    if status == 401:
        problem = "authentication failed"
        hint = "no credentials were sent" if credentials == "none" else f"it did not accept {credentials}"
    elif status == 403:
        problem = "authorization failed"
        hint = (
            "no credentials were sent, and anonymous requests are not allowed"
            if credentials == "none"
            else f"it knows {credentials} but does not allow this query with them"
        )
    else:
        return None
    return f"{problem}: {server} at {url} answered HTTP {status} ({hint})"
