"""Augmentation orbits and invariance through the head (Chaudhry 2026, Sec. 5).

An *orbit* is the set of views of one image under a continuous augmentation family,
x ↦ T(x, θ) for θ in a sweep θ_1 < … < θ_P. Everything here is generic over callables, so any
backbone, data pipeline or augmentation plugs in:

    encode:    images (N, 3, H, W) → backbone features (N, d)  (the caller composes normalisation)
    head:      an ``nn.Module`` (N, d) → (N, k), evaluated with detached weights, BN in eval mode
    transform: (images, θ) → images, deterministic (e.g. ``geohead.data.orbits.rotate``)

:func:`orbit_invariance` reports, in backbone and head space:

* orbit spread (mean squared distance of a view to its orbit centre) and total spread (mean
  squared distance to the global mean); the default **compression** is width- and
  scale-invariant: (orbit/total in the backbone) / (orbit/total in the head), > 1 when the head
  shrinks orbits more than it shrinks the spread between images. The paper's formulas are given
  by name: ``paper_l2`` (orbit spread of L2-normalised features, backbone over head) and
  ``paper_var`` (mean per-dimension within-orbit variance, backbone over head; it carries a
  factor k/d from the widths — DESIGN.md, "Known pitfalls");
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
* the numerical rank of J_h·[v_1 … v_m] against rank[v_1 … v_m]: the Fisher-rank loss of
  Thm 5.3 (directions the head destroys and the backbone keeps).
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


# ---------------------------------------------------------------------- orbits
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
    lam = torch.linalg.eigvalsh(inv_sqrt @ sb @ inv_sqrt).clamp_min(0)
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


# ---------------------------------------------------------------------- tangents
def orbit_tangents(orbits: Orbits) -> tuple[Tensor, Tensor]:
    """Central-difference tangents of the backbone orbits at the interior sweep points.

    Returns (z, v), each (N·(P−2), d): base points z_{nj} and v_{nj} = (z_{n,j+1} − z_{n,j−1}) /
    (θ_{j+1} − θ_{j−1}) for j = 2 … P−1. Needs P ≥ 3.
    """
    z, p = orbits.backbone, orbits.params
    if z.shape[1] < 3:
        raise ValueError(f"tangents need at least 3 sweep values, got {z.shape[1]}")
    dp = (p[2:] - p[:-2]).to(z.dtype)
    if bool((dp == 0).any()):
        raise ValueError("the sweep has repeated parameter values; tangents need distinct neighbours")
    v = (z[:, 2:] - z[:, :-2]) / dp[None, :, None]
    base = z[:, 1:-1]
    d = z.shape[-1]
    return base.reshape(-1, d), v.reshape(-1, d)


@dataclasses.dataclass
class TangentInvariance:
    """How the head's Jacobian treats augmentation tangents.

    Attributes:
        tangent_gain: mean over tangents of ‖J_h v‖²/‖v‖².
        jacobian_gain: mean over base points of ‖J_h‖_F²/d (the gain of a random direction).
        invariance: mean over tangents of (‖J_h v‖²/‖v‖²) / (‖J_h‖_F²/d): 1 = the head treats
            tangents like any direction, → 0 = the head is invariant along them.
        killed_fraction: fraction of tangents with ‖J_h v‖ < rtol·‖v‖·sqrt(‖J_h‖_F²/d).
        rank_backbone: numerical rank r of [v_1 … v_m] (σ > rtol·σ_max): the dimension of the
            tangent span T (orthonormal basis Q, d × r).
        rank_head: numerical rank of the head's Fisher information on T, the r × r matrix
            F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q (the pullback metric averaged over the base
            points, restricted to T): eigenvalues above rtol²·mean(‖J_h‖_F²/d), i.e. tangent
            directions whose average gain is not below rtol² of a random direction's. By
            construction rank_head ≤ rank_backbone. (The rank of the pooled [J_h(z_m) v_m] is not
            used: with a different Jacobian at every point it can exceed rank_backbone.)
        fisher_rank_loss: rank_backbone − rank_head ≥ 0 (Thm 5.3): tangent directions the head's
            outputs carry no information about, on average over the data. (F_T is an average of
            per-point matrices of rank ≤ k, so a head narrower than r can still keep r directions
            when its Jacobian varies from point to point.)
        n_tangents, rtol, jacobian_exact (‖J_h‖_F² exact or by Hutchinson with n probes).
    """

    tangent_gain: float
    jacobian_gain: float
    invariance: float
    killed_fraction: float
    rank_backbone: int
    rank_head: int
    fisher_rank_loss: int
    n_tangents: int
    rtol: float
    jacobian_exact: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def tangent_invariance(
    head: nn.Module,
    z: Tensor,
    v: Tensor,
    *,
    rtol: float = 1e-3,
    num_probes: int = 16,
    exact: bool | None = None,
    bn_mode: str = "eval",
    generator: torch.Generator | None = None,
) -> TangentInvariance:
    """Head Jacobian along tangents v at base points z (both (M, d)).

    J_h v is exact (forward-mode ``torch.func.jvp``); ‖J_h(z_m)‖_F² is exact (d products) when
    ``exact`` or d ≤ ``num_probes``, else Hutchinson with ``num_probes`` Rademacher probes
    (E‖J u‖² = ‖J‖_F²), which is unbiased per point and averages over the M points. With
    ``bn_mode="eval"`` the head acts on each point separately, so these are per-point Jacobians.
    """
    if z.dim() != 2 or v.shape != z.shape:
        raise ValueError(f"z and v must both have shape (M, d); got {tuple(z.shape)} and {tuple(v.shape)}")
    if not (torch.isfinite(z).all() and torch.isfinite(v).all()):
        raise NonFiniteError("z or v contains non-finite values")
    dtype = z.dtype if z.is_floating_point() else torch.float32
    h = functional_module(head, dtype=dtype, device=z.device, bn_mode=bn_mode)
    m, d = z.shape
    _, jv = torch.func.jvp(h, (z,), (v.to(dtype),))
    exact = d <= num_probes if exact is None else exact
    if exact:
        jf = torch.zeros(m, dtype=torch.float64, device=z.device)
        for i in range(d):
            u = torch.zeros_like(z)
            u[:, i] = 1
            jf += torch.func.jvp(h, (z,), (u,))[1].to(torch.float64).pow(2).sum(1)
    else:
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        jf = torch.zeros(m, dtype=torch.float64, device=z.device)
        for _ in range(num_probes):
            u = (torch.randint(0, 2, (m, d), generator=g) * 2 - 1).to(device=z.device, dtype=dtype)
            jf += torch.func.jvp(h, (z,), (u,))[1].to(torch.float64).pow(2).sum(1)
        jf /= num_probes
    return summarise_tangents(v, jv, jf, d, rtol, bool(exact), lambda q: tangent_fisher(h, z, q.to(dtype)))


def summarise_tangents(v: Tensor, jv: Tensor, jf: Tensor, d: int, rtol: float, exact: bool,
                       fisher: Callable[[Tensor], Tensor]) -> TangentInvariance:
    """The :class:`TangentInvariance` of tangents v (M, d), their images J_h v (M, k), the
    per-point ‖J_h(z_m)‖_F² jf (M,) (exact or Hutchinson) and ``fisher(Q)`` -> F_T (r, r) for an
    orthonormal basis Q (d, r) of the tangent span (float64). Shared by
    :func:`tangent_invariance` and the search's batched screen.
    """
    v64, jv64 = v.to(torch.float64), jv.to(torch.float64)
    vn2 = v64.pow(2).sum(1)
    ok = vn2 > 0
    gain_t = jv64.pow(2).sum(1)[ok] / vn2[ok]
    gain_j = jf / d
    inv = gain_t / gain_j[ok].clamp_min(1e-300)
    rms_gain = math.sqrt(float(gain_j.mean()))
    killed = (gain_t.sqrt() < rtol * gain_j[ok].sqrt()).to(torch.float64)
    _, sv_b, wh = torch.linalg.svd(v64, full_matrices=False)
    smax = float(sv_b.max()) if sv_b.numel() else 0.0
    rank_b = int((sv_b > rtol * smax).sum()) if smax > 0 else 0
    rank_h = 0
    if rank_b > 0:
        evals = torch.linalg.eigvalsh(fisher(wh[:rank_b].T))
        rank_h = int((evals > rtol**2 * rms_gain**2).sum())
    return TangentInvariance(
        tangent_gain=float(gain_t.mean()) if gain_t.numel() else float("nan"),
        jacobian_gain=float(gain_j.mean()),
        invariance=float(inv.mean()) if inv.numel() else float("nan"),
        killed_fraction=float(killed.mean()) if killed.numel() else float("nan"),
        rank_backbone=rank_b,
        rank_head=rank_h,
        fisher_rank_loss=rank_b - rank_h,
        n_tangents=int(ok.sum()),
        rtol=rtol,
        jacobian_exact=exact,
    )


def tangent_fisher(h, z: Tensor, q: Tensor, chunk: int = 64) -> Tensor:
    """F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q, float64 (r, r), for base points z (M, d) and an
    orthonormal tangent basis q (d, r); forward-mode products, ``chunk`` points at a time."""
    m, r = z.shape[0], q.shape[1]
    fisher = torch.zeros(r, r, dtype=torch.float64, device=z.device)
    for i in range(0, m, chunk):
        zc = z[i:i + chunk]
        cols = [torch.func.jvp(h, (zc,), (q[:, j].expand_as(zc),))[1].to(torch.float64) for j in range(r)]
        jq = torch.stack(cols, dim=-1)  # (mc, k, r)
        fisher += torch.einsum("mkr,mks->rs", jq, jq)
    return fisher / m


# ---------------------------------------------------------------------- report
@dataclasses.dataclass
class InvarianceReport:
    """Orbits of one augmentation family through backbone and head.

    Attributes:
        params: the sweep; n_images; bn_mode.
        backbone, head: :class:`SpaceGeometry` of each space.
        compression: the default width-invariant factor ("relative", see :func:`compression`);
        compression_paper_l2, compression_paper_var: the paper's two formulas, by name.
        tangents: :class:`TangentInvariance` (None when the sweep has fewer than 3 values).
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
) -> InvarianceReport:
    """:class:`InvarianceReport` from already-built :class:`Orbits` (see :func:`orbit_invariance`)."""
    gb = space_geometry(orbits.backbone, orbits.labels, lidar_delta)
    gh = space_geometry(orbits.head, orbits.labels, lidar_delta)
    comp = compression(gb, gh)
    tang = None
    if orbits.backbone.shape[1] >= 3:
        z, v = orbit_tangents(orbits)
        tang = tangent_invariance(head, z, v, rtol=rtol, num_probes=num_probes, bn_mode=bn_mode, generator=generator)
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

    Returns: :class:`InvarianceReport`.
    """
    orbits = build_orbits(encode, head, images, transform, params, labels=labels, batch_size=batch_size, bn_mode=bn_mode)
    return invariance_from_orbits(
        orbits, head, rtol=rtol, num_probes=num_probes, lidar_delta=lidar_delta, bn_mode=bn_mode, generator=generator
    )


__all__ = [
    "InvarianceReport", "Orbits", "SpaceGeometry", "TangentInvariance", "build_orbits", "class_orbit_ratio",
    "compression", "invariance_from_orbits", "lidar", "orbit_curvature_paper", "orbit_invariance", "orbit_spread",
    "orbit_tangents", "orbit_turning", "space_geometry", "tangent_invariance", "total_spread",
]
