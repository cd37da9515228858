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


__all__ = ["NonFiniteError"]
