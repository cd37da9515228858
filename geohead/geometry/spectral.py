"""Spectra of symmetric operators from matrix-vector products only.

* :func:`lanczos` — extreme eigenvalues with full reorthogonalisation and Ritz residuals.
* :func:`slq_density` — stochastic Lanczos quadrature (Ubaru, Chen & Saad 2017): the spectral
  density as a mixture of Gauss quadrature rules, one per random probe.
* :func:`hutchinson_trace`, :func:`frobenius_norm` — Hutchinson (1989) and Hutch++ (Meyer, Musco,
  Musco & Woodruff 2021) estimators with standard errors.
* :func:`shifted_power_iteration` (the paper's released estimator) and :func:`power_iteration`
  (PyHessian style) — *baselines only*, kept for ``benchmarks/hessian.py``. Do not use them for
  diagnostics: in float32 their λ_min sits at rounding level and the shift is wrong whenever
  |λ_min| > λ_max (DESIGN.md, "Known pitfalls").

Every function takes an :class:`~geohead.geometry.operators.Operator` (or a ``matvec`` callable
with ``dim=``) and works in the operator's dtype and device (float64 on CPU for diagnostics).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal

import torch
from torch import Tensor

from geohead.errors import NonFiniteError
from geohead.geometry.operators import Operator, as_operator

Which = Literal["both", "smallest", "largest"]
WHICH: tuple[str, ...] = ("both", "smallest", "largest")


def default_tol(dtype: torch.dtype) -> float:
    """Relative Ritz-residual tolerance: 1e-8 in float64, 1e-4 in float32 and below."""
    return 1e-8 if dtype == torch.float64 else 1e-4


def _generator(generator: torch.Generator | None, seed: int = 0) -> torch.Generator:
    return generator if generator is not None else torch.Generator().manual_seed(seed)


def _randn(n: int, op: Operator, g: torch.Generator) -> Tensor:
    return torch.randn(n, generator=g, dtype=torch.float64).to(device=op.device, dtype=op.dtype)


def _rademacher(shape: tuple[int, ...], op: Operator, g: torch.Generator) -> Tensor:
    r = torch.randint(0, 2, shape, generator=g).to(torch.float64) * 2 - 1
    return r.to(device=op.device, dtype=op.dtype)


# ---------------------------------------------------------------------- Lanczos
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
    g = _generator(generator)
    eps = torch.finfo(op.dtype).eps

    q = _randn(n, op, g) if v0 is None else v0.detach().to(device=op.device, dtype=op.dtype).reshape(-1).clone()
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
            q = _randn(n, op, g)
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


# ---------------------------------------------------------------------- SLQ
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
        """Gaussian-smoothed density on ``grid`` (G,): (1/P) Σ_p Σ_j w_pj N(grid; θ_pj, σ²)."""
        nodes = torch.nan_to_num(self.nodes)[..., None]
        kern = torch.exp(-0.5 * ((grid.to(nodes.dtype) - nodes) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
        return (self.weights[..., None] * kern).sum(1).mean(0)

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
    g = _generator(generator)
    if probes is None:
        probes = _rademacher((num_probes, n), op, g)
    elif probes.dim() != 2 or probes.shape[1] != n:
        raise ValueError(f"probes must have shape (P, {n}), got {tuple(probes.shape)}")
    steps = min(num_steps, n)
    nodes = torch.full((probes.shape[0], steps), float("nan"), dtype=torch.float64)
    weights = torch.zeros(probes.shape[0], steps, dtype=torch.float64)
    start = op.n_matvec
    for p, v in enumerate(probes):
        res = _lanczos_fixed(op, v.to(device=op.device, dtype=op.dtype), steps)
        theta, s = res
        nodes[p, : theta.numel()] = theta
        weights[p, : theta.numel()] = s[0, :] ** 2
    return SpectralDensity(nodes, weights, n, op.n_matvec - start)


def _lanczos_fixed(op: Operator, v: Tensor, steps: int) -> tuple[Tensor, Tensor]:
    """Fixed-length Lanczos (full reorthogonalisation) from v; stops early when invariant."""
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


# ---------------------------------------------------------------------- traces and norms
@dataclasses.dataclass
class Estimate:
    """A stochastic estimate: ``value ± stderr`` (stderr 0 for exact computations)."""

    value: float
    stderr: float
    n_matvec: int
    method: str

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _orth(x: Tensor) -> Tensor:
    q, r = torch.linalg.qr(x)
    keep = r.diagonal().abs() > torch.finfo(x.dtype).eps * max(float(r.diagonal().abs().max()), 1e-300) * x.shape[0]
    return q[:, keep]


def hutchinson_trace(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    num_probes: int = 30,
    method: Literal["hutch++", "hutchinson"] = "hutch++",
    generator: torch.Generator | None = None,
) -> Estimate:
    """Estimate tr(A) with ``num_probes`` matvecs.

    ``"hutchinson"``: mean of vᵀAv over Rademacher v; its variance is 2(‖A‖_F² − Σ A_ii²)/P.
    ``"hutch++"``: a third of the budget sketches the top range Q = orth(A S), tr(QᵀAQ) is taken
    exactly (another third), Hutchinson on (I − QQᵀ)A(I − QQᵀ) with the rest; error
    O(‖A‖_*/P) instead of O(‖A‖_F/√P) for spectra with a dominant low-rank part.
    ``stderr`` is the sample standard error of the Hutchinson part.
    """
    op = as_operator(op, dim)
    n = op.dim
    g = _generator(generator)
    start = op.n_matvec
    if method not in ("hutch++", "hutchinson"):
        raise ValueError(f"unknown method {method!r}; use 'hutch++' or 'hutchinson'")
    if num_probes < (3 if method == "hutch++" else 1):
        raise ValueError(f"num_probes={num_probes} is too small for {method}")
    exact_part = 0.0
    q = None
    t = num_probes
    if method == "hutch++":
        s = num_probes // 3
        t = num_probes - 2 * s
        sketch = torch.stack([op(x) for x in _rademacher((s, n), op, g)], 1)
        q = _orth(sketch)
        aq = torch.stack([op(q[:, i]) for i in range(q.shape[1])], 1) if q.shape[1] else q
        exact_part = float((q * aq).sum())
    vals = []
    for v in _rademacher((t, n), op, g):
        if q is not None and q.shape[1]:
            v = v - q @ (q.T @ v)
        vals.append(float(torch.dot(v, op(v))))
    x = torch.tensor(vals, dtype=torch.float64)
    se = float(x.std(unbiased=True) / math.sqrt(len(vals))) if len(vals) > 1 else float("inf")
    return Estimate(exact_part + float(x.mean()), se, op.n_matvec - start, method)


def frobenius_norm(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    num_probes: int = 30,
    method: Literal["hutch++", "hutchinson"] = "hutch++",
    exact: bool | None = None,
    generator: torch.Generator | None = None,
) -> Estimate:
    """Estimate ‖A‖_F = sqrt(tr AᵀA) with ``num_probes`` matvecs of A.

    ``"hutchinson"``: ‖A‖_F² = E‖Av‖² for Rademacher v (relative standard deviation of one
    sample ≤ √2, so the relative error of ‖A‖_F² is about √(2/P) or better).
    ``"hutch++"``: ‖A‖_F² = ‖AQ‖_F² + ‖A(I − QQᵀ)‖_F², Q = orth(A S) from a third of the budget,
    the first term exact (another third), the second by Hutchinson.
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
    if method not in ("hutch++", "hutchinson"):
        raise ValueError(f"unknown method {method!r}; use 'hutch++' or 'hutchinson'")
    g = _generator(generator)
    exact_part = 0.0
    q = None
    t = num_probes
    if method == "hutch++":
        if num_probes < 3:
            raise ValueError(f"num_probes={num_probes} is too small for hutch++ (>= 3)")
        s = num_probes // 3
        t = num_probes - 2 * s
        sketch = torch.stack([op(x) for x in _rademacher((s, n), op, g)], 1)
        q = _orth(sketch)
        for i in range(q.shape[1]):
            exact_part += float(op(q[:, i]).pow(2).sum())
    vals = []
    for v in _rademacher((t, n), op, g):
        if q is not None and q.shape[1]:
            v = v - q @ (q.T @ v)
        vals.append(float(op(v).pow(2).sum()))
    x = torch.tensor(vals, dtype=torch.float64)
    sq = exact_part + float(x.mean())
    se_sq = float(x.std(unbiased=True) / math.sqrt(len(vals))) if len(vals) > 1 else float("inf")
    value = math.sqrt(max(sq, 0.0))
    se = se_sq / (2 * value) if value > 0 else (0.0 if se_sq == 0 else float("inf"))
    return Estimate(value, se, op.n_matvec - start, method)


