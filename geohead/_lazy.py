"""Attributes of a package loaded on first access (PEP 562), so that importing it stays light."""
from __future__ import annotations

from typing import Any, Callable


def lazy_attributes(package: str, namespace: dict[str, Any], table: dict[str, str]) -> Callable[[str], Any]:
    """A module ``__getattr__`` for ``package``: ``name`` in ``table`` is imported from the module
    ``table[name]`` on first access and cached in ``namespace`` (the package's ``globals()``)."""

    def __getattr__(name: str) -> Any:
        if name in table:
            import importlib

            value = getattr(importlib.import_module(table[name]), name)
            namespace[name] = value
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
