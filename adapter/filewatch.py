"""Files that are re-read when they change on disk: certificates, CA bundles, API keys.

Kubernetes secret and ConfigMap volumes update by swapping a ``..data`` symlink, and
cert-manager rewrites the Secret behind it; both give the followed path a new inode or mtime, so
a ``stat`` that follows symlinks tells a change. A group of files (certificate + key) is read
together and handed to ``load``, which builds what the files describe or raises ValueError; a
failing load keeps what was loaded before and logs the reason once per distinct failure.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from rightsizer_core.files import MAX_TLS_BYTES, read_bytes
from rightsizer_core.logs import event

from .certdates import NotYetValid

log = logging.getLogger("rightsizer.adapter.files")
T = TypeVar("T")
Stamp = tuple[tuple[int, int, int, int] | None, ...]


def _stamp(paths: Sequence[str]) -> Stamp:
    out: list[tuple[int, int, int, int] | None] = []
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class WatchedFiles(Generic[T]):
    """``current`` is what ``load`` built from the files; ``check`` re-reads them if they changed.

    The first load happens in the constructor and raises ValueError, so a broken file at start
    stops the process with that reason; later failures only log.
    """

    def __init__(
        self,
        what: str,
        paths: Sequence[str],
        load: Callable[[list[bytes]], T],
        min_interval: float = 1.0,
        limit: int = MAX_TLS_BYTES,
    ) -> None:
        self.what = what
        self.paths = list(paths)
        self.limit = limit
        self._load = load
        self.min_interval = min_interval
        self._stamp = _stamp(self.paths)
        self.current: T = load(self._read())
        self.version = 1
        self._checked = time.monotonic()
        self._failed: str | None = None

    def _read(self) -> list[bytes]:
        out = []
        for path in self.paths:
            try:
                out.append(read_bytes(path, self.limit))
            except OSError as exc:
                raise ValueError(f"cannot read {path}: {exc.strerror or exc}") from None
        return out

    def check(self, force: bool = False) -> bool:
        """Re-read if a file changed (at most once per ``min_interval`` unless ``force``); True
        when ``current`` was replaced."""
        now = time.monotonic()
        if not force and now - self._checked < self.min_interval:
            return False
        self._checked = now
        stamp = _stamp(self.paths)
        if stamp == self._stamp:
            return False
        previous, self._stamp = self._stamp, stamp
        try:
            loaded = self._load(self._read())
        except ValueError as exc:
            if isinstance(exc, NotYetValid):  # valid later: read the same files again at the next check
                self._stamp = previous
            reason = str(exc)
            if reason != self._failed:
                self._failed = reason
                event(
                    log,
                    logging.WARNING,
                    "reload failed; keeping the previous files",
                    what=self.what,
                    reason=reason,
                )
            return False
        self._failed = None
        self.current = loaded
        self.version += 1
        event(log, logging.INFO, "reloaded", what=self.what, files=",".join(self.paths))
        return True
