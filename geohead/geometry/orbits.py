"""Augmentation orbits through backbone and head, and their geometry in each space (Chaudhry
2026, Sec. 5).

An *orbit* is the set of views of one image under a continuous augmentation family,
x ↦ T(x, θ) for θ in a sweep θ_1 < … < θ_P. Everything here is generic over callables, so any
backbone, data pipeline or augmentation plugs in:

    encode:    images (N, 3, H, W) → backbone features (N, d)  (the caller composes normalisation)
    head:      an ``nn.Module`` (N, d) → (N, k), evaluated with detached weights, BN in eval mode
    transform: (images, θ) → images, deterministic (e.g. ``geohead.data.orbits.rotate``)

:func:`build_orbits` encodes every view (:class:`Orbits`, points (N, P, D) per space);
:func:`space_geometry` measures one space: orbit spread (mean squared distance of a view to its
orbit centre), total spread (to the global mean), the class/orbit distance ratio, orbit curvature
(turning angle; the paper's second differences), LiDAR (Thilak et al. 2023) with orbits as
surrogate classes. :func:`compression` compares the two spaces: the default ``relative`` factor
is width- and scale-invariant, the paper's ``paper_l2`` and ``paper_var`` formulas are given by
name (``paper_var`` carries the width factor k/d: docs/theory.md, "Orbit compression").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from geohead.errors import NonFiniteError
from geohead.geometry.operators import functional_module

Encode = Callable[[Tensor], Tensor]
Transform = Callable[[Tensor, float], Tensor]


@dataclasses.dataclass
class Orbits:
    """Backbone and head representations of every view of every image.

    Attributes:
        params: (P,) the sweep θ_1 … θ_P (float64).
        backbone: (N, P, d) features z_{nj} = encode(T(x_n, θ_j)).
        head: (N, P, k) embeddings h(z_{nj}).
        labels: (N,) class labels, or None.
    """

    params: Tensor
    backbone: Tensor
    head: Tensor
    labels: Tensor | None = None


def _check_images(images: Tensor) -> None:
    if not isinstance(images, Tensor) or images.dim() != 4:
        raise ValueError(f"images must be a (N, C, H, W) float tensor, got shape {tuple(getattr(images, 'shape', ()))}")
    if not images.is_floating_point():
        raise ValueError(f"images must be floating point (scale uint8 images to [0, 1] first), got {images.dtype}")
    if images.shape[0] < 1:
        raise ValueError("images is empty")


def _encode(encode: Encode, x: Tensor, batch_size: int) -> Tensor:
    outs = []
    for i in range(0, x.shape[0], batch_size):
        z = encode(x[i:i + batch_size])
        if not isinstance(z, Tensor) or z.dim() != 2 or z.shape[0] != min(batch_size, x.shape[0] - i):
            raise ValueError(
                f"encode must map a batch of {min(batch_size, x.shape[0] - i)} images to features of shape "
                f"(N, d), got {tuple(getattr(z, 'shape', ()))}"
            )
        outs.append(z.detach())
    return torch.cat(outs)


@torch.no_grad()
def build_orbits(
    encode: Encode,
    head: nn.Module,
    images: Tensor,
    transform: Transform,
    params: Sequence[float] | Tensor,
    *,
    labels: Tensor | None = None,
    batch_size: int = 256,
    bn_mode: str = "eval",
) -> Orbits:
    """Encode every view T(x_n, θ_j) and pass it through the head (BN in ``bn_mode``).

    Args:
        encode: images → features (N, d); called on chunks of ``batch_size`` images.
        head: (N, d) → (N, k); its weights and buffers are not modified.
        images: (N, C, H, W) floating point.
        transform: (images, θ) → images of the same batch size.
        params: the sweep, P ≥ 1 values in the order of the orbit path.
        labels: (N,) integer class labels (optional).
    """
    _check_images(images)
    p = torch.as_tensor(params, dtype=torch.float64).reshape(-1)
    if p.numel() < 1:
        raise ValueError("params must contain at least one augmentation parameter")
    if labels is not None and (labels.dim() != 1 or labels.shape[0] != images.shape[0]):
        raise ValueError(f"labels must have shape ({images.shape[0]},), got {tuple(labels.shape)}")
    zs = []
    for theta in p.tolist():
        xt = transform(images, theta)
        if not isinstance(xt, Tensor) or xt.shape[0] != images.shape[0]:
            raise ValueError(f"transform(images, {theta}) must return a batch of {images.shape[0]} images, got {tuple(getattr(xt, 'shape', ()))}")
        zs.append(_encode(encode, xt, batch_size))
    z = torch.stack(zs, 1)  # (N, P, d)
    if not torch.isfinite(z).all():
        raise NonFiniteError("encode produced non-finite features")
    h = functional_module(head, dtype=z.dtype, device=z.device, bn_mode=bn_mode)
    n, P, d = z.shape
    flat = z.reshape(n * P, d)
    e = torch.cat([h(flat[i:i + batch_size]) for i in range(0, n * P, batch_size)]) if bn_mode == "eval" else h(flat)
    return Orbits(params=p, backbone=z, head=e.reshape(n, P, -1), labels=labels)


# ---------------------------------------------------------------------- per-space geometry
def orbit_spread(points: Tensor) -> float:
    """Mean over orbits and views of ‖s_{nj} − s̄_n‖² for points (N, P, D)."""
    x = points.to(torch.float64)
    return float((x - x.mean(1, keepdim=True)).pow(2).sum(-1).mean())


def total_spread(points: Tensor) -> float:
    """Mean over all N·P points of ‖s − s̄‖² (s̄ the global mean)."""
    x = points.to(torch.float64).reshape(-1, points.shape[-1])
    return float((x - x.mean(0)).pow(2).sum(-1).mean())


def class_orbit_ratio(points: Tensor, labels: Tensor | None = None) -> float:
    """Mean distance between class centroids / RMS orbit radius (scale-free).

    Class centroids are means of orbit centres per label (each orbit its own class when
    ``labels`` is None); the RMS orbit radius is sqrt(orbit spread).
    """
    x = points.to(torch.float64)
    centres = x.mean(1)  # (N, D)
    if labels is not None:
        classes = labels.unique()
        centres = torch.stack([centres[labels == c].mean(0) for c in classes])
    if centres.shape[0] < 2:
        return float("nan")
    dist = torch.cdist(centres, centres)
    c = centres.shape[0]
    inter = float(dist.sum() / (c * (c - 1)))
    radius = math.sqrt(orbit_spread(points))
    return inter / radius if radius > 0 else float("inf")


def orbit_turning(points: Tensor) -> float:
    """Mean exterior angle (radians) between successive chords s_{j+1} − s_j along each orbit.

    A straight orbit gives 0; a circle sampled every Δθ gives ≈ Δθ whatever its radius. Needs
    P ≥ 3; chords of zero length are skipped.
    """
    if points.shape[1] < 3:
        return float("nan")
    x = points.to(torch.float64)
    chords = x[:, 1:] - x[:, :-1]
    a, b = chords[:, :-1], chords[:, 1:]
    na, nb = a.norm(dim=-1), b.norm(dim=-1)
    ok = (na > 0) & (nb > 0)
    if not bool(ok.any()):
        return float("nan")
    cos = ((a * b).sum(-1) / (na * nb).clamp_min(1e-300)).clamp(-1, 1)
    return float(torch.arccos(cos)[ok].mean())


def orbit_curvature_paper(points: Tensor) -> float:
    """The paper's curvature: mean over interior views of ‖ŝ_{j+1} − 2ŝ_j + ŝ_{j−1}‖ on
    L2-normalised features (no division by the parameter step). Needs P ≥ 3."""
    if points.shape[1] < 3:
        return float("nan")
    x = F.normalize(points.to(torch.float64), dim=-1)
    return float((x[:, 2:] - 2 * x[:, 1:-1] + x[:, :-2]).norm(dim=-1).mean())


def lidar(points: Tensor, delta: float = 1e-4, eps: float = 1e-7) -> float:
    """LiDAR (Thilak et al. 2023) with each orbit a surrogate class: exp(entropy) of the
    normalised eigenvalues of Σ_w^{-1/2} Σ_b Σ_w^{-1/2}, with Σ_b the covariance of the orbit
    centres, Σ_w the mean within-orbit covariance + δI, p_i = λ_i/Σλ + ε.

    Computed exactly in the span of the data (both scatter matrices live there; outside it the
    eigenvalues are 0 and each contributes −ε log ε), so wide heads cost O((N·P)²·D).
    ``delta`` is absolute, as in the paper (so LiDAR depends on the features' scale).
    """
    x = points.to(torch.float64)
    n, P, D = x.shape
    if n < 2:
        return float("nan")
    mu_c = x.mean(1)  # (N, D)
    mu = mu_c.mean(0)
    within = (x - mu_c[:, None]).reshape(n * P, D)
    between = mu_c - mu
    basis_src = torch.cat([within, between])
    u, s, _ = torch.linalg.svd(basis_src.T, full_matrices=False)
    r = int((s > s.max() * max(basis_src.shape) * torch.finfo(torch.float64).eps).sum()) if s.numel() and s.max() > 0 else 0
    if r == 0:
        return float("nan")
    u = u[:, :r]
    w = within @ u
    b = between @ u
    sw = w.T @ w / (n * P) + delta * torch.eye(r, dtype=torch.float64)
    sb = b.T @ b / n
    ew, vw = torch.linalg.eigh(sw)
    inv_sqrt = vw @ torch.diag(ew.rsqrt()) @ vw.T
    m = inv_sqrt @ sb @ inv_sqrt
    lam = torch.linalg.eigvalsh((m + m.T) / 2).clamp_min(0)  # symmetric to rounding: LAPACK may not converge otherwise
    total = float(lam.sum())
    if total == 0:
        return float("nan")
    p = lam / total + eps
    ent = float(-(p * p.log()).sum()) + (D - r) * (-eps * math.log(eps))
    return math.exp(ent)


@dataclasses.dataclass
class SpaceGeometry:
    """Orbit geometry in one space (backbone or head).

    Attributes:
        dim: width of the space.
        orbit_spread, total_spread: mean squared distances to orbit centres / to the global mean.
        relative_spread: orbit_spread / total_spread (fraction of the spread inside orbits).
        orbit_spread_l2: orbit spread of L2-normalised points (for ``paper_l2``).
        class_orbit_ratio: mean distance between class centroids / RMS orbit radius.
        turning: mean turning angle along orbits (radians); curvature_paper: the paper's ‖Δ²ŝ‖.
        lidar: LiDAR with orbits as classes.
    """

    dim: int
    orbit_spread: float
    total_spread: float
    relative_spread: float
    orbit_spread_l2: float
    class_orbit_ratio: float
    turning: float
    curvature_paper: float
    lidar: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def space_geometry(points: Tensor, labels: Tensor | None = None, lidar_delta: float = 1e-4) -> SpaceGeometry:
    """All per-space orbit numbers for points (N, P, D)."""
    if points.dim() != 3:
        raise ValueError(f"points must have shape (N, P, D), got {tuple(points.shape)}")
    o, t = orbit_spread(points), total_spread(points)
    return SpaceGeometry(
        dim=int(points.shape[-1]),
        orbit_spread=o,
        total_spread=t,
        relative_spread=o / t if t > 0 else float("nan"),
        orbit_spread_l2=orbit_spread(F.normalize(points.to(torch.float64), dim=-1)),
        class_orbit_ratio=class_orbit_ratio(points, labels),
        turning=orbit_turning(points),
        curvature_paper=orbit_curvature_paper(points),
        lidar=lidar(points, delta=lidar_delta),
    )


def _ratio(a: float, b: float) -> float:
    if b == 0:
        return float("inf") if a > 0 else float("nan")
    return a / b


def compression(backbone: SpaceGeometry, head: SpaceGeometry) -> dict[str, float]:
    """Orbit compression, backbone over head, by three formulas.

    * ``relative`` (default): (orbit/total)_backbone / (orbit/total)_head — invariant to the
      widths and scales of the two spaces;
    * ``paper_l2``: orbit spread of L2-normalised features, backbone / head;
    * ``paper_var``: mean per-dimension within-orbit variance, backbone / head
      = (orbit_z/d)/(orbit_h/k): the raw-variance ratio times k/d.
    """
    return {
        "relative": _ratio(backbone.relative_spread, head.relative_spread),
        "paper_l2": _ratio(backbone.orbit_spread_l2, head.orbit_spread_l2),
        "paper_var": _ratio(backbone.orbit_spread / backbone.dim, head.orbit_spread / head.dim),
    }


__all__ = [
    "Encode", "Orbits", "SpaceGeometry", "Transform", "build_orbits", "class_orbit_ratio", "compression", "lidar",
    "orbit_curvature_paper", "orbit_spread", "orbit_turning", "space_geometry", "total_spread",
]
