"""The training application: what ``geohead train`` runs, and what the search's trials reuse.

Modules, from the top down (each imports only those below it):
:mod:`~geohead.training.loop` (the loop, reads top to bottom),
:mod:`~geohead.training.tracker` (metrics.jsonl, one collapse record per log step) and
:mod:`~geohead.training.evaluate` (kNN, linear and guillotine probes),
:mod:`~geohead.training.model` (the run's backbone, head, predictor, teacher and data, built
once for ``train()`` and the search), :mod:`~geohead.training.optim` (optimiser, schedule),
:mod:`~geohead.training.config` (the recipe dataclasses and their checks), and
:mod:`~geohead.training.checkpoint` (the run folder's checkpoint format, which export reads).

``from geohead.training import train, TrainConfig, load_recipe``; importing the package loads
none of its modules until one of these is used (PEP 562).
"""
from __future__ import annotations

from geohead._lazy import lazy_attributes

__all__ = ["TrainConfig", "load_recipe", "train"]

#: Attributes loaded on first access, so that ``import geohead.training.checkpoint`` stays light.
_LAZY = {"train": "geohead.training.loop", "TrainConfig": "geohead.training.config",
         "load_recipe": "geohead.training.config"}

__getattr__ = lazy_attributes('geohead.training', globals(), _LAZY)
