"""HTTP plumbing shared by the exposition and JSON sources: one bounded session, auth, TLS, and
reads capped in size. Deadlines are applied by the poller around the whole request."""

from __future__ import annotations

import base64
import ssl

import aiohttp
from multidict import CIMultiDict
from yarl import URL

from ... import __version__
from .base import QueueSourceError, SecretFile
from .settings import QueueSettings

MAX_BODY_BYTES = 16 * 2**20
USER_AGENT = f"rightsizer-exporter/{__version__}"


def make_session(sources: int) -> aiohttp.ClientSession:
    """One session for every HTTP source: keep-alive connections, bounded in number (in total and
    per server), no cookies, no session-wide timeout (each poll has its own deadline)."""
    limit = min(512, max(16, 2 * sources))
    connector = aiohttp.TCPConnector(limit=limit, limit_per_host=8, ttl_dns_cache=300)
    return aiohttp.ClientSession(
        connector=connector,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None),
        headers={"User-Agent": USER_AGENT},
    )


def _ssl_option(cfg: QueueSettings) -> ssl.SSLContext | bool | None:
    if cfg.tls_insecure_skip_verify:
        return False
    if cfg.tls_ca_file:
        try:
            return ssl.create_default_context(cafile=cfg.tls_ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise QueueSourceError(f"cannot load tls_ca_file {cfg.tls_ca_file}: {exc}") from None
    return None


class HttpGetter:
    """GETs one URL with the entry's headers, auth and TLS settings."""

    def __init__(self, session: aiohttp.ClientSession, cfg: QueueSettings, accept: str) -> None:
        self.session = session
        self.url = URL(cfg.url)
        self._headers = CIMultiDict({"Accept": accept, **cfg.headers})
        token = cfg.bearer_token_file
        self._bearer = SecretFile(token, "bearer_token_file") if token else None
        auth = cfg.basic_auth
        self._basic_user = auth.username if auth else None
        self._basic_password: str | SecretFile = ""
        if auth is not None and auth.password_file:
            self._basic_password = SecretFile(auth.password_file, "basic_auth.password_file")
        elif auth is not None:
            self._basic_password = auth.password or ""
        self._cfg = cfg
        self._ssl: ssl.SSLContext | bool | None = None
        self._ssl_ready = self.url.scheme != "https"

    def _request_headers(self) -> CIMultiDict[str]:
        if self._bearer is None and self._basic_user is None:
            return self._headers
        headers = self._headers.copy()
        if self._bearer is not None:
            headers["Authorization"] = f"Bearer {self._bearer.value()}"
        elif self._basic_user is not None:
            password = self._basic_password
            secret = password.value() if isinstance(password, SecretFile) else password
            pair = base64.b64encode(f"{self._basic_user}:{secret}".encode()).decode()
            headers["Authorization"] = f"Basic {pair}"
        return headers

    async def get(self) -> tuple[str, bytes]:
        """(content type, body) of a 200 answer; anything else raises QueueSourceError."""
        if not self._ssl_ready:
            self._ssl = _ssl_option(self._cfg)
            self._ssl_ready = True
        async with self.session.get(
            self.url,
            headers=self._request_headers(),
            ssl=self._ssl if self._ssl is not None else True,
            max_redirects=3,
        ) as resp:
            if resp.status != 200:
                raise QueueSourceError(f"HTTP {resp.status} {resp.reason or ''}".rstrip())
            if (resp.content_length or 0) > MAX_BODY_BYTES:
                raise QueueSourceError(f"answer larger than {MAX_BODY_BYTES >> 20} MiB")
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise QueueSourceError(f"answer larger than {MAX_BODY_BYTES >> 20} MiB")
                chunks.append(chunk)
            return resp.content_type, b"".join(chunks)
