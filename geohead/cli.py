"""The ``geohead`` command line (click).

Each subcommand imports what it needs inside its function, so ``geohead --help`` stays fast and
heavy libraries (optuna, matplotlib, timm) load only for the commands that use them. Bad input
exits with code 2 and a one-line message naming the problem and the fix, never a traceback.
"""
from __future__ import annotations

import errno

import click

from geohead._version import __version__


class _Main(click.Group):
    """The group: a path the system refuses for its length (a name over 255 bytes, a path over
    4,096) is bad input wherever a command first touches it, so it exits 2 with one line."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except OSError as exc:
            if exc.errno != errno.ENAMETOOLONG:
                raise
            from geohead.commands import InputError
            from geohead.io import shorten

            shown = shorten(max((str(f) for f in (exc.filename, exc.filename2) if f is not None), key=len, default=""))
            raise InputError(f"{shown + ': ' if shown else ''}a file name is longer than the system allows (on Linux "
                             "255 bytes a name, 4,096 a path); give a shorter path") from None


@click.group(cls=_Main, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="geohead")
def main() -> None:
    """geohead: geometric projection heads for self-supervised learning."""


from geohead.commands.train import train  # noqa: E402

main.add_command(train)

from geohead.commands.export import export  # noqa: E402

main.add_command(export)

from geohead.commands.diagnose import diagnose  # noqa: E402

main.add_command(diagnose)

from geohead.commands.report import report  # noqa: E402

main.add_command(report)

from geohead.commands.search import search  # noqa: E402

main.add_command(search)


if __name__ == "__main__":  # pragma: no cover
    main()
