"""``geohead report FOLDER_OR_DIAGNOSE_JSON``: PNG plots and one self-contained report.html."""
from __future__ import annotations

import click

from geohead.commands import fail


@click.command()
@click.argument("folder", metavar="FOLDER_OR_DIAGNOSE_JSON", type=click.Path())
@click.option("--out", "out_dir", type=click.Path(file_okay=False), help="Where to write the PNGs and report.html (default: FOLDER, or the JSON's folder).")
def report(folder: str, out_dir: str | None) -> None:
    """Plot a run folder (loss, collapse monitors, Hessian extremes over steps; orbit compression,
    Hessian spectral density and guillotine probes from its diagnose.json), a folder of
    GeometryMonitor *.jsonl files (the newest log's last run), the JSON of `geohead diagnose CKPT`, or a search folder
    (criteria vs accuracy, Pareto front), and write one self-contained report.html.
    """
    from geohead.report.page import ReportError, make_report

    try:
        res = make_report(folder, out_dir)
    except ReportError as exc:
        fail(str(exc))
    for p in res.pngs:
        click.echo(f"  {p}")
    for note in res.notes:
        click.echo(f"note: {note}", err=True)
    click.echo(f"{res.kind} report: {res.html}")
