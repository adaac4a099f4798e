"""Typed configuration: YAML files checked against dataclass schemas, environment, flags.

Shared by the exporter and the adapter. A schema is a dataclass whose fields carry a default and
``doc``; ``load`` rejects unknown keys and wrong types with a message naming the file, the key
path and the value. Precedence: command-line flags > ``RIGHTSIZER_*`` environment > file > defaults.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, get_args, get_origin

from rightsizer_core.files import read_yaml_file

T = TypeVar("T")


class ConfigError(Exception):
    """Configuration problems, worded for the person who wrote the configuration: one or more, each
    naming its key; ``str()`` is one problem per line."""

    def __init__(self, *problems: str) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(problems))

    def within(self, where: str) -> ConfigError:
        """The same problems, each prefixed with where they are (a file, the environment)."""
        return ConfigError(*(f"{where}: {p}" for p in self.problems))


def _gather(problems: list[str], convert: Any, *args: Any) -> Any:
    """``convert(*args)``, adding its problems to ``problems`` instead of stopping at the first."""
    try:
        return convert(*args)
    except ConfigError as exc:
        problems.extend(exc.problems)
        return None


def _raise_all(problems: list[str]) -> None:
    if problems:
        raise ConfigError(*problems)


def setting(
    default: Any, doc: str, *, minimum: float | None = None, maximum: float | None = None, env: bool = True
) -> Any:
    """Declare a setting: its default, its documentation and, for numbers, its bounds."""
    meta = {"doc": doc, "min": minimum, "max": maximum, "env": env}
    if isinstance(default, list | dict) or dataclasses.is_dataclass(default):
        factory = (lambda d=default: type(d)(d)) if isinstance(default, list | dict) else type(default)
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _convert(tp: Any, value: Any, where: str, meta: Mapping[str, Any]) -> Any:
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in get_args(tp) if a is not type(None)]
        if value is None:
            if type(None) in get_args(tp):
                return None
            raise ConfigError(f"{where}: a value is required")
        errors = []
        for option in options:
            try:
                return _convert(option, value, where, meta)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError(errors[0])
    if origin is Literal:
        choices = get_args(tp)
        if value not in choices:
            raise ConfigError(
                f"{where}: must be one of {', '.join(map(str, choices))}; got {_describe(value)}"
            )
        return value
    if origin is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: must be a list; got {_describe(value)}")
        (item,) = get_args(tp)
        problems: list[str] = []
        items = [_gather(problems, _convert, item, v, f"{where}[{i}]", {}) for i, v in enumerate(value)]
        _raise_all(problems)
        return items
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: must be a mapping; got {_describe(value)}")
        _, vt = get_args(tp)
        problems = []
        entries = {str(k): _gather(problems, _convert, vt, v, f"{where}.{k}", {}) for k, v in value.items()}
        _raise_all(problems)
        return entries
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise ConfigError(f"{where}: must be a mapping; got {_describe(value)}")
        return build(tp, value, where)  # type: ignore[arg-type]
    if tp is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
            return value.lower() in ("true", "1", "yes")
        raise ConfigError(f"{where}: must be true or false; got {_describe(value)}")
    if tp in (int, float):
        if isinstance(value, bool):
            raise ConfigError(f"{where}: must be a number; got {_describe(value)}")
        try:
            number = tp(value)
        except (TypeError, ValueError, OverflowError):
            raise ConfigError(
                f"{where}: must be {'an integer' if tp is int else 'a number'}; got {_describe(value)}"
            ) from None
        if tp is int and isinstance(value, float) and value != number:
            raise ConfigError(f"{where}: must be an integer; got {_describe(value)}")
        if number != number:
            raise ConfigError(f"{where}: must be a number; got NaN")
        low, high = meta.get("min"), meta.get("max")
        if low is not None and number < low:
            raise ConfigError(f"{where}: must be at least {low}; got {_describe(value)}")
        if high is not None and number > high:
            raise ConfigError(f"{where}: must be at most {high}; got {_describe(value)}")
        return number
    if tp is str:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return str(value)
        raise ConfigError(f"{where}: must be a string; got {_describe(value)}")
    if tp is Any:
        return value
    raise TypeError(f"unsupported setting type {tp!r} at {where}")


def closest_key(key: object, known: Iterable[str]) -> str:
    """"; did you mean 'KEY'?" for the known key closest to a mistyped one ("" when none is close)."""
    close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def build(cls: type[T], data: Mapping[str, Any], where: str) -> T:
    """Build dataclass ``cls`` from a mapping, rejecting unknown keys."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    prefix = f"{where}: " if where else ""  # the caller names the file for the top level
    known = ", ".join(sorted(fields))
    problems = [
        f"{prefix}unknown key {k!r} (known keys: {known}){closest_key(k, fields)}"
        for k in data
        if k not in fields
    ]
    kwargs = {
        name: _gather(problems, _convert, hints[name], value, f"{where}.{name}" if where else name, meta)
        for name, value in data.items()
        if (meta := fields[name].metadata if name in fields else None) is not None
    }
    _raise_all(problems)
    try:
        obj = cls(**kwargs)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{prefix}{exc}") from None
    check = getattr(obj, "validate", None)
    if check is not None:
        try:
            check()
        except ValueError as exc:
            raise ConfigError(f"{prefix}{exc}") from None
    return obj


