"""Hostile HTTP clients on loopback, bounded in count and time, for tests and bench/hostile.py.

Slow connections come in three kinds: ``idle`` (connect, send nothing), ``slowloris`` (a request
line, then one header byte now and then, never finished) and ``big_headers`` (8 KB header lines,
never finished). ``RssWatch`` samples a process's resident memory meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import ssl
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def manifest_memory_limit(name: str) -> int:
    """The memory limit (bytes) of ``deploy/base/<name>.yaml``'s container, e.g. 192Mi."""
    text = (ROOT / "deploy" / "base" / f"{name}.yaml").read_text()
    m = re.search(r"limits:\s*\n\s*memory:\s*(\d+)Mi", text)
    assert m, f"no memory limit in deploy/base/{name}.yaml"
    return int(m.group(1)) * 1024 * 1024


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


class RssWatch:
    """Peak RSS of ``pid``, sampled every 50 ms on a thread while the ``with`` block runs."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak = rss_bytes(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, rss_bytes(self.pid))

    def __enter__(self) -> RssWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


_CLIENT_TLS = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # one context: loading CAs per connection costs more
_CLIENT_TLS.check_hostname = False
_CLIENT_TLS.verify_mode = ssl.CERT_NONE


@dataclass
class Outcome:
    """What the hostile clients saw (with ``sustain``, summed over every reconnection)."""

    connected: int = 0
    not_connected: int = 0  # refused, reset or timed out while connecting
    closed_by_server: int = 0  # EOF or reset while still sending or waiting
    still_open: int = 0
    answers: dict[str, int] = field(default_factory=dict)  # status line -> count


async def _hold(
    host: str, port: int, kind: str, deadline: float, tls: bool, outcome: Outcome, gate: asyncio.Semaphore
) -> None:
    try:
        async with gate:
            reader, writer = await asyncio.wait_for(
                asyncio.open_connection(host, port, ssl=_CLIENT_TLS if tls else None), 10
            )
    except (TimeoutError, OSError, ssl.SSLError):
        outcome.not_connected += 1
        await asyncio.sleep(0.1)
        return
    outcome.connected += 1
    try:
        if kind != "idle":
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        n = 0
        while time.monotonic() < deadline:
            if kind == "big_headers":
                writer.write(b"X-Filler-%d: %s\r\n" % (n, b"a" * 8000))
            elif kind == "slowloris":
                writer.write(b"X-a: b\r\n" if n % 8 == 7 else b"b")
            n += 1
            with contextlib.suppress(TimeoutError):
                data = await asyncio.wait_for(reader.read(4096), 0.2 if kind != "big_headers" else 0.02)
                if not data:
                    raise ConnectionResetError
                status = data.split(b"\r\n", 1)[0].decode(errors="replace")
                outcome.answers[status] = outcome.answers.get(status, 0) + 1
                raise ConnectionResetError
        outcome.still_open += 1
    except (OSError, ssl.SSLError):
        outcome.closed_by_server += 1
    finally:
        writer.transport.abort()


async def _one(
    host: str, port: int, kind: str, seconds: float, tls: bool, sustain: bool, outcome: Outcome,
    gate: asyncio.Semaphore,
) -> None:
    deadline = time.monotonic() + seconds
    await _hold(host, port, kind, deadline, tls, outcome, gate)
    while sustain and time.monotonic() < deadline:  # a closed attacker comes back at once
        await _hold(host, port, kind, deadline, tls, outcome, gate)


async def attack(
    host: str,
    port: int,
    connections: int,
    kind: str,
    seconds: float,
    tls: bool = False,
    sustain: bool = False,
) -> Outcome:
    """``connections`` slow clients of ``kind`` for at most ``seconds`` (plus connecting); with
    ``sustain`` each one reconnects whenever the server closes it, until ``seconds`` have passed."""
    outcome = Outcome()
    gate = asyncio.Semaphore(100)  # connects in flight at once
    await asyncio.gather(
        *(_one(host, port, kind, seconds, tls, sustain, outcome, gate) for _ in range(connections))
    )
    return outcome


async def raw_request(host: str, port: int, data: bytes, timeout: float = 10) -> bytes:
    """Send ``data`` as is and return all the server answers until it closes (or ``timeout``)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(data)
        chunks = []
        with contextlib.suppress(TimeoutError, ConnectionResetError):
            async with asyncio.timeout(timeout):
                while chunk := await reader.read(65536):
                    chunks.append(chunk)
        return b"".join(chunks)
    finally:
        writer.transport.abort()
