"""The ``geohead`` subcommands, one module each; :mod:`geohead.cli` registers them.

Shared conventions: bad input raises :class:`InputError` (exit code 2, one line naming the bad
value and the fix, no traceback); heavy libraries are imported inside the command functions.
"""
from __future__ import annotations

import contextlib
import errno
import os
import warnings
from typing import Any, Callable, Iterator, NoReturn

import click


class InputError(click.ClickException):
    """Bad input from the user: exit code 2, message only."""

    exit_code = 2


def fail(message: str) -> NoReturn:
    raise InputError(message)


@contextlib.contextmanager
def warnings_to_stderr(write: Callable[[str], None] | None = None) -> Iterator[None]:
    """Inside: each UserWarning (an assumption the library made, e.g. a default input size) is
    printed at once as one ``warning: ...`` line on stderr (through ``write`` when given, e.g. a
    progress bar's), without Python's file and line, once per place as Python's default filter
    does; other warning categories are shown as before."""
    with warnings.catch_warnings():
        warnings.simplefilter("default", UserWarning)
        shown = warnings.showwarning

        def show(message: Any, category: type[Warning], *args: Any, **kwargs: Any) -> None:
            if not issubclass(category, UserWarning):
                shown(message, category, *args, **kwargs)
            elif write is not None:
                write(f"warning: {message}")
            else:
                click.echo(f"warning: {message}", err=True)

        warnings.showwarning = show
        yield


def missing_source(source: str, accepted: str) -> None:
    """Exit 2 when the SOURCE argument of a command names nothing readable (a dangling link
    included), listing what the command accepts; a name too long for the system is left to
    :mod:`geohead.cli`, which names that."""
    try:
        os.stat(source)
    except OSError as exc:
        if exc.errno == errno.ENAMETOOLONG:
            raise
        if isinstance(exc, (FileNotFoundError, NotADirectoryError)):
            fail(f"{source!r} does not exist; give {accepted}")
        fail(f"{source!r} cannot be read ({exc.strerror or exc}); give {accepted}")


def toml_str(value: str) -> str:
    """Quote a path or name as a TOML string for a ``--set`` style override."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
