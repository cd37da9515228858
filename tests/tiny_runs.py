"""Tiny training runs shared by the export / diagnose / report tests (trained once per session).

``tiny_run(tmp_path_factory, recipe, backbone=None)`` trains ``geohead/recipes/<recipe>_shapes_cpu.toml``
for one or two steps on a few images (seconds on 2 cores) and returns the run folder.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TINY = [
    "data.n_train=64", "data.n_test=64", "optim.batch_size=16", "optim.max_steps=2", "probe.enabled=false",
    "track.log_every=1", "track.monitor_every=1", "track.progress=false", "head.spec.hidden_dim=64",
    "track.hessian_every=1", "track.hessian_samples=8", "track.hessian_iters=4",
]
_CACHE: dict[tuple, Path] = {}


def tiny_run(tmp_path_factory, recipe: str, backbone: str | None = None, extra: tuple[str, ...] = ()) -> Path:
    from geohead.training.config import load_recipe
    from geohead.training.loop import train

    key = (recipe, backbone, tuple(extra))
    if key not in _CACHE:
        out = tmp_path_factory.mktemp(f"run_{recipe}_{backbone or 'default'}")
        over = TINY + [f'out="{out}"'] + list(extra)
        if backbone:
            over.append(f'backbone.name="{backbone}"')
        train(load_recipe(ROOT / "geohead" / "recipes" / f"{recipe}_shapes_cpu.toml", over))
        _CACHE[key] = out
    return _CACHE[key]
