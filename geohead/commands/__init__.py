"""The ``geohead`` subcommands, one module each; :mod:`geohead.cli` registers them.

Shared conventions: bad input raises :class:`InputError` (exit code 2, one line naming the bad
value and the fix, no traceback); heavy libraries are imported inside the command functions.
"""
from __future__ import annotations

from typing import NoReturn

import click


class InputError(click.ClickException):
    """Bad input from the user: exit code 2, message only."""

    exit_code = 2


def fail(message: str) -> NoReturn:
    raise InputError(message)


def toml_str(value: str) -> str:
    """Quote a path or name as a TOML string for a ``--set`` style override."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
