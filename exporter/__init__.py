"""Rightsizer's per-node exporter: GPU samples under dcgm-exporter's names, plus right-sizing scores."""

from rightsizer_core import __version__ as __version__
