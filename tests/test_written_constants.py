"""Values the exporter writes out instead of importing them at start-up (to keep its memory small)
stay equal to their sources: the version to pyproject.toml and the installed package's metadata,
the OpenMetrics content type to prometheus-client's."""

from __future__ import annotations

import importlib.metadata
import tomllib
from pathlib import Path

from prometheus_client.openmetrics.exposition import CONTENT_TYPE_LATEST

from exporter import __version__, render

ROOT = Path(__file__).resolve().parent.parent


def test_version_is_the_projects() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert __version__ == project == importlib.metadata.version("rightsizer")


def test_openmetrics_content_type_is_prometheus_clients() -> None:
    assert render.OPENMETRICS_CONTENT_TYPE == CONTENT_TYPE_LATEST
