"""The helm and kubectl binaries that scripts/k8s-tools installs into .tools/bin."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parent.parent / ".tools" / "bin"


def tool(name: str) -> str:
    """Path of ``helm`` or ``kubectl``: .tools/bin first, then PATH; fails the test when absent."""
    own = TOOLS / name
    if own.is_file():
        return str(own)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"{name} not found: run scripts/k8s-tools (scripts/test does)")
    return found
