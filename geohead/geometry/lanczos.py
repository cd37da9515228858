"""Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalisation.

* :func:`lanczos` — the k smallest and/or largest eigenvalues with Ritz residuals (a certificate:
  some eigenvalue lies within the residual of each Ritz value), run until they converge.
* :func:`lanczos_tridiagonal` — a fixed number of steps from a given vector: the Gauss
  quadrature rule that stochastic Lanczos quadrature (:mod:`geohead.geometry.density`) needs.

Both take an :class:`~geohead.geometry.operators.Operator` (or a ``matvec`` callable with
``dim=``) and work in the operator's dtype and device (float64 on CPU for diagnostics); the
tridiagonal matrix is always diagonalised in float64. Lanczos replaces the power iterations of
the paper's released code, whose float32 λ_min sits at rounding level and whose shift is wrong
whenever |λ_min| > λ_max (docs/theory.md, "Measurement pitfalls"); those baselines live in
``benchmarks/power_iteration.py``.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal

import torch
from torch import Tensor

from geohead.errors import NonFiniteError
from geohead.geometry.operators import Operator, as_operator, default_generator, gaussian_vector

Which = Literal["both", "smallest", "largest"]
WHICH: tuple[str, ...] = ("both", "smallest", "largest")


def default_tol(dtype: torch.dtype) -> float:
    """Relative Ritz-residual tolerance: 1e-8 in float64, 1e-4 in float32 and below."""
    return 1e-8 if dtype == torch.float64 else 1e-4


@dataclasses.dataclass
class LanczosResult:
    """Ritz values of a Lanczos run.

    Attributes:
        eigenvalues: (w,) the wanted Ritz values, ascending (k smallest and/or k largest).
        residuals: (w,) their Ritz residuals ‖A y − θ y‖; for a symmetric A some eigenvalue lies
            within the residual of each Ritz value (and usually much closer: ~residual²/gap).
        ritz_values: (m,) all Ritz values of the final tridiagonal matrix, ascending.
        ritz_residuals: (m,) their residuals.
        eigenvectors: (n, w) Ritz vectors of the wanted values (``return_vectors=True``) or None.
        iterations: Lanczos steps m (= size of the Krylov basis).
        n_matvec: operator applications used (= iterations).
        converged: every wanted residual ≤ tol·max|θ| (or the Krylov space was exhausted).
        exact: the run spanned all of R^n (m = n), so the Ritz values are the eigenvalues,
            multiplicities included.
        tol: the relative residual tolerance used.
    """

    eigenvalues: Tensor
    residuals: Tensor
    ritz_values: Tensor
    ritz_residuals: Tensor
    eigenvectors: Tensor | None
    iterations: int
    n_matvec: int
    converged: bool
    exact: bool
    tol: float
    which: str
    k: int

    @property
    def lambda_min(self) -> float:
        return float(self.ritz_values[0])

    @property
    def lambda_max(self) -> float:
        return float(self.ritz_values[-1])

    @property
    def scale(self) -> float:
        """max |θ| over all Ritz values: the spectral scale tolerances are relative to."""
        return float(self.ritz_values.abs().max())

    def to_dict(self) -> dict[str, Any]:
        return {
            "eigenvalues": self.eigenvalues.tolist(),
            "residuals": self.residuals.tolist(),
            "lambda_min": self.lambda_min,
            "lambda_max": self.lambda_max,
            "iterations": self.iterations,
            "n_matvec": self.n_matvec,
            "converged": self.converged,
            "exact": self.exact,
            "tol": self.tol,
            "which": self.which,
            "k": self.k,
        }


def _wanted(m: int, k: int, which: str) -> Tensor:
    """Indices (into ascending Ritz values) of the k smallest / largest / both."""
    idx = torch.arange(m)
    if which == "smallest":
        return idx[: min(k, m)]
    if which == "largest":
        return idx[max(0, m - k):]
    if 2 * k >= m:
        return idx
    return torch.cat([idx[:k], idx[m - k:]])


def _tridiag(alpha: list[float], beta: list[float]) -> Tensor:
    m = len(alpha)
    t = torch.diag(torch.tensor(alpha, dtype=torch.float64))
    if m > 1:
        off = torch.tensor(beta[: m - 1], dtype=torch.float64)
        t = t + torch.diag(off, 1) + torch.diag(off, -1)
    return t


def _lanczos_step(op: Operator, basis: Tensor, m: int, beta: list[float]) -> tuple[float, Tensor, float]:
    """One Lanczos step from q = basis[m]: α_m = qᵀAq and the next residual w = Aq − α_m q − β_{m−1}
    q_{m−1}, reorthogonalised (twice) against basis[:m+1]; returns (α_m, w, ‖w‖).
    Raises :class:`~geohead.errors.NonFiniteError` when the operator returns non-finite values."""
    q = basis[m]
    w = op(q)
    if not torch.isfinite(w).all():
        raise NonFiniteError(f"operator {op.name!r} returned non-finite values at Lanczos step {m}")
    a = float(torch.dot(q, w))
    w = w - a * q
    if m > 0:
        w = w - beta[m - 1] * basis[m - 1]
    qb = basis[: m + 1]
    for _ in range(2):  # full reorthogonalisation, twice
        w = w - qb.T @ (qb @ w)
    return a, w, float(w.norm())


def lanczos(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    k: int = 6,
    which: Which = "both",
    *,
    max_iter: int | None = None,
    tol: float | None = None,
    v0: Tensor | None = None,
    generator: torch.Generator | None = None,
    return_vectors: bool = False,
    callback: Callable[[int, Tensor, Tensor], None] | None = None,
) -> LanczosResult:
    """Extreme eigenvalues of a symmetric operator by Lanczos with full reorthogonalisation.

    Each step applies the operator once, then orthogonalises the new vector against the whole
    Krylov basis twice (classical Gram–Schmidt, "twice is enough"), so no spurious copies of
    converged eigenvalues appear. After every step the tridiagonal matrix T_m = Sᵀ Θ S is
    diagonalised and the Ritz residual of θ_i is |β_m S_{m,i}|. The run stops when the wanted
    Ritz values (the ``k`` smallest, the ``k`` largest, or both ends) all have residuals
    ≤ ``tol``·max|θ|, when ``max_iter`` steps are done, or when the basis spans R^n.

    When the Krylov space becomes invariant (β ≈ 0, e.g. a low-rank operator) before the wanted
    values converge, the run restarts with a random vector orthogonal to the basis; running to
    m = n therefore returns the whole spectrum with multiplicities (``exact=True``). A single
    Krylov sequence otherwise sees each distinct eigenvalue once: counts of Ritz values below a
    threshold are counts of distinct eigenvalues there (a lower bound with multiplicity).

    Args:
        op: an :class:`Operator`, or a ``matvec`` callable with ``dim``.
        dim: n, required for a plain callable.
        k: Ritz values wanted per end, 1 ≤ k ≤ n. With ``which="both"`` and 2k ≥ n (or k = n)
            the run goes to m = n and returns every eigenvalue.
        which: ``"both"``, ``"smallest"`` or ``"largest"``.
        max_iter: at most this many steps; default ``min(n, max(100, 20·k))``.
        tol: relative residual tolerance; default 1e-8 (float64) / 1e-4 (float32).
        v0: starting vector (n,); default a Gaussian vector from ``generator`` (seed 0).
        return_vectors: also return the Ritz vectors of the wanted values, (n, w).
        callback: ``callback(m, ritz_values, ritz_residuals)`` after every step (ascending
            Ritz values of T_m and their residuals; for convergence studies).

    Returns: :class:`LanczosResult`.
    """
    op = as_operator(op, dim)
    n = op.dim
    if which not in WHICH:
        raise ValueError(f"unknown which={which!r}; use one of {list(WHICH)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if k > n:
        raise ValueError(f"k={k} eigenvalues requested from an operator of dimension {n}; use k <= {n}")
    full = k >= n or (which == "both" and 2 * k >= n)
    if max_iter is None:
        max_iter = n if full else min(n, max(100, 20 * k))
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    max_iter = min(max_iter, n)
    tol = default_tol(op.dtype) if tol is None else float(tol)
    g = default_generator(generator)
    eps = torch.finfo(op.dtype).eps

    q = gaussian_vector(n, op, g) if v0 is None else v0.detach().to(device=op.device, dtype=op.dtype).reshape(-1).clone()
    if q.shape != (n,):
        raise ValueError(f"v0 must have {n} entries, got {tuple(v0.shape)}")  # type: ignore[union-attr]
    qn = q.norm()
    if not torch.isfinite(qn) or qn == 0:
        raise ValueError("v0 must be a finite non-zero vector")
    q = q / qn

    cap = min(max_iter, 64)
    basis = torch.empty(cap, n, dtype=op.dtype, device=op.device)
    alpha: list[float] = []
    beta: list[float] = []
    scale = 0.0
    converged = False
    exact = False
    theta = s = None
    m = 0
    while True:
        if m == basis.shape[0]:
            grown = torch.empty(min(max_iter, 2 * basis.shape[0]), n, dtype=op.dtype, device=op.device)
            grown[:m] = basis[:m]
            basis = grown
        basis[m] = q
        a, w, b = _lanczos_step(op, basis, m, beta)
        alpha.append(a)
        m += 1
        beta.append(b)
        theta, s = torch.linalg.eigh(_tridiag(alpha, beta))
        scale = max(scale, float(theta.abs().max()), abs(b))
        res = (b * s[-1, :]).abs()
        if callback is not None:
            callback(m, theta.clone(), res.clone())
        if m >= n:
            exact = True
            converged = True
            res = torch.zeros_like(res)
            break
        wanted = _wanted(m, k, which)
        need = n if full else (2 * k if which == "both" else k)
        invariant = b <= 10 * eps * max(scale, 1e-300) * math.sqrt(m)
        if not full and m >= min(need, n) and bool((res[wanted] <= tol * max(scale, 1e-300)).all()):
            converged = True
            break
        if m >= max_iter:
            break
        if invariant:
            # Krylov space exhausted: Ritz values so far are exact; restart orthogonally.
            beta[-1] = 0.0
            q = gaussian_vector(n, op, g)
            qb = basis[:m]
            for _ in range(2):
                q = q - qb.T @ (qb @ q)
            q = q / q.norm()
        else:
            q = w / b

    assert theta is not None and s is not None
    res = (beta[-1] * s[-1, :]).abs() if not exact else torch.zeros(m, dtype=torch.float64)
    if exact:
        wanted = torch.arange(m) if full else _wanted(m, k, which)
    else:
        wanted = _wanted(m, k, which)
    vectors = None
    if return_vectors:
        vectors = basis[:m].T @ s[:, wanted].to(device=op.device, dtype=op.dtype)
    return LanczosResult(
        eigenvalues=theta[wanted].clone(),
        residuals=res[wanted].clone(),
        ritz_values=theta.clone(),
        ritz_residuals=res.clone(),
        eigenvectors=vectors,
        iterations=m,
        n_matvec=m,
        converged=converged,
        exact=exact,
        tol=tol,
        which=which,
        k=k,
    )


def lanczos_tridiagonal(op: Operator, v: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """``steps`` Lanczos steps (full reorthogonalisation) from v/‖v‖, fewer when the Krylov space
    becomes invariant (β ≈ 0); returns the eigendecomposition T = S diag(θ) Sᵀ of the m × m
    tridiagonal matrix, (θ (m,), S (m, m)) in float64, θ ascending. The pairs (θ_j, S_{1j}²) are
    the m-point Gauss quadrature rule of the spectral measure of A seen from v:
    Σ_j S_{1j}² f(θ_j) = vᵀ f(A) v / ‖v‖² for every polynomial f of degree < 2m.
    """
    n = op.dim
    eps = torch.finfo(op.dtype).eps
    q = v / v.norm()
    basis = torch.empty(steps, n, dtype=op.dtype, device=op.device)
    alpha: list[float] = []
    beta: list[float] = []
    scale = 0.0
    for m in range(steps):
        basis[m] = q
        a, w, b = _lanczos_step(op, basis, m, beta)
        alpha.append(a)
        scale = max(scale, abs(a), b)
        if m == steps - 1 or b <= 10 * eps * max(scale, 1e-300) * math.sqrt(m + 1):
            break
        beta.append(b)
        q = w / b
    theta, s = torch.linalg.eigh(_tridiag(alpha, beta))
    return theta, s


__all__ = ["LanczosResult", "WHICH", "Which", "default_tol", "lanczos", "lanczos_tridiagonal"]
