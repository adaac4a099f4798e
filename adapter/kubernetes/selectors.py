"""Kubernetes label selectors: moved to ``rightsizer_core.selectors`` (the exporter's discovery
parses the same grammar); the adapter's modules keep importing them from here."""

from rightsizer_core.selectors import (
    EVERYTHING,
    Operator,
    Requirement,
    Selector,
    SelectorError,
    label_name,
    parse,
)

__all__ = ["EVERYTHING", "Operator", "Requirement", "Selector", "SelectorError", "label_name", "parse"]