# ---------------------------------------------------------------------- baselines
def shifted_power_iteration(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    steps: int = 20,
    generator: torch.Generator | None = None,
    callback: Callable[[str, int, float], None] | None = None,
) -> tuple[float, float, int]:
    """BASELINE ONLY: the paper's released estimator (hessian_tracker.py, re-implemented).

    ``steps`` power iterations from a random vector, λ_max := Rayleigh quotient of the last
    iterate (this is the eigenvalue of largest *magnitude*, which is λ_min whenever
    |λ_min| > λ_max); then ``steps`` power iterations on A − λ_max I, λ_min := Rayleigh quotient
    of A at the last iterate. Uses 2·steps + 2 matvecs. Returns (λ_min, λ_max, n_matvec).
    ``callback(stage, step, estimate)`` sees the Rayleigh quotient after every step (one extra
    matvec each, not counted in the return value).
    """
    op = as_operator(op, dim)
    n = op.dim
    g = _generator(generator)
    start = op.n_matvec
    v = _randn(n, op, g)
    v = v / (v.norm() + 1e-8)
    for i in range(steps):
        hv = op(v)
        v = hv / (hv.norm() + 1e-8)
        if callback is not None:
            callback("max", i + 1, float(torch.dot(v, op(v))))
            op.n_matvec -= 1
    lam_max = float(torch.dot(v, op(v)))
    u = _randn(n, op, g)
    u = u / (u.norm() + 1e-8)
    for i in range(steps):
        hv = op(u) - lam_max * u
        u = hv / (hv.norm() + 1e-8)
        if callback is not None:
            callback("min", i + 1, float(torch.dot(u, op(u))))
            op.n_matvec -= 1
    lam_min = float(torch.dot(u, op(u)))
    return lam_min, lam_max, op.n_matvec - start


