"""Exceptions shared across geohead (a leaf module: it imports nothing from geohead)."""
from __future__ import annotations


class NonFiniteError(ValueError, FloatingPointError):
    """A computation met NaN/inf: non-finite inputs (representations, features, embeddings) or a
    non-finite intermediate (an operator product inside Lanczos).

    A :class:`ValueError` (inputs are checked before use) and a :class:`FloatingPointError` (what
    Lanczos raised for non-finite products before this class existed), so existing
    ``except ValueError`` and ``except FloatingPointError`` handlers keep catching it; catch
    ``NonFiniteError`` itself to tell a diverged computation from any other bad argument.
    """


class DivergedModelError(ValueError):
    """A model whose features are non-finite or too large to measure (a diverged training run):
    named as such before an eigendecomposition fails on them. A :class:`ValueError`."""


class SpecError(ValueError):
    """A head spec (HeadSpec fields, head.json, best_head.json, a checkpoint's head spec) that is
    malformed, out of range, or names an activation outside the registry. A :class:`ValueError`."""


class UntrustedInputError(ValueError):
    """A file from elsewhere asks for something geohead refuses to do while loading: import code,
    read outside its folder, reach the network, or pass unchecked arguments on. A :class:`ValueError`."""


__all__ = ["DivergedModelError", "NonFiniteError", "SpecError", "UntrustedInputError"]
