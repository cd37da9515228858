"""Power-iteration baselines for extreme eigenvalues: what the paper's released code and PyHessian
do, kept only to compare against geohead's Lanczos (``benchmarks/hessian.py``,
``benchmarks/paper/collapse_escape.py``, ``tests/test_geometry_spectral.py``).

Do not use them for diagnostics: in float32 their λ_min sits at rounding level, and the shifted
scheme is wrong whenever |λ_min| > λ_max (docs/theory.md, "Measurement pitfalls"). Use
:func:`geohead.geometry.lanczos.lanczos` instead.

Import from a script or test by putting this folder on ``sys.path``:

    sys.path.insert(0, str(REPO / "benchmarks"))
    from power_iteration import power_iteration, shifted_power_iteration
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from geohead.geometry.operators import Operator, as_operator, default_generator, gaussian_vector


def shifted_power_iteration(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    steps: int = 20,
    generator: torch.Generator | None = None,
    callback: Callable[[str, int, float], None] | None = None,
) -> tuple[float, float, int]:
    """The paper's released estimator (hessian_tracker.py, re-implemented).

    ``steps`` power iterations from a random vector, λ_max := Rayleigh quotient of the last
    iterate (this is the eigenvalue of largest *magnitude*, which is λ_min whenever
    |λ_min| > λ_max); then ``steps`` power iterations on A − λ_max I, λ_min := Rayleigh quotient
    of A at the last iterate. Uses 2·steps + 2 matvecs. Returns (λ_min, λ_max, n_matvec).
    ``callback(stage, step, estimate)`` sees the Rayleigh quotient after every step (one extra
    matvec each, not counted in the return value).
    """
    op = as_operator(op, dim)
    n = op.dim
    g = default_generator(generator)
    start = op.n_matvec
    v = gaussian_vector(n, op, g)
    v = v / (v.norm() + 1e-8)
    for i in range(steps):
        hv = op(v)
        v = hv / (hv.norm() + 1e-8)
        if callback is not None:
            callback("max", i + 1, float(torch.dot(v, op(v))))
            op.n_matvec -= 1
    lam_max = float(torch.dot(v, op(v)))
    u = gaussian_vector(n, op, g)
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
    """PyHessian-style power iteration on A − shift·I.

    Iterates v ← (A − shift I)v/‖·‖, estimate μ = vᵀ(A − shift I)v, until the relative change of
    μ is below ``tol`` (PyHessian's stopping rule) or ``max_iter``; returns (μ + shift, n_matvec),
    the eigenvalue of A whose distance to ``shift`` is largest. ``callback(step, estimate)``.
    """
    op = as_operator(op, dim)
    g = default_generator(generator)
    start = op.n_matvec
    v = gaussian_vector(op.dim, op, g)
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


__all__ = ["power_iteration", "shifted_power_iteration"]
