"""KEDA: the external-scaler gRPC service (with push) and the metrics-api JSON endpoint."""

from __future__ import annotations

from collections.abc import Iterable, Sequence


def unknown_keys(keys: Iterable[str], own: Sequence[str], others: Sequence[str] = (), what: str = "") -> str:
    """"" when every key is known, else one line naming the unknown ones (with the known key
    they differ from only by case) and listing the known ones."""
    known = {*own, *others}
    bad = sorted(k for k in keys if k not in known)
    if not bad:
        return ""
    folded = {k.lower(): k for k in own}
    hints = {k: f" (did you mean {folded[k.lower()]!r}?)" if k.lower() in folded else "" for k in bad[:5]}
    named = ", ".join(repr(k[:60]) + hint for k, hint in hints.items())
    tail = f" (and KEDA's own: {', '.join(others)})" if others else ""
    return f"{what} has unknown keys: {named}; known: {', '.join(own)}{tail}"
