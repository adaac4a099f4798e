"""One bounded scrape of an exporter's /metrics, for direct mode.

Whatever answers, the adapter holds at most ``max_body_bytes`` of it: the bytes as they arrive
(gzip or not) and, for gzip, the bytes they decompress to, are each counted while read and the
scrape is abandoned at the cap (a ``Content-Length`` over it is refused before reading). Only an
answer that can be an exposition is read: HTTP 200, a text/plain or OpenMetrics content type,
identity or gzip encoding, UTF-8 text. Anything else is a ``ScrapeError`` with one line saying
what came, so an exporter answering junk counts as down, not as an exporter with no series.
"""

from __future__ import annotations

import zlib

import aiohttp

CHUNK = 64 * 1024
EXPOSITION_TYPES = ("text/plain", "application/openmetrics-text")


class ScrapeError(ValueError):
    """A scrape that gave no usable exposition; the message is one line. ``starting``: what an
    exporter that is still starting answers (connection refused, or 503 before its first sample)."""

    def __init__(self, message: str, starting: bool = False) -> None:
        super().__init__(message)
        self.starting = starting


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n} bytes"


async def fetch(session: aiohttp.ClientSession, url: str, timeout: float, max_bytes: int) -> bytes:
    """The answer's body, decompressed. Raises ScrapeError (and aiohttp's errors, TimeoutError)."""
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as resp:
        if resp.status != 200:
            raise ScrapeError(f"HTTP {resp.status}", starting=resp.status == 503)
        kind = resp.headers.get("Content-Type", "").split(";")[0].strip().lower()
        if kind not in EXPOSITION_TYPES:
            raise ScrapeError(f"answered {kind or 'no Content-Type'}, not a Prometheus exposition")
        coding = resp.headers.get("Content-Encoding", "").strip().lower()
        if coding not in ("", "identity", "gzip"):
            raise ScrapeError(f"answered with Content-Encoding {coding[:40]!r}, which was not asked for")
        length = resp.content_length
        if length is not None and length > max_bytes:
            raise ScrapeError(
                f"its answer of {_size(length)} is over direct.max_body_bytes ({_size(max_bytes)})"
            )
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS) if coding == "gzip" else None
        chunks: list[bytes] = []
        received = size = 0
        try:
            async for chunk in resp.content.iter_chunked(CHUNK):
                received += len(chunk)
                if received > max_bytes:
                    raise ScrapeError(f"its answer is over direct.max_body_bytes ({_size(max_bytes)})")
                if inflate is not None:
                    chunk = inflate.decompress(chunk, max_bytes + 1 - size)
                    if inflate.unconsumed_tail:  # more output than the cap allows
                        chunk += b"?"
                size += len(chunk)
                if size > max_bytes:
                    raise ScrapeError(f"its answer decompresses to more than direct.max_body_bytes "
                                      f"({_size(max_bytes)})")
                chunks.append(chunk)
            if inflate is not None:
                rest = inflate.flush()
                if size + len(rest) > max_bytes:
                    raise ScrapeError(f"its answer decompresses to more than direct.max_body_bytes "
                                      f"({_size(max_bytes)})")
                if not inflate.eof:
                    raise ScrapeError("its gzip answer is cut short")
                chunks.append(rest)
        except zlib.error as exc:
            raise ScrapeError(f"its gzip answer is corrupt: {exc}") from None
    return b"".join(chunks)


def decode(body: bytes) -> str:
    """The body as text; raises ScrapeError unless it is UTF-8 (an exposition always is)."""
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ScrapeError(f"its answer is not UTF-8 text (byte 0x{body[exc.start]:02x} at offset "
                          f"{exc.start})") from None
