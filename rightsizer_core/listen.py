"""Listen addresses as both programs take them: ``HOST:PORT``, ``[::1]:PORT``, ``:PORT``."""

from __future__ import annotations


def parse_listen(listen: str) -> tuple[str | None, int]:
    """Split HOST:PORT (``[::1]:9430``, ``:9430``, ``127.0.0.1:0``). Raises ValueError."""
    host, sep, port_text = listen.rpartition(":")
    if not sep:
        raise ValueError(f"listen must be HOST:PORT; got {listen!r}")
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"listen port must be a number; got {listen!r}") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"listen port must be 0-65535; got {port}")
    host = host.strip("[]")
    return (host or None), port
