"""SSL objectives by name: ``get_objective("barlow")``.

Each objective is one module: its loss on the embeddings of two (or more) views, the original
paper's default hyper-parameters, what else the method needs (predictor, EMA teacher, centre)
and its collapsed state for the geometry code (see :class:`~geohead.objectives.base.Objective`).
"""
from __future__ import annotations

import inspect
from typing import Any

from geohead.objectives.barlow import BarlowTwins
from geohead.objectives.base import CollapsedState, Objective
from geohead.objectives.byol import BYOL
from geohead.objectives.dino import DINO
from geohead.objectives.ema import cosine_momentum, ema_update_, make_teacher
from geohead.objectives.simclr import SimCLR
from geohead.objectives.simsiam import SimSiam
from geohead.objectives.vicreg import VICReg

OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (SimCLR, BYOL, SimSiam, BarlowTwins, VICReg, DINO)
}


def get_objective(name: str, **kwargs: Any) -> Objective:
    """Build the registered objective ``name`` with keyword hyper-parameters.

    Raises ``ValueError`` naming the registered objectives for an unknown name, and the valid
    hyper-parameters for an unknown keyword.
    """
    key = str(name).lower()
    if key not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; registered objectives are {sorted(OBJECTIVES)}")
    cls = OBJECTIVES[key]
    params = [p for p in inspect.signature(cls.__init__).parameters if p != "self"]
    bad = sorted(set(kwargs) - set(params))
    if bad:
        raise ValueError(f"objective {key!r} has no hyper-parameter(s) {bad}; valid ones are {params}")
    return cls(**kwargs)


def objective_for_head(name: str, args: dict[str, Any], head_out_dim: int) -> Objective:
    """The objective ``name`` with ``args`` completed for a head of output width ``head_out_dim``
    (``args_for_head``: DINO's prototypes), after ``check_out_dim`` refused a width its loss cannot
    take; every ``ValueError`` before anything is allocated (a checkpoint from elsewhere included)."""
    key = str(name).lower()
    if key not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; registered objectives are {sorted(OBJECTIVES)}")
    OBJECTIVES[key].check_out_dim(head_out_dim)
    return get_objective(key, **OBJECTIVES[key].args_for_head(args, head_out_dim))


__all__ = [
    "OBJECTIVES", "Objective", "CollapsedState", "get_objective", "objective_for_head",
    "SimCLR", "BYOL", "SimSiam", "BarlowTwins", "VICReg", "DINO",
    "cosine_momentum", "ema_update_", "make_teacher",
]
