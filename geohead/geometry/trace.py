"""Traces and Frobenius norms of a symmetric operator from matrix-vector products.

* Hutchinson (1989): for Rademacher v, E[vᵀAv] = tr(A) and E[‖Av‖²] = tr(AᵀA) = ‖A‖_F².
* Hutch++ (Meyer, Musco, Musco & Woodruff 2021, "Hutch++: optimal stochastic trace
  estimation"): a third of the budget sketches the dominant range, Q = orth(A S) for a
  Rademacher S; the part of the quantity on range(Q) is taken exactly (another third), and
  Hutchinson runs on the deflated remainder (I − QQᵀ) with the rest, so the error is
  O(‖A‖_*/P) instead of O(‖A‖_F/√P) when a low-rank part dominates the spectrum.

:func:`hutchinson_trace` and :func:`frobenius_norm` share that sketch (:func:`_hutch_samples`);
they differ only in the quantity: vᵀAv for the trace, ‖Av‖² for the squared norm. Every
estimate comes with its standard error (:class:`Estimate`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal

import torch
from torch import Tensor

from geohead.geometry.operators import Operator, as_operator, default_generator, rademacher

Method = Literal["hutch++", "hutchinson"]
METHODS: tuple[str, ...] = ("hutch++", "hutchinson")


@dataclasses.dataclass
class Estimate:
    """A stochastic estimate: ``value ± stderr`` (stderr 0 for exact computations).

    Attributes:
        value: the estimate; stderr: its standard error.
        n_matvec: operator applications used.
        method: ``"hutch++"``, ``"hutchinson"`` or ``"exact"``.
    """

    value: float
    stderr: float
    n_matvec: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _orth(x: Tensor) -> Tensor:
    """Orthonormal basis (n, r) of the column space of x (n, s), rank-deficient columns dropped."""
    q, r = torch.linalg.qr(x)
    keep = r.diagonal().abs() > torch.finfo(x.dtype).eps * max(float(r.diagonal().abs().max()), 1e-300) * x.shape[0]
    return q[:, keep]


def _hutch_samples(
    op: Operator, num_probes: int, method: str, g: torch.Generator, sample: Callable[[Tensor, Tensor], float]
) -> tuple[Tensor | None, list[Tensor], Tensor]:
    """The sketch and the Hutchinson samples shared by the trace and the Frobenius norm.

    ``"hutch++"``: s = num_probes // 3 Rademacher probes S (n, s) give Q = orth(A S) (n, r),
    r ≤ s, and the columns A q_i (r products); the remaining t = num_probes − 2s probes are
    deflated, v ← v − Q Qᵀ v. ``"hutchinson"``: Q is None and all num_probes probes are used.
    Returns (Q or None, [A q_i] (r vectors (n,)), samples (t,) float64 of ``sample(v, A v)``).
    """
    n = op.dim
    q = None
    aq: list[Tensor] = []
    t = num_probes
    if method == "hutch++":
        s = num_probes // 3
        t = num_probes - 2 * s
        sketch = torch.stack([op(x) for x in rademacher((s, n), op, g)], 1)
        q = _orth(sketch)
        aq = [op(q[:, i]) for i in range(q.shape[1])]
    vals = []
    for v in rademacher((t, n), op, g):
        if q is not None and q.shape[1]:
            v = v - q @ (q.T @ v)
        vals.append(sample(v, op(v)))
    return q, aq, torch.tensor(vals, dtype=torch.float64)


def _stderr(x: Tensor) -> float:
    """Standard error of the mean of the samples x (inf with fewer than two)."""
    return float(x.std(unbiased=True) / math.sqrt(len(x))) if len(x) > 1 else float("inf")


def hutchinson_trace(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    num_probes: int = 30,
    method: Method = "hutch++",
    generator: torch.Generator | None = None,
) -> Estimate:
    """Estimate tr(A) with ``num_probes`` matvecs.

    ``"hutchinson"``: mean of vᵀAv over Rademacher v; its variance is 2(‖A‖_F² − Σ A_ii²)/P.
    ``"hutch++"``: tr(A) = tr(QᵀAQ) + tr((I − QQᵀ)A(I − QQᵀ)), the first term exact, the second
    by Hutchinson on deflated probes (see the module docstring; needs ``num_probes`` ≥ 3).
    ``stderr`` is the sample standard error of the Hutchinson part.
    """
    op = as_operator(op, dim)
    g = default_generator(generator)
    start = op.n_matvec
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use 'hutch++' or 'hutchinson'")
    if num_probes < (3 if method == "hutch++" else 1):
        raise ValueError(f"num_probes={num_probes} is too small for {method}")
    q, aq, x = _hutch_samples(op, num_probes, method, g, lambda v, av: float(torch.dot(v, av)))
    exact_part = 0.0
    if q is not None:
        exact_part = float((q * (torch.stack(aq, 1) if aq else q)).sum())
    return Estimate(exact_part + float(x.mean()), _stderr(x), op.n_matvec - start, method)


def frobenius_norm(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    num_probes: int = 30,
    method: Method = "hutch++",
    exact: bool | None = None,
    generator: torch.Generator | None = None,
) -> Estimate:
    """Estimate ‖A‖_F = sqrt(tr AᵀA) with ``num_probes`` matvecs of A.

    ``"hutchinson"``: ‖A‖_F² = E‖Av‖² for Rademacher v (relative standard deviation of one
    sample ≤ √2, so the relative error of ‖A‖_F² is about √(2/P) or better).
    ``"hutch++"``: ‖A‖_F² = ‖AQ‖_F² + ‖A(I − QQᵀ)‖_F², the first term exact, the second by
    Hutchinson on deflated probes (see the module docstring; needs ``num_probes`` ≥ 3).
    ``exact=True`` (default when n ≤ num_probes): Σ_i ‖A e_i‖², n matvecs, stderr 0.
    ``stderr`` is propagated to ‖A‖_F (σ/(2‖A‖_F) from the squared norm's standard error).
    """
    op = as_operator(op, dim)
    n = op.dim
    start = op.n_matvec
    if exact is None:
        exact = n <= num_probes
    if exact:
        eye = torch.eye(n, dtype=op.dtype, device=op.device)
        sq = sum(float(op(eye[i]).pow(2).sum()) for i in range(n))
        return Estimate(math.sqrt(sq), 0.0, op.n_matvec - start, "exact")
    if method not in METHODS:
        raise ValueError(f"unknown method {method!r}; use 'hutch++' or 'hutchinson'")
    g = default_generator(generator)
    if method == "hutch++" and num_probes < 3:
        raise ValueError(f"num_probes={num_probes} is too small for hutch++ (>= 3)")
    _, aq, x = _hutch_samples(op, num_probes, method, g, lambda v, av: float(av.pow(2).sum()))
    exact_part = 0.0
    for col in aq:
        exact_part += float(col.pow(2).sum())
    sq = exact_part + float(x.mean())
    se_sq = _stderr(x)
    value = math.sqrt(max(sq, 0.0))
    se = se_sq / (2 * value) if value > 0 else (0.0 if se_sq == 0 else float("inf"))
    return Estimate(value, se, op.n_matvec - start, method)


__all__ = ["Estimate", "METHODS", "Method", "frobenius_norm", "hutchinson_trace"]