def power_iteration(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    shift: float = 0.0,
    max_iter: int = 100,
    tol: float = 1e-3,
    generator: torch.Generator | None = None,
    callback: Callable[[int, float], None] | None = None,
) -> tuple[float, int]:
    """BASELINE ONLY: PyHessian-style power iteration on A − shift·I.

    Iterates v ← (A − shift I)v/‖·‖, estimate μ = vᵀ(A − shift I)v, until the relative change of
    μ is below ``tol`` (PyHessian's stopping rule) or ``max_iter``; returns (μ + shift, n_matvec),
    the eigenvalue of A whose distance to ``shift`` is largest. ``callback(step, estimate)``.
    """
    op = as_operator(op, dim)
    g = _generator(generator)
    start = op.n_matvec
    v = _randn(op.dim, op, g)
    v = v / v.norm()
    mu = None
    for i in range(max_iter):
        hv = op(v) - shift * v
        new = float(torch.dot(v, hv))
        v = hv / hv.norm()
        if callback is not None:
            callback(i + 1, new + shift)
        if mu is not None and abs(new - mu) <= tol * (abs(mu) + 1e-30):
            mu = new
            break
        mu = new
    assert mu is not None
    return mu + shift, op.n_matvec - start


__all__ = [
    "Estimate", "LanczosResult", "SpectralDensity", "WHICH", "default_tol", "frobenius_norm",
    "hutchinson_trace", "lanczos", "power_iteration", "shifted_power_iteration", "slq_density",
]
