"""Rightsizer's per-node exporter: GPU samples under dcgm-exporter's names, plus right-sizing scores."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("rightsizer")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"
