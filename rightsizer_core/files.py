"""Reading files named by the user: configuration, scenarios, catalogs, tokens, passwords, certificates.

Every such file goes through here, so none can hang, exhaust memory or end in a traceback:

- regular files only (symbolic links to one are fine, as Kubernetes mounts them): a FIFO, a device
  such as ``/dev/zero``, a socket or a directory is refused without reading it (opened with
  ``O_NONBLOCK``, so opening a FIFO that no one writes does not wait);
- a size cap: ``MAX_CONFIG_BYTES`` for configuration (YAML, JSON), ``MAX_SECRET_BYTES`` for a
  token or password file, ``MAX_TLS_BYTES`` for a certificate, key or CA bundle;
- UTF-8 text only;
- YAML: at most ``MAX_YAML_NODES`` values, counting an alias (``*name``) as the whole value it
  repeats, at most ``MAX_YAML_DEPTH`` levels of nesting, no key twice in one mapping (PyYAML keeps
  the last silently; a key given twice is a mistake whichever was meant), PyYAML's safe
  constructors only.

A refusal is an ``UnreadableFile``, an ``OSError`` whose ``strerror`` says why in a few words, so
callers that already turn an ``OSError`` into one line keep doing so.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from pathlib import Path
from typing import Any, BinaryIO

import yaml
from yaml.composer import ComposerError
from yaml.constructor import ConstructorError
from yaml.nodes import MappingNode, Node, ScalarNode

MAX_CONFIG_BYTES = 256 * 1024  # a 64-GPU scenario written out GPU by GPU is about 30 KiB
MAX_SECRET_BYTES = 64 * 1024  # a Kubernetes service-account token is about 1 KiB
MAX_TLS_BYTES = 4 * 2**20  # a system CA bundle is about 200 KiB
MAX_YAML_DEPTH = 64  # the deepest configuration key is 6 levels down
MAX_YAML_NODES = 100_000  # values in one document, aliases expanded


class UnreadableFile(OSError):
    """A file refused before or while reading it; ``strerror`` is the reason."""


def _size(n: int) -> str:
    return f"{n / 2**20:.1f} MiB" if n >= 2**20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return name
    return "a special file"


def _open_regular(path: str | Path, limit: int) -> int:
    """A descriptor of regular file ``path`` if it holds at most ``limit`` bytes. Raises ``OSError``."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise UnreadableFile(errno.EISDIR, "is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise UnreadableFile(errno.EINVAL, f"not a regular file ({_kind(st.st_mode)})", str(path))
        if st.st_size > limit:
            raise _too_large(path, limit, st.st_size)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _too_large(path: str | Path, limit: int, size: int) -> UnreadableFile:
    return UnreadableFile(errno.EFBIG, f"larger than the {_size(limit)} limit ({_size(size)})", str(path))


def open_regular(path: str | Path) -> BinaryIO:
    """Regular file ``path`` opened for reading (binary), for files read a line or a few bytes at a
    time (``/proc/stat``, ``/proc/<pid>/cgroup``, which report no size). Raises ``OSError``."""
    return os.fdopen(_open_regular(path, sys.maxsize), "rb")


def checked_path(path: str, limit: int = MAX_TLS_BYTES) -> str:
    """``path`` unchanged once known to be a regular file of at most ``limit`` bytes, for files
    that a library opens itself (certificates, keys and CA bundles for OpenSSL). Raises ``OSError``."""
    os.close(_open_regular(path, limit))
    return path


