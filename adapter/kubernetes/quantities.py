"""Kubernetes Quantity strings for metric values (``"5"``, ``"1500m"``), and parsing them back.

HPA reads values with ``Quantity.MilliValue()``: finer than a milli-unit is lost, and anything
beyond ±9.2e15 would overflow its int64 milli arithmetic (prometheus-adapter's infamous
``-9223372036854775808m`` comes from sending NaN through it). So values are rounded to the nearest
milli-unit, clamped to what fits, and NaN/Inf are refused: callers leave such series out.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

MAX_ABS = (2**63 - 1) // 1000  # largest magnitude whose milli-value fits in int64

_SUFFIXES = {
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "": Decimal(1),
    "k": Decimal("1e3"),
    "M": Decimal("1e6"),
    "G": Decimal("1e9"),
    "T": Decimal("1e12"),
    "P": Decimal("1e15"),
    "E": Decimal("1e18"),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|n|u|m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?")


def format_quantity(value: float) -> str:
    """The Quantity string for ``value``; raises ValueError for NaN and infinities."""
    if not math.isfinite(value):
        raise ValueError(f"{value} has no Quantity form")
    if abs(value) >= MAX_ABS:
        return str(MAX_ABS if value > 0 else -MAX_ABS)
    milli = round(value * 1000)
    if milli % 1000 == 0:
        return str(milli // 1000)
    return f"{milli}m"


def parse_quantity(text: str) -> float:
    """The number a Quantity string stands for (``"1500m"`` → 1.5, ``"2Ki"`` → 2048)."""
    m = _QUANTITY.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not a Kubernetes quantity: {text!r}")
    number, suffix = m.group(1), m.group(2) or ""
    try:
        if suffix[:1] in ("e", "E"):
            return float(Decimal(number) * Decimal(10) ** int(suffix[1:]))
        return float(Decimal(number) * _SUFFIXES[suffix])
    except (InvalidOperation, OverflowError):
        raise ValueError(f"not a Kubernetes quantity: {text!r}") from None
