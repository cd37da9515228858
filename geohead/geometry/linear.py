"""Linear heads as implicit subspace whitening (Chaudhry 2026, Thm 3.1 and Prop. 3.3).

A linear head e = W z (W: k × d) induces the Mahalanobis metric WᵀW on the backbone space:
‖e − e'‖² = (z − z')ᵀ WᵀW (z − z'). Thm 3.1: a linear head can make the embedding covariance
W Σ_Z Wᵀ isotropic on its range — it whitens one subspace — but, being global, it cannot flatten
a loss whose curvature varies along the data (Prop. 3.3). :func:`linear_head_geometry` measures
how far W Σ_Z Wᵀ is from isotropic on its range against the same number for Σ_Z itself.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn

from geohead.errors import NonFiniteError


def linear_weight(head: nn.Module | Tensor) -> Tensor:
    """The (k, d) matrix of a linear head, in float64.

    Accepts a (k, d) tensor, an ``nn.Linear``, or a depth-1 :class:`~geohead.heads.GeometricHead`
    without prototypes whose output norm is absent or BatchNorm (folded in with its running
    statistics: eval mode, diag(γ/√(σ² + ε)) W). A LayerNorm output is not linear: ``ValueError``.
    """
    if isinstance(head, Tensor):
        if head.dim() != 2:
            raise ValueError(f"a linear head's weight must be a (k, d) matrix, got shape {tuple(head.shape)}")
        return head.detach().to(torch.float64)
    if isinstance(head, nn.Linear):
        return head.weight.detach().to(torch.float64)
    spec = getattr(head, "spec", None)
    if spec is not None and hasattr(head, "mlp"):
        if spec.depth != 1 or spec.prototypes is not None:
            raise ValueError(
                f"head is not linear (depth={spec.depth}, prototypes={spec.prototypes}); "
                "linear-head geometry needs depth=1 and no prototype layer"
            )
        w = head.mlp.fc0.weight.detach().to(torch.float64)
        norm = head.mlp.last_norm
        if isinstance(norm, nn.BatchNorm1d):
            scale = 1.0 / torch.sqrt(norm.running_var.detach().to(torch.float64) + norm.eps)
            if norm.affine:
                scale = scale * norm.weight.detach().to(torch.float64)
            w = scale[:, None] * w
        elif not isinstance(norm, nn.Identity):
            raise ValueError(f"head's output norm {type(norm).__name__} is not linear; use last_norm=None or 'batch'")
        return w
    raise ValueError(f"cannot read a linear weight from {type(head).__name__}; pass a (k, d) tensor, nn.Linear or depth-1 GeometricHead")


def induced_metric(head: nn.Module | Tensor) -> Tensor:
    """WᵀW (d, d): the Mahalanobis metric a linear head puts on the backbone space."""
    w = linear_weight(head)
    return w.T @ w


@dataclasses.dataclass
class Isotropy:
    """How far a covariance C is from a multiple of the identity on its range.

    Attributes:
        rank: r, eigenvalues above rtol·λ_max; dim: the matrix size.
        condition: λ_max / λ_r on the range (1 = isotropic).
        deviation: ‖C_r/mean(λ_r) − I_r‖_F = sqrt(Σ (λ_i/λ̄ − 1)²) over the r in-range eigenvalues.
        deviation_normalized: deviation / √r (an RMS relative deviation).
        eigenvalues: the r in-range eigenvalues, descending.
    """

    rank: int
    dim: int
    condition: float
    deviation: float
    deviation_normalized: float
    eigenvalues: list[float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def isotropy(cov: Tensor, rtol: float = 1e-10) -> Isotropy:
    """:class:`Isotropy` of a symmetric PSD matrix (eigenvalues below rtol·λ_max are out of range)."""
    if cov.dim() != 2 or cov.shape[0] != cov.shape[1]:
        raise ValueError(f"cov must be a square matrix, got shape {tuple(cov.shape)}")
    c = cov.detach().to(torch.float64)
    lam = torch.linalg.eigvalsh(0.5 * (c + c.T)).flip(0)
    if lam.numel() == 0 or float(lam[0]) <= 0:
        return Isotropy(0, c.shape[0], float("nan"), float("nan"), float("nan"), [])
    lam_r = lam[lam > rtol * lam[0]]
    r = lam_r.numel()
    dev = float(((lam_r / lam_r.mean()) - 1).pow(2).sum().sqrt())
    return Isotropy(r, c.shape[0], float(lam_r[0] / lam_r[-1]), dev, dev / math.sqrt(r), lam_r.tolist())


@dataclasses.dataclass
class LinearHeadGeometry:
    """Thm 3.1's implicit whitening, measured.

    Attributes:
        metric_rank, metric_condition: rank and within-rank condition number of WᵀW.
        features: :class:`Isotropy` of Σ_Z (backbone covariance).
        embeddings: :class:`Isotropy` of W Σ_Z Wᵀ (embedding covariance).
        whitening_gain: features.condition / embeddings.condition (> 1: the head makes the
            covariance more isotropic on its range).
    """

    metric_rank: int
    metric_condition: float
    features: Isotropy
    embeddings: Isotropy
    whitening_gain: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric_rank": self.metric_rank,
            "metric_condition": self.metric_condition,
            "features": self.features.to_dict(),
            "embeddings": self.embeddings.to_dict(),
            "whitening_gain": self.whitening_gain,
        }


def linear_head_geometry(head: nn.Module | Tensor, z: Tensor, rtol: float = 1e-10) -> LinearHeadGeometry:
    """Induced metric WᵀW and isotropy of W Σ_Z Wᵀ vs Σ_Z for features z (N, d)."""
    w = linear_weight(head)
    if z.dim() != 2 or z.shape[1] != w.shape[1]:
        raise ValueError(f"features must have shape (N, {w.shape[1]}) for a ({w.shape[0]}, {w.shape[1]}) head, got {tuple(z.shape)}")
    if z.shape[0] < 2:
        raise ValueError(f"need at least 2 feature vectors, got {z.shape[0]}")
    x = z.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise NonFiniteError("features contain non-finite values")
    xc = x - x.mean(0)
    cov = xc.T @ xc / (x.shape[0] - 1)
    feats = isotropy(cov, rtol)
    embs = isotropy(w @ cov @ w.T, rtol)
    metric = isotropy(w.T @ w, rtol)
    return LinearHeadGeometry(
        metric_rank=metric.rank,
        metric_condition=metric.condition,
        features=feats,
        embeddings=embs,
        whitening_gain=feats.condition / embs.condition if embs.condition and embs.condition == embs.condition else float("nan"),
    )


__all__ = ["Isotropy", "LinearHeadGeometry", "induced_metric", "isotropy", "linear_head_geometry", "linear_weight"]
