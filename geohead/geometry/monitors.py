"""Collapse monitors on embedding batches: RankMe, α-ReQ, the std of normalised embeddings and the
within-rank covariance condition number.

On a batch of embeddings E (N, k): :func:`rankme` (Garrido et al. 2023), :func:`alpha_req`
(Agrawal et al. 2022), :func:`normalized_std` (Chen & He 2021, ≈ 1/√k when healthy),
:func:`within_rank_condition` (covariance condition number on its numerical range, instead of the
paper's tracker's clamped one: docs/theory.md, "Measurement pitfalls"), and all of them at once,
:func:`collapse_monitors`; :func:`collapse_record` is the flat record of a backbone's features
and a head's embeddings that every monitor of geohead writes (the training loop's Tracker,
:class:`geohead.monitor.GeometryMonitor`, the Lightning callback, the search's trials); its keys
are documented once, in docs/monitors.md.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor
from torch.nn import functional as F

from geohead.errors import NonFiniteError


def _embeddings(emb: Tensor, name: str) -> Tensor:
    if not isinstance(emb, Tensor) or emb.dim() != 2:
        raise ValueError(f"{name} expects embeddings of shape (N, k), got {tuple(getattr(emb, 'shape', ()))}")
    if emb.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 embeddings, got {emb.shape[0]}")
    x = emb.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise NonFiniteError(f"{name} got non-finite embeddings (NaN or inf)")
    return x


def rankme(emb: Tensor, eps: float = 1e-7) -> float:
    """RankMe (Garrido et al. 2023, Eq. 1): exp(−Σ_k p_k log p_k), p_k = σ_k/‖σ‖₁ + ε, with σ the
    singular values of the (uncentred) embedding matrix (N, k). Between 1 and min(N, k)."""
    x = _embeddings(emb, "rankme")
    s = torch.linalg.svdvals(x)
    if float(s.sum()) == 0:
        return 1.0
    p = s / s.sum() + eps
    return float(torch.exp(-(p * torch.log(p)).sum()))


def alpha_req(emb: Tensor, rtol: float = 1e-6) -> float:
    """α-ReQ (Agrawal et al. 2022): the exponent α of a power-law fit λ_i ∝ i^{−α} to the
    eigenvalues of the embedding covariance, by least squares of log λ_i on log i over the
    eigenvalues above ``rtol``·λ_max. Small α: a flat (high-rank, possibly noisy) spectrum;
    large α: a few dominant directions (collapse). ~1 is reported as a sweet spot."""
    x = _embeddings(emb, "alpha_req")
    xc = x - x.mean(0)
    # wider than the batch (DINO's 65536 prototypes): the covariance's non-zero eigenvalues are
    # the Gram matrix's, an N x N problem instead of k x k
    gram = xc @ xc.T if xc.shape[1] > xc.shape[0] else xc.T @ xc
    lam = torch.linalg.eigvalsh(gram / (x.shape[0] - 1)).flip(0)
    if float(lam[0]) <= 0:
        return float("inf")
    lam = lam[lam > rtol * lam[0]]
    if lam.numel() < 2:
        return float("inf")
    i = torch.arange(1, lam.numel() + 1, dtype=torch.float64)
    lx, ly = torch.log(i), torch.log(lam)
    lx_c = lx - lx.mean()
    slope = float((lx_c * (ly - ly.mean())).sum() / (lx_c**2).sum())
    return -slope


def normalized_std(emb: Tensor) -> float:
    """Mean over dimensions of the batch std of L2-normalised embeddings (SimSiam, Chen & He
    2021, Sec. 4.1): ≈ 1/√k for embeddings spread isotropically over the sphere, → 0 at
    complete collapse."""
    x = _embeddings(emb, "normalized_std")
    return float(F.normalize(x, dim=1).std(0).mean())


@dataclasses.dataclass
class WithinRankCondition:
    """Condition number of the embedding covariance on its numerical range.

    Attributes:
        condition: λ_max / λ_r with r the numerical rank (1 for perfectly white embeddings).
        rank: r, the number of covariance eigenvalues above the tolerance.
        dim: k, the embedding width; ``rank < dim`` means dimensional collapse.
        tol: the relative eigenvalue tolerance used.
        eigenvalues: the r in-range eigenvalues, descending.
    """

    condition: float
    rank: int
    dim: int
    tol: float
    eigenvalues: list[float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def within_rank_condition(emb: Tensor, rtol: float | None = None, normalize: bool = False) -> WithinRankCondition:
    """Condition number of cov(E) restricted to its numerical range, and that range's rank.

    The paper's tracker divides λ_max by λ_min clamped at 1e-7, which for a rank-deficient
    covariance is just λ_max·1e7; here eigenvalues below ``rtol``·λ_max count as zero and the
    condition number is taken over the rest. The default ``rtol`` is the numerical-rank
    tolerance of the centred data's singular values, squared: (max(N, k)·ε)² with ε the machine
    epsilon of ``emb``'s dtype (so float32 embeddings are not credited with float64 precision).

    Args:
        emb: (N, k) embeddings.
        rtol: relative eigenvalue tolerance (overrides the default).
        normalize: L2-normalise rows first (the paper's tracker does).
    """
    eps = torch.finfo(emb.dtype).eps if isinstance(emb, Tensor) and emb.is_floating_point() else torch.finfo(torch.float64).eps
    x = _embeddings(emb, "within_rank_condition")
    if normalize:
        x = F.normalize(x, dim=1)
    n, kdim = x.shape
    xc = (x - x.mean(0)) / math.sqrt(n - 1)
    lam = torch.linalg.svdvals(xc) ** 2
    if rtol is None:
        rtol = (max(n, kdim) * eps) ** 2
    lam_r = lam[lam > rtol * lam[0]] if float(lam[0]) > 0 else lam[:0]
    r = int(lam_r.numel())
    cond = float(lam_r[0] / lam_r[-1]) if r else float("nan")
    return WithinRankCondition(condition=cond, rank=r, dim=kdim, tol=float(rtol), eigenvalues=lam_r.tolist())


@dataclasses.dataclass
class CollapseMonitors:
    """All four monitors of one embedding batch (for logging every N steps)."""

    rankme: float
    alpha_req: float
    normalized_std: float
    healthy_std: float
    condition: float
    rank: int
    dim: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def collapse_monitors(emb: Tensor) -> CollapseMonitors:
    """RankMe, α-ReQ, std of L2-normalised embeddings (with the healthy 1/√k), and the
    within-rank covariance condition number with its rank, for one batch (N, k)."""
    x = _embeddings(emb, "collapse_monitors")
    wr = within_rank_condition(x)
    return CollapseMonitors(
        rankme=rankme(x), alpha_req=alpha_req(x), normalized_std=normalized_std(x),
        healthy_std=1.0 / math.sqrt(x.shape[1]), condition=wr.condition, rank=wr.rank, dim=x.shape[1], n=x.shape[0],
    )


#: The spaces of a collapse record, in key order.
SPACES = ("backbone", "head")


def collapse_record(feats: Tensor, embs: Tensor, *, alpha: bool = True) -> dict[str, float]:
    """The collapse monitors of backbone features (N, d) and head embeddings (N, k), one key each
    (docs/monitors.md), for ``space`` in backbone, head:

    * ``rankme_{space}``: :func:`rankme`;
    * ``std_{space}``: :func:`normalized_std`, the std of the L2-normalised rows;
    * ``std_healthy_{space}``: 1/√width, what ``std`` is for isotropic embeddings;
    * ``std_ratio_{space}``: ``std`` · √width, 1 when healthy, 0 at complete collapse;
    * ``alpha_req_{space}``: :func:`alpha_req` (only with ``alpha``: it costs an eigendecomposition).

    A measurement of non-finite embeddings is NaN (the caller decides whether that is an error).
    """
    rec: dict[str, float] = {}
    for space, x in zip(SPACES, (feats, embs)):
        width = x.shape[1]
        rec[f"rankme_{space}"] = _nan_if_not_finite(rankme, x)
        rec[f"std_{space}"] = _nan_if_not_finite(normalized_std, x)
        rec[f"std_healthy_{space}"] = 1 / math.sqrt(width)
        rec[f"std_ratio_{space}"] = rec[f"std_{space}"] * math.sqrt(width)
        if alpha:
            rec[f"alpha_req_{space}"] = _nan_if_not_finite(alpha_req, x)
    return rec


def _nan_if_not_finite(fn: Any, x: Tensor) -> float:
    try:
        return float(fn(x))
    except NonFiniteError:
        return float("nan")


__all__ = [
    "CollapseMonitors", "SPACES", "WithinRankCondition", "alpha_req", "collapse_monitors", "collapse_record",
    "normalized_std", "rankme", "within_rank_condition",
]
