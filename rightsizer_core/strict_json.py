"""JSON that every parser reads: never a bare ``NaN``, ``Infinity`` or ``-Infinity``.

Python's ``json.dumps`` writes those by default, which ``JSON.parse``, Go's ``encoding/json`` and
``jq`` refuse. ``dumps`` writes strict JSON, and a value that is not finite becomes ``null``
(unknown, never a number): the usual case costs one ``json.dumps``, the rare one a second pass.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite_only(value: Any) -> Any:
    """``value`` with every float that is not finite replaced by None (dicts, lists, tuples)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_only(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_only(v) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError:  # a float that is not finite somewhere: written as null
        return json.dumps(finite_only(value), allow_nan=False, **kwargs)