def read_bytes(path: str | Path, limit: int) -> bytes:
    """The whole content of regular file ``path``, at most ``limit`` bytes. Raises ``OSError``."""
    fd = _open_regular(path, limit)
    try:
        chunks, total = [], 0
        while total <= limit:  # the size may change while reading: count what is read
            chunk = os.read(fd, min(1 << 16, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
        if total > limit:  # it grew since it was opened
            raise _too_large(path, limit, max(os.fstat(fd).st_size, total))
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_text(path: str | Path, limit: int) -> str:
    """``read_bytes`` decoded as UTF-8. Raises ``OSError`` (``UnreadableFile`` if not UTF-8)."""
    data = read_bytes(path, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(
            errno.EILSEQ, f"not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})", str(path)
        ) from None


def read_secret(path: str | Path) -> str:
    """A token or password file's content without surrounding white space. Raises ``OSError``."""
    return read_text(path, MAX_SECRET_BYTES).strip()


def read_token(path: str | Path) -> str:
    """A token sent in an HTTP header (``Authorization: Bearer``): ``read_secret``, refused
    (``UnreadableFile``) when it holds a character a header value cannot carry, such as a line
    break inside it (two tokens in a rotated file), which would otherwise end the header."""
    token = read_secret(path)
    bad = next((i for i, c in enumerate(token) if not (c.isascii() and c.isprintable())), None)
    if bad is not None:
        what = "a line break" if token[bad] in "\r\n" else f"character U+{ord(token[bad]):04X}"
        raise UnreadableFile(errno.EINVAL, f"holds {what} at offset {bad}; a token is one line", str(path))
    return token


class BoundedSafeLoader(yaml.SafeLoader):
    """PyYAML's safe loader, with aliases and nesting bounded.

    An alias makes one node appear again: nine lines of them describe a billion-element value (the
    "billion laughs"), which every reader of it would then walk. So the document may hold at most
    ``MAX_YAML_NODES`` values counting each alias as the whole value it repeats, at most
    ``MAX_YAML_DEPTH`` levels of nesting (with aliases expanded), and no alias inside the value it
    names. The composer recurses once per level, so the depth bound also keeps it far from Python's
    recursion limit.
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._nodes = 0
        self._anchored: dict[int, tuple[int, int]] = {}  # id(anchored node) -> (values, height)
        self._heights = [0]  # per open node, the greatest height among its children so far

    def _refuse(self, problem: str, event: Any) -> None:
        raise ComposerError(None, None, problem, event.start_mark)

    def _count(self, values: int, event: Any) -> None:
        self._nodes += values
        if self._nodes > MAX_YAML_NODES:
            self._refuse(f"more than {MAX_YAML_NODES} values (an alias counts as what it repeats)", event)

    def _grow(self, height: int, event: Any) -> None:
        if len(self._heights) - 1 + height > MAX_YAML_DEPTH:
            self._refuse(f"nested more than {MAX_YAML_DEPTH} levels deep", event)
        self._heights[-1] = max(self._heights[-1], height)

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)  # the anchored node (or "undefined alias")
            known = self._anchored.get(id(node))
            if known is None:
                self._refuse(f"alias *{event.anchor} is inside the value it names", event)
            else:
                self._count(known[0], event)
                self._grow(known[1], event)
            return node
        self._grow(1, event)
        before = self._nodes
        self._count(1, event)
        self._heights.append(0)
        try:
            node = super().compose_node(parent, index)
        finally:
            height = self._heights.pop() + 1
        self._grow(height, event)
        if event.anchor is not None and node is not None:
            self._anchored[id(node)] = (self._nodes - before, height)
        return node

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        """A mapping whose own keys are each given once (keys a merge ``<<: *base`` brings in may
        be given again: that is what a merge is for)."""
        seen: dict[Any, Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, ScalarNode):
                continue
            key = self.construct_object(key_node)
            if key in seen:
                first = seen[key].start_mark.line + 1
                raise ConstructorError(
                    None, None, f"key {key!r} is given twice (first at line {first})", key_node.start_mark
                )
            seen[key] = key_node
        return super().construct_mapping(node, deep)


def load_yaml_text(text: str) -> Any:
    """The YAML document in ``text``. Raises ``ValueError`` with the position and the problem."""
    loader = BoundedSafeLoader(text)
    try:
        return loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise ValueError(f"not valid YAML{at}: {problem}") from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4300 digits
        raise ValueError(f"not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def read_yaml_file(path: str | Path) -> Any:
    """The YAML document in file ``path``. Raises ``OSError`` (cannot read) or ``ValueError``."""
    return load_yaml_text(read_text(path, MAX_CONFIG_BYTES))
