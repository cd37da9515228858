"""Typed dataclasses from parsed TOML: each key checked against its field's annotation, unknown
keys named with the closest valid one, and dotted lookups of a value for messages.

:mod:`geohead.training.config` declares the recipe's tables; this module only turns nested dicts
into them and finds what is wrong, raising :class:`ConfigError` with the key and the fix.
"""
from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from typing import Any, Union


class ConfigError(ValueError):
    """A recipe or override that names an unknown key or holds a bad value."""


def lookup(cfg: Any, key: str) -> Any:
    """The value at a dotted ``key`` of a config (fields, dict keys, list indices)."""
    for part in key.split("."):
        cfg = cfg[int(part)] if isinstance(cfg, (list, tuple)) else cfg[part] if isinstance(cfg, dict) else getattr(cfg, part)
    return cfg


def choice(key: str, value: Any, allowed: tuple) -> None:
    if value not in allowed:
        raise ConfigError(f"{key} = {value!r} is not allowed; choose one of {list(allowed)}")


def _type_ok(value: Any, tp: Any) -> tuple[bool, Any]:
    """Check ``value`` against annotation ``tp``; return (ok, coerced value)."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        for arg in typing.get_args(tp):
            ok, v = _type_ok(value, arg)
            if ok:
                return True, v
        return False, value
    if tp is type(None):
        return value is None, value
    if tp is bool:
        return isinstance(value, bool), value
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool), value
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return True, float(value)
        return False, value
    if tp is str:
        return isinstance(value, str), value
    if tp is dict:
        return isinstance(value, dict), value
    if tp is tuple:
        if isinstance(value, (list, tuple)):
            return True, tuple(value)
        return False, value
    return True, value


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    return "none" if tp is type(None) else getattr(tp, "__name__", str(tp))


def build(cls: type, d: dict[str, Any], prefix: str) -> Any:
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in d.items():
        full = f"{prefix}{key}"
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {prefix + close[0]!r}?)" if close else ""
            raise ConfigError(f"unknown key {full!r}{hint}; valid keys here are {sorted(fields)}")
        tp = hints[key]
        if dataclasses.is_dataclass(tp):
            if not isinstance(value, dict):
                raise ConfigError(f"{full} must be a table of keys, got {value!r}")
            kwargs[key] = build(tp, value, f"{full}.")
            continue
        ok, coerced = _type_ok(value, tp)
        if not ok:
            raise ConfigError(f"{full} = {value!r} has the wrong type; expected {_type_name(tp)}")
        kwargs[key] = coerced
    return cls(**kwargs)


def non_finite(value: Any, key: str) -> str | None:
    """The key of the first NaN/inf number in a config value (dataclass, dict, list), else None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else key
    if dataclasses.is_dataclass(value):
        value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) else ()
    return next((bad for bad in (non_finite(v, f"{key}.{k}" if key else str(k)) for k, v in items) if bad), None)


#: How deep a recipe's or an override's value may nest (the packaged recipes nest three tables deep).
MAX_NESTING = 16
