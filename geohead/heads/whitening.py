"""Whitening initialisation of a head's first Linear: the rows that make its pre-activation white."""
from __future__ import annotations

import torch
from torch import Tensor

WHITENING_MODES: tuple[str, ...] = ("zca", "pca")


@torch.no_grad()
def whitening_rows(
    x: Tensor, width: int, mode: str, eps: float = 1e-8, rtol: float = 1e-6
) -> tuple[Tensor, Tensor, int, int]:
    """Rows ``W`` of a Linear(in_dim, width) whose output on ``x`` is white, and ``x``'s mean.

    With ``mu``, ``Σ = U Λ Uᵀ`` the mean and covariance of ``x`` (N, in_dim) and ``r`` the number
    of eigenvalues above ``rtol·λ_max`` (at most ``min(N-1, in_dim, width)``), the block is
    ``W = P Λ_r^{-1/2} U_rᵀ`` (m, in_dim), ``m = min(in_dim, width)``, eigenvalues regularised as
    ``λ + eps·mean(λ)``; ``"pca"``: ``P = [I_r; 0]``, ``"zca"``: ``P`` is the polar factor of
    ``U_r[:m]`` (the orthonormal factor closest to it). ``W (x - mu)`` has covariance ``P Pᵀ``.

    Args:
        x: features (N, in_dim), float64, finite, N >= 2.
        width: the Linear's number of outputs.
        mode: ``"zca"`` or ``"pca"``.
    Returns: ``(W (m, in_dim), mu (in_dim,), r, m)``, float64.
    Raises: ValueError for features with zero variance.
    """
    n, in_dim = x.shape
    mu = x.mean(0)
    xc = x - mu
    cov = xc.T @ xc / (n - 1)
    evals, evecs = torch.linalg.eigh(cov)
    evals, evecs = evals.flip(0), evecs.flip(1)  # descending
    m = min(in_dim, width)
    lam_max = float(evals[0]) if evals.numel() else 0.0
    if lam_max <= 0.0:
        raise ValueError("whiten_ got features with zero variance (completely collapsed)")
    r = int((evals > rtol * lam_max).sum())
    r = min(r, m, n - 1)
    u_r, lam_r = evecs[:, :r], evals[:r]
    lam_r = lam_r + eps * float(evals.clamp_min(0).mean())
    scaled = u_r.T / lam_r.sqrt()[:, None]  # (r, in_dim): Λ_r^{-1/2} U_rᵀ
    if mode == "pca":
        p = torch.zeros(m, r, dtype=torch.float64, device=x.device)
        p[:r, :r] = torch.eye(r, dtype=torch.float64, device=x.device)
    else:
        a = u_r[:m]  # (m, r)
        uu, _, vh = torch.linalg.svd(a, full_matrices=False)
        p = uu @ vh  # polar factor: closest matrix with orthonormal columns
    return p @ scaled, mu, r, m


__all__ = ["WHITENING_MODES", "whitening_rows"]
