"""The ``geohead`` subcommands, one module each; :mod:`geohead.cli` registers them.

Shared conventions: bad input raises :class:`InputError` (exit code 2, one line naming the bad
value and the fix, no traceback); heavy libraries are imported inside the command functions.
"""
from __future__ import annotations

import contextlib
import warnings
from typing import Iterator, NoReturn

import click


class InputError(click.ClickException):
    """Bad input from the user: exit code 2, message only."""

    exit_code = 2


def fail(message: str) -> NoReturn:
    raise InputError(message)


@contextlib.contextmanager
def warnings_to_stderr() -> Iterator[None]:
    """Inside: each UserWarning (an assumption the library made, e.g. a default input size) is
    printed at once as one ``warning: ...`` line on stderr, without Python's file and line."""
    with warnings.catch_warnings():
        warnings.simplefilter("always", UserWarning)
        warnings.showwarning = lambda message, *args, **kwargs: click.echo(f"warning: {message}", err=True)
        yield


def missing_source(source: str, accepted: str) -> None:
    """Exit 2 when the SOURCE argument of a command names nothing, listing what it accepts."""
    import os

    try:  # a name the system refuses for its length is not "missing": geohead.cli names that
        os.lstat(source)
    except (FileNotFoundError, NotADirectoryError):
        fail(f"{source!r} does not exist; give {accepted}")


def toml_str(value: str) -> str:
    """Quote a path or name as a TOML string for a ``--set`` style override."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
