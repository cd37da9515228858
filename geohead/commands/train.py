"""``geohead train RECIPE``: train, probe and write a run folder."""
from __future__ import annotations

import sys
from typing import Any

import click

from geohead.commands import fail, toml_str


@click.command()
@click.argument("recipe", type=click.Path(dir_okay=False))
@click.option("--head", "head_file", type=click.Path(dir_okay=False), help="A HeadSpec JSON (e.g. the search's best_head.json) that replaces the recipe's head.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override a recipe value, e.g. --set optim.lr=0.1 --set head.spec.activation=gelu.")
@click.option("--out", type=click.Path(file_okay=False), help="Run folder (default: the recipe's out, else runs/<objective>).")
@click.option("--device", help="auto, cpu, cuda or cuda:K.")
@click.option("--overwrite", is_flag=True, help="Replace a run already in the folder instead of resuming it.")
def train(recipe: str, head_file: str | None, overrides: tuple[str, ...], out: str | None, device: str | None, overwrite: bool) -> None:
    """Train the SSL pipeline of RECIPE, probe it, and write the run folder.

    RECIPE is a TOML file or the name of a recipe shipped with geohead, e.g. barlow_shapes_cpu
    (an unknown name lists them). A run folder that already holds the same run is resumed from
    its last checkpoint.
    """
    from geohead.training.config import ConfigError, load_recipe

    extra = list(overrides)
    if head_file:
        extra.append(f"head.file={toml_str(head_file)}")
    if out:
        extra.append(f"out={toml_str(out)}")
    if device:
        extra.append(f"device={toml_str(device)}")
    try:
        cfg = load_recipe(recipe, extra)
    except ConfigError as exc:
        fail(str(exc))
    from geohead.io import folder_problem

    problem = folder_problem(cfg.out_dir)
    if problem:
        fail(f"run folder {str(cfg.out_dir)!r} cannot be written: {problem}; give another --out folder")
    from geohead.training.checkpoint import CheckpointError
    from geohead.training.loop import TrainingDiverged, train as run_training

    click.echo(f"geohead train: {cfg.objective} on {cfg.data.name} -> {cfg.out_dir}", err=True)
    try:
        data = None
        if head_file and cfg.data.n_train is None:  # the note counts the whole training set: load it once
            from geohead.training.model import training_data

            data = training_data(cfg)
        note = _rescale_note(cfg, head_file, data) if head_file else None
        if note:
            click.echo(note, err=True)
        result = run_training(cfg, overwrite=overwrite, data=data)
    except TrainingDiverged as exc:
        click.echo(f"Error: training diverged: {exc}", err=True)
        sys.exit(1)
    except (ValueError, FileNotFoundError, CheckpointError) as exc:
        fail(str(exc))
    click.echo(f"finished {result.steps} steps, final loss {result.final_loss:.4f}; run folder {result.out_dir}")
    if result.probes:
        from geohead.probes import GuillotineReport

        click.echo(GuillotineReport.from_dict(result.probes).table())


def _rescale_note(cfg, head_file: str, data: Any = None) -> str | None:
    """Lines that say how this run differs from the proxy a ``--head`` was found on (its width d:
    the head is rescaled; its epochs and images: re-check), else None. ``data``: the training set,
    where the caller holds it (counted when ``data.n_train`` is unset; else loaded to count it)."""
    from geohead.heads import HeadSpec, read_found_on
    from geohead.training.model import build_backbone

    found = HeadSpec.load(head_file)
    proxy = read_found_on(head_file) or {}
    d = build_backbone(cfg).num_features
    lines = []
    if found.in_dim != d:
        lines.append(f"head: {head_file} was found on d={found.in_dim} features; this backbone gives d={d}, so its "
                     f"widths keep the same multiples of d: {found.describe()} -> {found.rescale(d).describe()}")
    epochs = proxy.get("verdict_epochs") or proxy.get("epochs")  # a verdict at its own schedule decided there
    width = proxy.get("verdict_d") or proxy.get("d")  # and one on a backbone of its own, at that width
    images = cfg.data.n_train
    if images is None and proxy.get("n_train") is not None:  # the whole training set: count it
        from geohead.training.model import training_data

        images = len(data if data is not None else training_data(cfg))
    differs = [axis for axis, theirs, ours in (("width", width, d), ("budget", epochs, cfg.optim.epochs),
                                             ("data", proxy.get("n_train"), images))
               if theirs is not None and ours is not None and float(ours) > 1.5 * float(theirs)]
    if differs:
        from geohead.search.ladder import findings

        measured = findings(cfg.objective)
        lines.append(f"head: the search decided on {proxy.get('backbone')} (d={proxy.get('d')}), {epochs or 0:.1f} "
                     f"epochs of {proxy.get('n_train', 0):,} images; this run is bigger on {', '.join(differs)}: "
                     "re-check the pick against the published head there (docs/search.md, \"Search small, train big\")"
                     + "".join(f"; the scale ladder measured {measured[a][1]}" for a in differs if a in measured))
    return "\n".join(lines) or None
