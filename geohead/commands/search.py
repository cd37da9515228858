"""``geohead search``: design a projection head with Optuna from label-free geometric criteria."""
from __future__ import annotations

import sys

import click

from geohead.commands import fail


def _timeout(value: str | None) -> float | None:
    """``480``, ``8m``, ``1.5h``, ``0``/``none`` (no limit) -> seconds or None."""
    if value is None:
        return None
    text = value.strip().lower()
    if text in ("0", "none", "off", ""):
        return None
    scale = {"s": 1, "m": 60, "h": 3600}.get(text[-1], None)
    num = text[:-1] if scale else text
    try:
        seconds = float(num) * (scale or 1)
    except ValueError:
        fail(f"--timeout {value!r} is not a duration; write seconds (480), minutes (8m), hours (1.5h) or 0 for no limit")
    if seconds < 0:
        fail(f"--timeout {value!r} is negative; write a positive duration or 0 for no limit")
    return seconds or None


def _workers(value: str) -> int | str:
    """``auto`` or a positive integer (checked by :meth:`SearchConfig.validate`)."""
    text = value.strip().lower()
    if text == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        fail(f"--workers {value!r} is not a number; write a positive integer or auto")


@click.command()
@click.option("--objective", default="barlow", show_default=True, help="SSL objective: simclr, byol, simsiam, barlow, vicreg, dino.")
@click.option("--data", default="shapes", show_default=True, help="Training data: shapes (built in), cifar10, cifar100, an .npz file or an image folder.")
@click.option("--test", "--data-test", "test", default=None, help="Probe test data (default: the built-in dataset's test split, or a held-out part of --data).")
@click.option("--data-root", default=None, help="Folder of torchvision's CIFAR files (default: $GEOHEAD_DATA or ~/.cache/geohead/data).")
@click.option("--download", is_flag=True, help="Let torchvision download CIFAR into --data-root (needs internet).")
@click.option("--n-train", type=int, default=None, help="Training images (default: the dataset's default / all).")
@click.option("--img-size", type=int, default=32, show_default=True)
@click.option("--backbone", default=None, help="Backbone name (default: the small CPU default resnet18_w16).")
@click.option("--min-steps", type=int, default=None, help="Steps every trained head gets before successive halving first judges it (default 100).")
@click.option("--max-steps", type=int, default=None, help="Steps of a head that survives every rung; one cosine schedule over them (default 3 x --min-steps).")
@click.option("--reduction-factor", type=int, default=3, show_default=True, help="Successive halving keeps the best 1/r at each rung (rungs at min-steps x r^k).")
@click.option("--steps", type=int, default=None, help="A fixed budget: --min-steps = --max-steps = STEPS (no successive halving).")
@click.option("--batch-size", type=int, default=256, show_default=True)
@click.option("--trials", type=int, default=100, show_default=True, help="Distinct heads the study should measure (a rerun resumes up to this; a repeat of a measured head does not count); on CPU the --timeout usually ends the search first.")
@click.option("--timeout", default="390", show_default=True, help="A hard limit (seconds, or 8m / 1.5h; 0 = no limit): no trial starts after it, and the trial in flight stops at its next epoch end, recorded as pruned; the verdict's confirmation runs (two per --confirm-seeds) follow.")
@click.option("--workers", default="1", show_default=True, help="Local worker processes sharing the storage, each with its share of the CPU cores (or its own GPU); auto: one per GPU, or on CPU min(4, cores).")
@click.option("--storage", default=None, help="Optuna storage: sqlite:///file.db (default: OUT/study.db), postgresql://user@host/db, or a journal file (journal:PATH or *.log).")
@click.option("--study", "study", default=None, help="Study name (default: objective-data-backbone); an existing study is resumed.")
@click.option("--out", default=None, help="Output folder (default: runs/search_<objective>).")
@click.option("--seed", type=int, default=0, show_default=True, help="Common seed of every trial (backbone init, batches, views).")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda or cuda:K.")
@click.option("--score", type=click.Choice(["theory", "geometry", "knn"]), default="theory", show_default=True,
              help="What Optuna maximises: a label-free score (theory: RankMe + H_eff conditioning + tangent-Fisher effective rank; geometry: RankMe alone; docs/search.md), or kNN accuracy (needs labels).")
