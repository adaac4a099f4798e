"""rightsizer_core.settings_schema: the JSON Schema of a settings class accepts exactly what the
program's loader accepts on the points it can express: every default, every choice of a choice
setting; every misspelt key, wrong type, out-of-range number and unknown choice refused by both.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterator
from typing import Any, Literal, get_args, get_origin

import jsonschema
import pytest

from adapter.config import AdapterConfig
from exporter.config import ExporterConfig
from rightsizer_core.settings import ConfigError, build
from rightsizer_core.settings_schema import json_schema

CLASSES = [ExporterConfig, AdapterConfig]


def leaves(cls: type, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any, dict[str, Any]]]:
    """(key path, type, metadata) of every setting, nested sections walked."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            yield from leaves(hints[f.name], (*path, f.name))
        else:
            yield (*path, f.name), hints[f.name], dict(f.metadata)


def nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out: Any = value
    for key in reversed(path):
        out = {key: out}
    return dict(out)


def both_refuse(cls: type, data: dict[str, Any]) -> None:
    with pytest.raises(ConfigError):
        build(cls, data, "")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft7Validator(json_schema(cls)).validate(data)


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_schema_is_valid_draft_7_and_accepts_every_default(cls: type) -> None:
    schema = json_schema(cls)
    jsonschema.Draft7Validator.check_schema(schema)
    jsonschema.Draft7Validator(schema).validate(dataclasses.asdict(cls()))


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_schema_and_program_refuse_the_same_mistakes(cls: type) -> None:
    checked = 0
    for path, tp, meta in leaves(cls):
        both_refuse(cls, nested((*path[:-1], path[-1] + "x"), 1))  # a misspelt key
        if meta.get("min") is not None and tp in (int, float):
            both_refuse(cls, nested(path, meta["min"] - 1))
            checked += 1
        if meta.get("max") is not None and tp in (int, float):
            both_refuse(cls, nested(path, meta["max"] + 1))
        if get_origin(tp) is Literal:
            both_refuse(cls, nested(path, "no-such-choice"))
            for choice in get_args(tp):
                jsonschema.Draft7Validator(json_schema(cls)).validate(nested(path, choice))
            checked += 1
        if tp is bool:
            both_refuse(cls, nested(path, {"a": 1}))
    assert checked >= 5  # bounded numbers and choices were found
