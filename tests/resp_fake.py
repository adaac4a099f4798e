"""A hostile Redis: a TCP server that speaks RESP2 and answers the length command with an answer
no real Redis would send (a gigabyte string, a flood of elements, arrays nested without end, an
endless line), streamed until the client hangs up. It counts what it managed to send."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from types import TracebackType

CHUNK = 64 * 1024
ANNOUNCED = 2**30  # what the hostile answers claim: a gigabyte, or a billion elements


def hostile_answer(mode: str) -> Iterator[bytes]:
    """The answer to LLEN in ``mode``, a chunk at a time; endless past its head."""
    if mode == "huge-string":
        yield b"$%d\r\n" % ANNOUNCED
        while True:
            yield b"x" * CHUNK
    elif mode == "many-elements":
        yield b"*%d\r\n" % ANNOUNCED
        while True:
            yield b":1\r\n" * (CHUNK // 4)
    elif mode == "deep":
        while True:
            yield b"*1\r\n" * (CHUNK // 4)
    elif mode == "long-line":
        yield b"+"
        while True:
            yield b"x" * CHUNK
    else:
        raise ValueError(mode)


def _commands(f: socket.SocketIO | object) -> Iterator[list[bytes]]:
    """RESP arrays of bulk strings, as a client sends commands."""
    read = f.readline  # type: ignore[attr-defined]
    while True:
        head = read()
        if not head.startswith(b"*"):
            return
        args = []
        for _ in range(int(head[1:])):
            size = int(read()[1:])
            args.append(f.read(size + 2)[:-2])  # type: ignore[attr-defined]
        yield args


class HostileRedis:
    """``with HostileRedis("huge-string") as r:`` r.url is a redis:// URL; r.sent counts the bytes of
    hostile answers sent before each client hung up."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.sent = 0
        self.answered = threading.Event()
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self) -> None:
                for args in _commands(self.rfile):
                    name = args[0].upper()
                    try:
                        if name == b"TYPE":
                            self.wfile.write(b"+list\r\n")
                        elif name == b"LLEN":
                            outer.answered.set()
                            for chunk in hostile_answer(outer.mode):
                                self.wfile.write(chunk)
                                outer.sent += len(chunk)
                        else:  # CLIENT SETNAME, CLIENT SETINFO, SELECT, ...
                            self.wfile.write(b"+OK\r\n")
                    except OSError:  # the client hung up: what it read is counted
                        return

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.url = f"redis://127.0.0.1:{self._server.server_address[1]}/0"

    def __enter__(self) -> HostileRedis:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._server.shutdown()
        self._server.server_close()