def read_yaml(path: str | Path) -> dict[str, Any]:
    """A YAML file's top-level mapping, read within the limits of ``rightsizer_core.files``."""
    try:
        data = read_yaml_file(path)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: must be a YAML mapping at the top level")
    return data


def env_overrides(
    cls: type,
    prefix: str = "RIGHTSIZER_",
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Values for ``cls``'s scalar settings (and one level of nested sections) from the environment."""
    environ = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        if not f.metadata.get("env", True):
            continue
        tp = hints[f.name]
        key = prefix + f.name.upper()
        if dataclasses.is_dataclass(tp):
            nested = env_overrides(tp, key + "_", environ)  # type: ignore[arg-type]
            if nested:
                out[f.name] = nested
        elif get_origin(tp) not in (list, dict) and key in environ:
            out[f.name] = environ[key]
    return out


def env_names(cls: type, prefix: str = "RIGHTSIZER_") -> set[str]:
    """Every environment variable ``env_overrides`` reads for ``cls``."""
    out: set[str] = set()
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = prefix + f.name.upper()
        if not f.metadata.get("env", True):
            continue
        if dataclasses.is_dataclass(tp):
            out |= env_names(tp, key + "_")  # type: ignore[arg-type]
        elif get_origin(tp) not in (list, dict):
            out.add(key)
    return out


def unknown_env(
    cls: type,
    prefix: str = "RIGHTSIZER_",
    environ: Mapping[str, str] | None = None,
    others: tuple[str, ...] = (),
) -> list[tuple[str, str]]:
    """(name, the closest name read or "") of each variable named with ``prefix`` that no setting
    of ``cls`` reads (a misspelt one would otherwise be ignored without a word); names with a
    prefix in ``others`` belong to another program."""
    environ = os.environ if environ is None else environ
    known = sorted(env_names(cls, prefix))
    out = []
    for name in sorted(environ):
        if name.startswith(prefix) and name not in known and not name.startswith(others):
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.8)
            out.append((name, close[0] if close else ""))
    return out


def unknown_env_line(name: str, closest: str) -> str:
    hint = f"; did you mean {closest}?" if closest else ""
    return f"environment variable {name} is not a setting and is ignored{hint}"


def merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge ``override`` into a copy of ``base`` (mappings merge, everything else replaces)."""
    out = dict(base)
    for k, v in override.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge(dict(out[k]), v)
        else:
            out[k] = v
    return out


def _type_name(tp: Any) -> str:
    """Readable type for the docs: ``float``, ``str | null``, ``bool | 'auto'``, ``list[str]``."""
    origin = get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        return " | ".join("null" if a is type(None) else _type_name(a) for a in get_args(tp))
    if origin is Literal:
        return " | ".join(repr(a) for a in get_args(tp))
    if origin in (list, dict):
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in get_args(tp))}]"
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def describe_settings(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """(key, type, default, doc) rows for the README's configuration reference."""
    rows: list[tuple[str, str, str, str]] = []
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            rows += describe_settings(tp, key + ".")  # type: ignore[arg-type]
            continue
        if f.default is not dataclasses.MISSING:
            default = "null" if f.default is None else repr(f.default).replace("'", "")
        elif f.default_factory is not dataclasses.MISSING:
            default = repr(f.default_factory())
        else:
            default = "(required)"
        type_name = _type_name(tp)
        rows.append((key, type_name, default, f.metadata.get("doc", "")))
    return rows
