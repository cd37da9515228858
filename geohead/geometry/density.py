"""Spectral density of a symmetric operator by stochastic Lanczos quadrature (SLQ; Ubaru, Chen &
Saad 2017, "Fast estimation of tr(f(A)) via stochastic Lanczos quadrature").

For a probe v, m Lanczos steps from v/‖v‖ give the tridiagonal T = S Θ Sᵀ; the nodes θ_j and
weights S_{1j}² form an m-point Gauss quadrature rule for the spectral measure of A seen from v,
so Σ_j S_{1j}² f(θ_j) ≈ vᵀ f(A) v / ‖v‖² (exact for polynomials of degree < 2m). Averaging the
rules of P Rademacher probes estimates tr f(A)/n for any f (Hutchinson), hence moments, counts
of eigenvalues below a threshold, and a smoothed density (what ``geohead report`` plots).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch
from torch import Tensor

from geohead.geometry.lanczos import lanczos_tridiagonal
from geohead.geometry.operators import Operator, as_operator, default_generator, rademacher


@dataclasses.dataclass
class SpectralDensity:
    """Stochastic Lanczos quadrature: per probe p a Gauss rule {(θ_pj, w_pj)} with
    Σ_j w_pj f(θ_pj) ≈ v_pᵀ f(A) v_p / ‖v_p‖², exact for polynomials f of degree < 2·steps.

    Attributes:
        nodes: (P, m) Ritz values per probe (rows padded with NaN after an early breakdown).
        weights: (P, m) squared first components of the Ritz vectors (rows sum to 1; 0 padding).
        dim: n.
        n_matvec: operator applications used.
    """

    nodes: Tensor
    weights: Tensor
    dim: int
    n_matvec: int

    def _f(self, f: Callable[[Tensor], Tensor]) -> Tensor:
        vals = torch.where(self.weights > 0, f(torch.nan_to_num(self.nodes)), torch.zeros_like(self.nodes))
        return (self.weights * vals).sum(1)

    def probe_moments(self, power: int) -> Tensor:
        """(P,) quadrature values of v_pᵀ A^power v_p / ‖v_p‖²."""
        return self._f(lambda x: x.pow(power))

    def moment(self, power: int) -> float:
        """Estimate of tr(A^power) / n (the power-th moment of the spectral density)."""
        return float(self.probe_moments(power).mean())

    def trace_power(self, power: int) -> float:
        """Estimate of tr(A^power)."""
        return self.dim * self.moment(power)

    def fraction_below(self, x: float) -> float:
        """Estimated fraction of eigenvalues below ``x`` (× n: an estimated count)."""
        return float(self._f(lambda t: (t < x).to(t.dtype)).mean())

    def density(self, grid: Tensor, sigma: float) -> Tensor:
        """Gaussian-smoothed density on ``grid`` (G,): (1/P) Σ_p Σ_j w_pj N(grid; θ_pj, σ²), one
        probe at a time (memory m·G, not P·m·G)."""
        nodes = torch.nan_to_num(self.nodes)
        g = grid.to(nodes.dtype)
        total = torch.zeros_like(g)
        for theta, w in zip(nodes, self.weights):
            kern = torch.exp(-0.5 * ((g - theta[:, None]) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
            total += (w[:, None] * kern).sum(0)
        return total / nodes.shape[0]

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": self.nodes.tolist(), "weights": self.weights.tolist(), "dim": self.dim, "n_matvec": self.n_matvec}


def slq_density(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    num_probes: int = 8,
    num_steps: int = 40,
    generator: torch.Generator | None = None,
    probes: Tensor | None = None,
) -> SpectralDensity:
    """Spectral density by stochastic Lanczos quadrature.

    For each Rademacher probe v (or the rows of ``probes``, (P, n)), ``num_steps`` Lanczos steps
    with full reorthogonalisation from v/‖v‖ give T = S Θ Sᵀ; the probe's quadrature nodes are Θ
    and its weights S_{1j}². Averaging over probes estimates tr f(A)/n for any f (Hutchinson),
    and each probe's rule is exact for polynomials of degree < 2·num_steps.
    """
    op = as_operator(op, dim)
    n = op.dim
    if num_probes < 1 or num_steps < 1:
        raise ValueError(f"num_probes and num_steps must be >= 1, got {num_probes}, {num_steps}")
    g = default_generator(generator)
    if probes is None:
        probes = rademacher((num_probes, n), op, g)
    elif probes.dim() != 2 or probes.shape[1] != n:
        raise ValueError(f"probes must have shape (P, {n}), got {tuple(probes.shape)}")
    steps = min(num_steps, n)
    nodes = torch.full((probes.shape[0], steps), float("nan"), dtype=torch.float64)
    weights = torch.zeros(probes.shape[0], steps, dtype=torch.float64)
    start = op.n_matvec
    for p, v in enumerate(probes):
        theta, s = lanczos_tridiagonal(op, v.to(device=op.device, dtype=op.dtype), steps)
        nodes[p, : theta.numel()] = theta
        weights[p, : theta.numel()] = s[0, :] ** 2
    return SpectralDensity(nodes, weights, n, op.n_matvec - start)


__all__ = ["SpectralDensity", "slq_density"]
