"""``geohead diagnose RUN_OR_CKPT``: the geometry report of a trained backbone + head."""
from __future__ import annotations

import json
from typing import Any

import click

from geohead.commands import fail, missing_source, warnings_to_stderr
from geohead.commands.foreign import foreign_flags, foreign_options, is_geohead_source, run_foreign


@click.command()
@click.argument("source", type=click.Path())
@click.option("--data", help="Dataset to measure on (shapes, cifar10, an .npz file or image folder); default: the run's, "
                                "shapes for a checkpoint trained elsewhere.")
@click.option("--data-test", help="Test source for the probes and monitors (default: --data's test split).")
@click.option("--data-root", help="Folder of torchvision's CIFAR files (default: $GEOHEAD_DATA or ~/.cache/geohead/data).")
@click.option("--json", "json_path", type=click.Path(dir_okay=False), help="Where to write the JSON report (default: RUN/diagnose.json, or CKPT.diagnose.json beside a checkpoint file).")
@click.option("--mode", type=click.Choice(["accurate", "fast"]), default="accurate", show_default=True,
              help="accurate: float64, converged Lanczos; fast: float32 screening budget.")
@click.option("--n-test", type=int, default=1000, show_default=True, help="Test images (monitors, probe test set).")
@click.option("--n-train", type=int, default=2000, show_default=True, help="Probe training images.")
@click.option("--orbit-images", type=int, default=64, show_default=True, help="Images per augmentation orbit family.")
@click.option("--tangent-orbits", type=int, default=8, show_default=True,
              help="Orbits whose tangents give the tangent invariance and Fisher rank (0: all; each costs a forward-mode product per direction).")
@click.option("--hessian-samples", type=int, default=32, show_default=True, help="Batch of the effective Hessian at real features.")
@click.option("--collapse-batch", type=int, default=8, show_default=True, help="Batch of the collapsed state.")
@click.option("--families", default="rotate,hue,saturation,blur,crop", show_default=True, help="Orbit families, comma-separated.")
@click.option("--no-probes", is_flag=True, help="Skip the guillotine probes.")
@click.option("--no-linear", is_flag=True, help="kNN probes only (no linear probes).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--device", default="cpu", show_default=True, help="cpu, cuda, cuda:K or auto (a GPU when there is one).")
@foreign_options
def diagnose(source: str, data: str | None, data_test: str | None, data_root: str | None, json_path: str | None, mode: str,
             n_test: int, n_train: int, orbit_images: int, tangent_orbits: int, hessian_samples: int, collapse_batch: int, families: str,
             no_probes: bool, no_linear: bool, seed: int, device: str, **foreign: Any) -> None:
    """Measure the geometry of a trained backbone + head, geohead's or yours: curvature at collapse,
    H_eff at real features, orbit compression per augmentation, collapse monitors and guillotine
    probes of the backbone + head in SOURCE: a geohead run folder or
    checkpoint, or a checkpoint trained anywhere (Lightning .ckpt, torch state_dict, lightly,
    solo-learn, official DINO / VICReg / Barlow Twins; the head is rebuilt as a GeometricHead
    and checked against the original's forward), or an export folder written with --with-head.

    Prints tables and writes the JSON report (the numbers the library calls return).
    """
    from pathlib import Path

    from geohead.training.checkpoint import CheckpointError
    from geohead.diagnose import DiagnoseSettings, default_json_path, diagnose as run, format_table
    from geohead.io import atomic_write_text, folder_problem

    missing_source(source, "a geohead run folder or its last.safetensors, an export folder written with --with-head, or a "
                           "checkpoint trained elsewhere (Lightning .ckpt, a torch .pt/.pth state_dict, .safetensors)")
    settings = DiagnoseSettings(
        data=data, data_test=data_test, data_root=data_root, n_test=n_test, n_train=n_train, n_orbit_images=orbit_images, tangent_orbits=tangent_orbits or None,
        hessian_samples=hessian_samples, collapse_batch=collapse_batch, mode=mode,
        families=tuple(f.strip() for f in families.split(",") if f.strip()), probes=not no_probes, linear=not no_linear,
        seed=seed, device=device,
    )
    out = Path(json_path).expanduser() if json_path else default_json_path(source)  # as folder_problem reads it
    problem = "it is a folder" if out.is_dir() else folder_problem(out.parent)
    if problem:
        fail(f"--json {str(out)!r} cannot be written: {problem}; give another --json path")
    from geohead.diagnose.progress import stage_sink

    line = lambda msg: click.echo(f"diagnose: {msg} ...", err=True)  # noqa: E731
    progress = stage_sink("auto", len(settings.families), settings.probes) if _tty() else line
    with warnings_to_stderr(getattr(progress, "write", None)):
        try:
            settings.validate()
            if is_geohead_source(source):
                if any(v for v in foreign.values()):
                    fail(f"{', '.join(foreign_flags(foreign))} describe{'s' if len(foreign_flags(foreign)) == 1 else ''} a checkpoint trained elsewhere; {source!r} is a geohead "
                         "run, which records its architecture, method and normalisation itself: drop them")
                report = run(source, settings, progress=progress)
            else:
                report = run_foreign(source, data, data_test, data_root, settings, progress, **foreign)
        except (CheckpointError, ValueError, FileNotFoundError) as exc:
            if hasattr(progress, "close"):
                progress.close()
            fail(str(exc))
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(report, indent=2) + "\n")
    click.echo(format_table(report))
    click.echo(f"\nJSON report: {out}")


def _tty() -> bool:
    """Whether stderr is a terminal (a progress bar with ETA there, one line a stage elsewhere)."""
    import sys

    return sys.stderr.isatty()