@click.option("--multi", is_flag=True, help="NSGA-II over five label-free criteria: rankme, uniformity, invariance, fisher, conditioning (no pruning).")
@click.option("--sampler", type=click.Choice(["tpe", "random", "nsga2"]), default=None, help="Optuna sampler (default: tpe; nsga2 with --multi).")
@click.option("--fix", multiple=True, metavar="KEY=VALUE", help="Fix a head dimension, e.g. --fix activation=silu.")
@click.option("--range", "ranges", multiple=True, metavar="KEY=LO:HI|a,b", help="Narrow a dimension, e.g. --range depth=2:3 or --range norm=batch,layer.")
@click.option("--set", "overrides", multiple=True, metavar="KEY=VALUE", help="Override the training config, e.g. --set optim.lr=0.1.")
@click.option("--probe-train", type=int, default=5000, show_default=True, help="Images whose features train the kNN probe.")
@click.option("--probe-test", type=int, default=2000, show_default=True, help="Images the kNN probe is tested on.")
@click.option("--no-prune", is_flag=True, help="Train every candidate for --max-steps (no screen, no successive halving).")
@click.option("--no-escape", is_flag=True, help="Keep heads that cannot escape collapse (the escape constraint off; successive halving stays).")
@click.option("--heartbeat", type=int, default=20, show_default=True, help="Seconds between heartbeats of a running trial (RDB storages).")
@click.option("--keep-checkpoints", is_flag=True, help="Keep every trial's checkpoint (last.safetensors).")
@click.option("--no-progress", is_flag=True, help="No progress bar over the study.")
@click.option("--confirm-seeds", type=int, default=1, show_default=True, help="Fresh seeds (--seed + 1, + 2, ...; at most 100) at which the verdict re-trains the pick and the published head (0: no verdict runs). Confirmation runs are stored: rerun with more, and --trials set to the heads the study holds, to train only the new seeds.")
@click.option("--confirm-epochs", type=int, default=None, help="Train the verdict's runs this many epochs of the training images (1 to 100,000; default: the trials' --max-steps): the schedule you will train with, as a head's margin can turn with training length (docs/search.md). Needs --confirm-seeds 2 or more; the runs checkpoint and resume.")
@click.option("--confirm-backbone", default=None, help="Train the verdict's runs on this backbone (default: the search's), both heads rescaled to its d: the backbone you will train, as a head's margin can turn with width (docs/search.md). Needs --confirm-seeds 2 or more; the runs checkpoint and resume.")
def search(objective: str, data: str, test: str | None, data_root: str | None, download: bool, n_train: int | None, img_size: int, backbone: str | None,
           min_steps: int | None, max_steps: int | None, reduction_factor: int, steps: int | None, batch_size: int,
           trials: int, timeout: str, workers: int, storage: str | None, study: str | None,
           out: str | None, seed: int, device: str, score: str, multi: bool, sampler: str | None, fix: tuple[str, ...],
           ranges: tuple[str, ...], overrides: tuple[str, ...], probe_train: int, probe_test: int, no_prune: bool, no_escape: bool,
           heartbeat: int, keep_checkpoints: bool, no_progress: bool, confirm_seeds: int,
           confirm_epochs: int | None, confirm_backbone: str | None) -> None:
    """Design a projection head for --objective on your backbone and data.

    Each trial screens a candidate head at init (escape curvature at collapse where Thm 4.1's
    premise holds, H_eff conditioning, Jacobian rank on augmentation tangents), trains it under
    successive halving (--min-steps to --max-steps), and scores it by label-free criteria;
    backbone kNN accuracy is recorded as ground truth. Writes best_head.json, trials.csv,
    rungs.csv, search.json, PNG plots and prints the top heads with the Spearman correlation
    between the label-free score and kNN accuracy, and the optuna-dashboard command that browses
    the study. Every study also measures the method's published head; the search ends with a
    verdict: the pick and the published head re-trained at --confirm-seeds fresh seeds, and the
    published head goes to best_head.json when the pick's margin is within the noise (the pick
    is in pick_head.json). Every input is checked before anything is written; rerunning resumes
    the study.
    """
    from geohead.search import SearchConfig, SearchError, SpaceError, run_search

    if steps is not None and min_steps is not None and max_steps is not None:
        fail(f"--steps {steps} fixes both --min-steps and --max-steps; give --steps alone or --min-steps/--max-steps")
    cfg = SearchConfig(
        objective=objective, out=out, data=data, test=test, data_root=data_root, download=download, n_train=n_train, img_size=img_size, backbone=backbone,
        min_steps=min_steps, max_steps=max_steps, reduction_factor=reduction_factor, steps=steps, batch_size=batch_size, trials=trials, timeout=_timeout(timeout), workers=_workers(workers),
        storage=storage, study=study, seed=seed, device=device, score=score, multi=multi, sampler=sampler,
        fix=tuple(fix), ranges=tuple(ranges), overrides=tuple(overrides), probe_train=probe_train,
        probe_test=probe_test, prune=not no_prune, escape=not no_escape, heartbeat=heartbeat, keep_checkpoints=keep_checkpoints,
        progress=not no_progress, confirm_seeds=confirm_seeds, confirm_epochs=confirm_epochs,
        confirm_backbone=confirm_backbone,
    )
    try:
        cfg.validate()
        result = run_search(cfg)
    except (SearchError, SpaceError) as exc:
        fail(str(exc))
    except KeyboardInterrupt:  # run_search said it in one line; no traceback
        sys.exit(130)
    click.echo(result.table)
    files = ["best_head.json", "pick_head.json", "trials.csv", "rungs.csv", "search.json", *result.summary.get("plots", [])]
    written = [f for f in files if (result.out_dir / f).is_file()]
    click.echo(f"\noutputs in {result.out_dir}: " + ", ".join(written))
    if not (result.out_dir / "best_head.json").is_file():
        click.echo("note: no trial completed, so there is no best_head.json; give the search more time (--timeout) "
                   "or fewer steps (--min-steps/--max-steps)", err=True)
    click.echo(f"browse the study (pip install optuna-dashboard):\n  {result.dashboard}")
