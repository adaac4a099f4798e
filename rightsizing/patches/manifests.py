"""The manifests a patch is made for (``--manifests``): what the object's pod template holds today.

With them a patch is exact: the node selection uses required node affinity when the template
already selects nodes that way, the resource is renamed in requests only where requests name it,
the count is the manifest's, containers keep their order, and a patch is only written for an object
that exists. Files are YAML (one or several documents, ``kind: List`` expanded), as written in a
repository or rendered by ``kubectl kustomize``; a folder is read for ``*.yaml`` and ``*.yml``,
recursively. Everything read is bounded: bytes per file, files, objects, and each document's values
and depth (``rightsizer_core.files``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from rightsizer_core.files import BoundedSafeLoader, read_text

from .names import TEMPLATES

MAX_FILE_BYTES = 32 * 2**20
MAX_FILES = 5_000
MAX_OBJECTS = 100_000


class ManifestError(ValueError):
    """A manifest cannot be read; the message is one line naming the file."""


class _Loader(BoundedSafeLoader):
    """The bounded loader, its value count restarted for each document of a stream."""

    def compose_document(self) -> Any:
        self._nodes = 0
        self._anchored.clear()
        return super().compose_document()


def _documents(text: str, where: str) -> Iterator[Any]:
    loader = _Loader(text)
    try:
        while loader.check_data():
            yield loader.get_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark else ""
        raise ManifestError(f"{where}: not valid YAML{at}: {getattr(exc, 'problem', None) or exc}") from None
    except (ValueError, OverflowError) as exc:
        raise ManifestError(f"{where}: not valid YAML: {exc}") from None
    finally:
        loader.dispose()


def _files(path: str) -> list[str]:
    if not os.path.isdir(path):
        return [path]
    found: list[str] = []
    for root, dirs, names in os.walk(path):  # symbolic links to folders are not followed
        dirs.sort()
        for name in sorted(names):
            if name.endswith((".yaml", ".yml")):
                found.append(os.path.join(root, name))
                if len(found) > MAX_FILES:
                    raise ManifestError(f"--manifests {path}: more than {MAX_FILES} YAML files")
    return found


class Manifests:
    """Objects by (kind, namespace, name); an object without a namespace matches any."""

    def __init__(self, objects: Sequence[tuple[str, dict[str, Any]]]) -> None:
        self.count = len(objects)
        self._index: dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]] = {}
        for where, obj in objects:
            meta = obj.get("metadata") or {}
            key = (str(obj.get("kind")), str(meta.get("namespace") or ""), str(meta.get("name")))
            self._index.setdefault(key, []).append((where, obj))

    def _found(self, kind: str, namespace: str, name: str) -> list[tuple[str, dict[str, Any]]]:
        return self._index.get((kind, namespace, name)) or self._index.get((kind, "", name)) or []

    def exists(self, kind: str, namespace: str, name: str) -> bool:
        return bool(self._found(kind, namespace, name))

    def find(self, kind: str, namespace: str, name: str) -> tuple[dict[str, Any], str] | str:
        """(object, file) or why there is not exactly one."""
        found = self._found(kind, namespace, name)
        if not found:
            return f"no {kind} {namespace}/{name} in the manifests read ({self.count} objects)"
        if len(found) > 1:
            files = f"{found[0][0]}, {found[1][0]}"
            return f"{len(found)} objects {kind} {namespace}/{name} in the manifests ({files})"
        return found[0][1], found[0][0]


def pod_spec(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    node: Any = obj
    for step in TEMPLATES[kind][1]:
        node = node.get(step) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else None


def read_manifests(paths: Sequence[str]) -> Manifests:
    """Every object of the files and folders named. Raises ManifestError."""
    objects: list[tuple[str, dict[str, Any]]] = []
    for path in paths:
        for file in _files(path):
            try:
                text = read_text(file, MAX_FILE_BYTES)
            except OSError as exc:
                raise ManifestError(f"--manifests {file}: {exc.strerror or exc}") from None
            where = str(Path(file))
            for doc in _documents(text, where):
                items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
                for item in items if isinstance(items, list) else []:
                    if isinstance(item, dict) and isinstance(item.get("metadata"), dict) and "kind" in item:
                        objects.append((where, item))
                if len(objects) > MAX_OBJECTS:
                    raise ManifestError(f"--manifests: more than {MAX_OBJECTS} objects")
    return Manifests(objects)
