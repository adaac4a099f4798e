"""Rightsizer's per-node exporter: GPU samples under dcgm-exporter's names, plus right-sizing scores."""

# The project's version, as in pyproject.toml (a test keeps the two equal). Written here rather than
# read with importlib.metadata, whose import (with its email parsing) costs every exporter ~1 MiB.
__version__ = "0.1.0"
