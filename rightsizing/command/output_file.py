"""Where a command's document goes: ``--output PATH``, or standard output for none or ``-``.

PATH is written whole or not at all: into a new file beside it, then renamed over it. Only a
regular file or a path that does not exist yet is replaced; anything else (a device such as
``/dev/null``, a FIFO, a socket, a directory, a symbolic link) is refused before anything is
written, since renaming over it would put a regular file in its place (as root, ``--output
/dev/null`` would remove the device). A replaced file keeps its permission bits; a new one gets the
usual ``0666`` less the umask.
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import tempfile

_KINDS = (
    (stat.S_ISLNK, "a symbolic link"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


class OutputError(Exception):
    """``--output`` cannot be written; the message is one line naming the path."""


def check_output(path: str | None) -> None:
    """Refuse an ``--output`` that would not be written before any work is done for it."""
    if path is not None and path != "-":
        _mode_to_keep(path, os.path.abspath(path))


def write_output(text: str, path: str | None) -> None:
    if path is None or path == "-":
        sys.stdout.write(text)
        return
    target = os.path.abspath(path)
    mode = _mode_to_keep(path, target)
    try:
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(target), prefix=f".{os.path.basename(target)}.")
    except OSError as exc:
        raise OutputError(f"--output {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, target)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise OutputError(f"--output {path}: {exc.strerror or exc}") from None


def _mode_to_keep(path: str, target: str) -> int:
    """The permission bits the written file gets; refuses anything but a regular file or nothing."""
    try:
        st = os.lstat(target)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask
    except OSError as exc:
        raise OutputError(f"--output {path}: {exc.strerror or exc}") from None
    if stat.S_ISREG(st.st_mode):
        return stat.S_IMODE(st.st_mode)
    kind = next((name for test, name in _KINDS if test(st.st_mode)), "not a regular file")
    hint = "name the file it points to" if stat.S_ISLNK(st.st_mode) else "use - for standard output"
    raise OutputError(f"--output {path}: {kind}, not a regular file: not replaced ({hint})")
