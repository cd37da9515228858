"""Augmentation orbits and invariance through the head, as one report (Chaudhry 2026, Sec. 5).

Orbits, ``encode``/``head``/``transform`` and the spreads are as in :mod:`geohead.geometry.orbits`.

:func:`orbit_invariance` reports, in backbone and head space:

* orbit spread (mean squared distance of a view to its orbit centre) and total spread (mean
  squared distance to the global mean); the default **compression** is width- and
  scale-invariant: (orbit/total in the backbone) / (orbit/total in the head), > 1 when the head
  shrinks orbits more than it shrinks the spread between images. The paper's formulas are given
  by name: ``paper_l2`` (orbit spread of L2-normalised features, backbone over head) and
  ``paper_var`` (mean per-dimension within-orbit variance, backbone over head; it carries a
  factor k/d from the widths — docs/theory.md, "Orbit compression");
* the class/orbit distance ratio (mean distance between class centroids over the RMS orbit
  radius; with no labels every orbit is its own class);
* orbit curvature from second differences along the sweep: the mean turning angle between
  successive chords (radians, scale-free) and the paper's mean ‖s_{j+1} − 2s_j + s_{j−1}‖ on
  L2-normalised features;
* LiDAR (Thilak et al. 2023) with orbits as surrogate classes;
* tangent invariance: for orbit tangents v (central differences along the sweep, in backbone
  space), ‖J_h v‖²/‖v‖² normalised by ‖J_h‖_F²/d, the same gain for a random direction (< 1:
  the head squeezes augmentation directions more than average; 0: the pullback metric is
  singular along them, vᵀ G v = 0, Prop. 5.2);
* the numerical rank of the head's Fisher information on the tangent span against the span's
  dimension rank[v_1 … v_m]: the Fisher-rank loss of Thm 5.3 (directions the head destroys and
  the backbone keeps);
* optionally (``local=True``) the local invariance ratio and the soft tangent-Fisher rank within
  the backbone's effective span (:mod:`geohead.geometry.local_invariance`).

The parts live in :mod:`geohead.geometry.orbits` (orbits, per-space geometry, compression),
:mod:`geohead.geometry.tangents` (tangents, tangent invariance, Fisher rank) and
:mod:`geohead.geometry.local_invariance` (local invariance); this module composes them into an
:class:`InvarianceReport`. The search's orbit criteria are this report per family.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import torch
from torch import Tensor, nn

from geohead.geometry.orbits import (
    Encode, Orbits, SpaceGeometry, Transform, build_orbits, compression, space_geometry,
)
from geohead.geometry.local_invariance import LocalInvariance, between_image_directions, effective_span, local_invariance
from geohead.geometry.tangents import TangentInvariance, orbit_tangents, tangent_invariance


@dataclasses.dataclass
class InvarianceReport:
    """Orbits of one augmentation family through backbone and head.

    Attributes:
        params: the sweep; n_images; bn_mode.
        backbone, head: :class:`SpaceGeometry` of each space.
        compression: the default width-invariant factor ("relative", see :func:`compression`);
        compression_paper_l2, compression_paper_var: the paper's two formulas, by name.
        tangents: :class:`TangentInvariance` (None when the sweep has fewer than 3 values).
        local: :class:`~geohead.geometry.local_invariance.LocalInvariance` (None unless asked for, or with
            fewer than 2 tangent orbits).
    """

    params: list[float]
    n_images: int
    bn_mode: str
    backbone: SpaceGeometry
    head: SpaceGeometry
    compression: float
    compression_paper_l2: float
    compression_paper_var: float
    tangents: TangentInvariance | None
    local: LocalInvariance | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "n_images": self.n_images,
            "bn_mode": self.bn_mode,
            "backbone": self.backbone.to_dict(),
            "head": self.head.to_dict(),
            "compression": self.compression,
            "compression_paper_l2": self.compression_paper_l2,
            "compression_paper_var": self.compression_paper_var,
            "tangents": self.tangents.to_dict() if self.tangents is not None else None,
            "local": dataclasses.asdict(self.local) if self.local is not None else None,
        }


def invariance_from_orbits(
    orbits: Orbits,
    head: nn.Module,
    *,
    rtol: float = 1e-3,
    num_probes: int = 16,
    lidar_delta: float = 1e-4,
    bn_mode: str = "eval",
    generator: torch.Generator | None = None,
    tangent_orbits: int | None = None,
    local: bool = False,
) -> InvarianceReport:
    """:class:`InvarianceReport` from already-built :class:`Orbits` (see :func:`orbit_invariance`)."""
    gb = space_geometry(orbits.backbone, orbits.labels, lidar_delta)
    gh = space_geometry(orbits.head, orbits.labels, lidar_delta)
    comp = compression(gb, gh)
    few = orbits if tangent_orbits is None else Orbits(orbits.params, orbits.backbone[:tangent_orbits],
                                                       orbits.head[:tangent_orbits])
    tang = loc = None
    if few.backbone.shape[1] >= 3:
        z, v = orbit_tangents(few)
        tang = tangent_invariance(head, z, v, rtol=rtol, num_probes=num_probes, bn_mode=bn_mode, generator=generator)
        if local and few.backbone.shape[0] >= 2:  # gains within the span of all the views
            loc = local_invariance(head, z, v, between_image_directions(few), rtol=rtol, bn_mode=bn_mode,
                                   span=effective_span(orbits.backbone.flatten(0, 1)))
    return InvarianceReport(
        params=orbits.params.tolist(),
        n_images=int(orbits.backbone.shape[0]),
        bn_mode=bn_mode,
        backbone=gb,
        head=gh,
        compression=comp["relative"],
        compression_paper_l2=comp["paper_l2"],
        compression_paper_var=comp["paper_var"],
        tangents=tang,
        local=loc,
    )


def orbit_invariance(
    encode: Encode,
    head: nn.Module,
    images: Tensor,
    transform: Transform,
    params: Sequence[float] | Tensor,
    *,
    labels: Tensor | None = None,
    rtol: float = 1e-3,
    num_probes: int = 16,
    lidar_delta: float = 1e-4,
    batch_size: int = 256,
    bn_mode: str = "eval",
    generator: torch.Generator | None = None,
    tangent_orbits: int | None = None,
    local: bool = False,
) -> InvarianceReport:
    """Orbits of ``images`` under ``transform`` over the sweep ``params``, through backbone and head.

    Args:
        encode: images (N, 3, H, W) → features (N, d) (compose normalisation into it).
        head: the projection head (N, d) → (N, k); not modified.
        images: (N, C, H, W) float.
        transform: deterministic (images, θ) → images.
        params: the sweep θ_1 … θ_P in path order (P ≥ 3 for curvature and tangents).
        labels: (N,) class labels for the class/orbit ratio (optional).
        rtol: relative tolerance of the numerical ranks and of "killed" tangents.
        num_probes: Hutchinson probes for ‖J_h‖_F² (exact when d ≤ num_probes).
        lidar_delta: LiDAR's δ.
        bn_mode: BatchNorm mode of the head (``"eval"`` default).
        tangent_orbits: tangents (and local invariance) from the first this many orbits only
            (the Fisher rank costs one forward-mode product per tangent direction); None: all.
        local: also the local invariance ratio and soft Fisher rank (``report.local``).

    Returns: :class:`InvarianceReport`.
    """
    orbits = build_orbits(encode, head, images, transform, params, labels=labels, batch_size=batch_size, bn_mode=bn_mode)
    return invariance_from_orbits(
        orbits, head, rtol=rtol, num_probes=num_probes, lidar_delta=lidar_delta, bn_mode=bn_mode, generator=generator,
        tangent_orbits=tangent_orbits, local=local,
    )


__all__ = ["InvarianceReport", "invariance_from_orbits", "orbit_invariance"]
