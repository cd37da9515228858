"""Data: in-memory image sets, the built-in shapes dataset, loaders, on-device views, orbits.

* :class:`ImageData` — uint8 (N, 3, H, W) images, int64 labels, class names, optional factors.
* :func:`load_dataset` — "shapes", "cifar10", "cifar100", an .npz file or an image folder.
* :func:`make_shapes` — the procedural shapes dataset with recorded nuisance factors.
* :func:`make_view_fn` / :class:`Views` — per-sample random views of a uint8 batch, on its device.
* :data:`ORBIT_FAMILIES` — deterministic transforms ``fn(images, param)`` for the geometry code.
"""
from __future__ import annotations

from geohead.data.dataset import ImageData, channel_stats, normalisation_problem
from geohead.data.loaders import DATASET_NAMES, load_dataset
from geohead.data.orbits import ORBIT_FAMILIES, OrbitFamily
from geohead.data.shapes import FACTOR_NAMES, SHAPE_CLASSES, make_shapes, render_shapes
from geohead.data.view_recipes import RECIPES, ViewRecipe, ViewSpec
from geohead.data.views import Views, make_view_fn

__all__ = [
    "DATASET_NAMES", "FACTOR_NAMES", "ImageData", "ORBIT_FAMILIES", "OrbitFamily", "RECIPES",
    "SHAPE_CLASSES", "ViewRecipe", "ViewSpec", "Views", "channel_stats", "load_dataset",
    "make_shapes", "make_view_fn", "normalisation_problem", "render_shapes",
]
