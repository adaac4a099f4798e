"""A settings schema (``rightsizer_core.settings``) as JSON Schema, draft 7.

The Helm chart's ``values.schema.json`` carries the exporter's and the adapter's configuration
files as structured values; their part of the schema is generated from the same dataclasses the
programs load (``scripts/helm-values-schema`` writes it, a test keeps it current), so a key the
program would refuse is refused by ``helm install`` first. The JSON types are the YAML types the
file holds: a string where the program wants a number is refused here although the program would
convert it; cross-field checks (``validate()``) stay with the program's ``--check-config``.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from typing import Any, Literal, get_args, get_origin

_SCALARS = {bool: "boolean", int: "integer", float: "number", str: "string"}


def json_schema(cls: type) -> dict[str, Any]:
    """The schema of settings dataclass ``cls``: every key known, documented, bounded; no other key."""
    hints = typing.get_type_hints(cls)
    properties = {}
    for f in dataclasses.fields(cls):
        schema = _of(hints[f.name])
        low, high = f.metadata.get("min"), f.metadata.get("max")
        if low is not None:
            schema = _bound(schema, "minimum", low)
        if high is not None:
            schema = _bound(schema, "maximum", high)
        doc = f.metadata.get("doc")
        properties[f.name] = {"description": doc, **schema} if doc else schema
    return {"type": "object", "additionalProperties": False, "properties": properties}


def _bound(schema: dict[str, Any], keyword: str, value: float) -> dict[str, Any]:
    """Bounds apply to the numeric members of the type (JSON Schema ignores them for the others)."""
    return {**schema, keyword: int(value) if float(value).is_integer() else value}


def _of(tp: Any) -> dict[str, Any]:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [_of(a) for a in get_args(tp)]
        if all(set(o) == {"type"} for o in options):  # scalars and null: one list of types
            names: list[str] = []
            for o in options:
                names += o["type"] if isinstance(o["type"], list) else [o["type"]]
            return {"type": names}
        return {"anyOf": options}
    if tp is type(None):
        return {"type": "null"}
    if origin is Literal:
        return {"enum": list(get_args(tp))}
    if origin is list:
        (item,) = get_args(tp)
        return {"type": "array", "items": _of(item)}
    if origin is dict:
        _, value = get_args(tp)
        return {"type": "object", "additionalProperties": _of(value)}
    if dataclasses.is_dataclass(tp):
        return json_schema(tp)  # type: ignore[arg-type]
    if tp in _SCALARS:
        return {"type": _SCALARS[tp]}
    if tp is Any:
        return {}
    raise TypeError(f"no JSON Schema for setting type {tp!r}")
