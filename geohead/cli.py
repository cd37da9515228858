"""The ``geohead`` command line (click).

Each subcommand lives in its own function and imports what it needs inside the function, so
``geohead --help`` stays fast and heavy libraries (optuna, matplotlib, timm) load only for the
commands that use them.
"""
from __future__ import annotations

import click

from geohead._version import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="geohead")
def main() -> None:
    """geohead: geometric projection heads for self-supervised learning."""


if __name__ == "__main__":  # pragma: no cover
    main()
