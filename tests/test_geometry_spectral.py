"""Lanczos, SLQ and Hutchinson against dense eigendecompositions and exact traces."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest
import torch

from geohead.errors import NonFiniteError
from geohead.geometry.density import slq_density
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.lanczos import lanczos
from geohead.geometry.operators import Operator
from geohead.geometry.trace import frobenius_norm, hutchinson_trace
from geohead.heads import GeometricHead
from geohead.objectives import get_objective

sys.path.append(str(Path(__file__).resolve().parents[1] / "benchmarks"))
from power_iteration import power_iteration, shifted_power_iteration  # noqa: E402  (baselines, not library)

F64 = torch.float64


pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def sym_matrix(n: int, eigenvalues: torch.Tensor, seed: int = 0) -> torch.Tensor:
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=_gen(seed), dtype=F64))
    return q @ torch.diag(eigenvalues.to(F64)) @ q.T


def op_of(a: torch.Tensor) -> Operator:
    return Operator(lambda v: a @ v, a.shape[0], dtype=a.dtype)


# ---------------------------------------------------------------------- Lanczos
def test_lanczos_extremes_equal_eigvalsh_of_random_symmetric_matrix() -> None:
    n = 200
    a = torch.randn(n, n, generator=_gen(1), dtype=F64)
    a = (a + a.T) / 2
    lam = torch.linalg.eigvalsh(a)
    res = lanczos(op_of(a), k=4, which="both", tol=1e-10)
    assert res.converged and not res.exact
    scale = float(lam.abs().max())
    assert torch.allclose(res.eigenvalues[:4], lam[:4], rtol=0, atol=1e-8 * scale)
    assert torch.allclose(res.eigenvalues[-4:], lam[-4:], rtol=0, atol=1e-8 * scale)
    # Ritz residual bounds: an eigenvalue within each residual
    for theta, r in zip(res.eigenvalues, res.residuals):
        assert float((lam - theta).abs().min()) <= float(r) + 1e-12 * scale
    assert res.n_matvec == res.iterations < n
    d = res.to_dict()
    assert d["lambda_min"] == pytest.approx(float(lam[0]), abs=1e-8 * scale)


def test_lanczos_extremes_equal_eigvalsh_of_effective_hessian() -> None:
    torch.manual_seed(0)
    obj = get_objective("barlow")
    head = GeometricHead(5, 4, hidden_dim=8, depth=3, activation="gelu")
    st = obj.collapsed_state(10, 5, spread=1e-2, generator=_gen(0))
    eh = EffectiveHessian(head, obj, st.z1, st.z2)
    lam = torch.linalg.eigvalsh(eh.H.dense())
    res = lanczos(eh.H, k=2, which="both")
    scale = float(lam.abs().max())
    assert abs(res.lambda_min - float(lam[0])) <= 1e-8 * scale
    assert abs(res.lambda_max - float(lam[-1])) <= 1e-8 * scale
    small = lanczos(eh.H, k=3, which="smallest")
    assert torch.allclose(small.eigenvalues, lam[:3], rtol=0, atol=1e-8 * scale)
    large = lanczos(eh.H, k=1, which="largest")
    assert large.eigenvalues.numel() == 1 and abs(float(large.eigenvalues[0]) - float(lam[-1])) <= 1e-8 * scale


def test_full_run_returns_every_eigenvalue_with_multiplicity() -> None:
    """Repeated eigenvalues and a null space: restarts after breakdown recover multiplicities."""
    lam = torch.tensor([-3.0, -3.0, -3.0, 0, 0, 0, 0, 0, 1.0, 2.0, 2.0, 5.0], dtype=F64)
    a = sym_matrix(12, lam, seed=2)
    res = lanczos(op_of(a), k=6, which="both")  # 2k >= n: full spectrum
    assert res.exact and res.converged
    assert torch.allclose(res.eigenvalues, lam, atol=1e-10)
    res_vec = lanczos(op_of(a), k=6, which="both", return_vectors=True)
    v = res_vec.eigenvectors
    assert v is not None and v.shape == (12, 12)
    assert torch.allclose(v.T @ v, torch.eye(12, dtype=F64), atol=1e-10)
    assert torch.allclose(a @ v, v * res_vec.eigenvalues, atol=1e-9)


def test_low_rank_operator_does_not_stall() -> None:
    """A rank-2 operator: the Krylov space is exhausted after 3 steps; extremes are still exact."""
    u = torch.randn(50, 2, generator=_gen(3), dtype=F64)
    a = u @ torch.diag(torch.tensor([4.0, -1.5], dtype=F64)) @ u.T
    lam = torch.linalg.eigvalsh(a)
    res = lanczos(op_of(a), k=1, which="both")
    assert abs(res.lambda_min - float(lam[0])) < 1e-10 * float(lam.abs().max())
    assert abs(res.lambda_max - float(lam[-1])) < 1e-10 * float(lam.abs().max())


def test_lanczos_float32_operator() -> None:
    a = sym_matrix(80, torch.linspace(-2, 7, 80), seed=4).float()
    res = lanczos(op_of(a), k=2)
    assert res.ritz_values.dtype == torch.float64  # tridiagonal solved in float64
    assert abs(res.lambda_min + 2) < 1e-4 * 7 and abs(res.lambda_max - 7) < 1e-4 * 7


def test_lanczos_bad_input() -> None:
    a = torch.eye(5, dtype=F64)
    with pytest.raises(ValueError, match="k=6"):
        lanczos(op_of(a), k=6)
    with pytest.raises(ValueError, match="which"):
        lanczos(op_of(a), k=1, which="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dim="):
        lanczos(lambda v: v, k=1)
    with pytest.raises(ValueError, match="shape"):
        Operator(lambda v: v[:-1], 5)(torch.ones(5, dtype=F64))
    with pytest.raises(ValueError, match="v0"):
        lanczos(op_of(a), k=1, v0=torch.zeros(5, dtype=F64))


def test_lanczos_non_finite_product_raises_non_finite_error() -> None:
    op = Operator(lambda v: v * float("nan"), 5)
    for kind in (NonFiniteError, ValueError, FloatingPointError):  # old handlers keep catching it
        with pytest.raises(kind, match="non-finite values at Lanczos step 0"):
            lanczos(op, k=1)


# ---------------------------------------------------------------------- SLQ
def test_slq_quadrature_is_exact_for_low_degree_moments() -> None:
    """Each probe's Gauss rule with m nodes integrates λ^p exactly for p < 2m."""
    n, m = 60, 6
    lam = torch.linspace(-1.0, 3.0, n, dtype=F64) ** 3
    a = sym_matrix(n, lam, seed=5)
    probes = (torch.randint(0, 2, (4, n), generator=_gen(6)) * 2 - 1).to(F64)
    dens = slq_density(op_of(a), num_steps=m, probes=probes)
    assert dens.n_matvec == 4 * m
    for p in range(0, 2 * m):
        exact = torch.stack([v @ torch.linalg.matrix_power(a, p) @ v / (v @ v) for v in probes])
        assert torch.allclose(dens.probe_moments(p), exact, rtol=1e-8, atol=1e-10 * float(lam.abs().max()) ** p), p


def test_slq_trace_of_powers_within_hutchinson_error() -> None:
    n = 60
    lam = torch.linspace(-2.0, 2.0, n, dtype=F64)
    a = sym_matrix(n, lam, seed=7)
    dens = slq_density(op_of(a), num_probes=40, num_steps=10, generator=_gen(8))
    for p in (1, 2, 3, 4):
        exact = float((lam**p).sum())
        per_probe = dens.probe_moments(p) * n
        stderr = float(per_probe.std() / math.sqrt(per_probe.numel()))
        assert abs(dens.trace_power(p) - exact) <= 4 * stderr + 1e-10, p
    # the density integrates to one; the fraction of eigenvalues below 0 is about one half
    grid = torch.linspace(-4, 4, 2001, dtype=F64)
    mass = float(torch.trapezoid(dens.density(grid, 0.1), grid))
    assert mass == pytest.approx(1.0, abs=1e-3)
    assert dens.fraction_below(0.0) == pytest.approx(0.5, abs=0.15)


def test_smoothed_density_is_the_formula_at_every_grid_point() -> None:
    """(1/P) Σ_p Σ_j w_pj N(x; θ_pj, σ²), NaN-padded nodes (weight 0) included, against a direct sum."""
    from geohead.geometry.density import SpectralDensity

    g = _gen(3)
    nodes = torch.randn(3, 4, generator=g, dtype=F64)
    weights = torch.rand(3, 4, generator=g, dtype=F64)
    nodes[2, 3], weights[2, 3] = float("nan"), 0.0
    weights = weights / weights.sum(1, keepdim=True)
    grid, sigma = torch.linspace(-3, 3, 7, dtype=F64), 0.4
    want = [sum(float(weights[p, j]) * math.exp(-0.5 * ((float(x) - float(nodes[p, j])) / sigma) ** 2)
                / (sigma * math.sqrt(2 * math.pi)) for p in range(3) for j in range(4) if weights[p, j] > 0) / 3
            for x in grid]
    got = SpectralDensity(nodes, weights, 10, 0).density(grid, sigma)
    assert torch.allclose(got, torch.tensor(want, dtype=F64), rtol=1e-12, atol=0)


def test_slq_small_operator_breakdown() -> None:
    """Fewer distinct eigenvalues than steps: the Krylov space is exhausted early, the rule is
    exact for every power, weights sum to one and nodes are eigenvalues."""
    lam = torch.tensor([1.0, 1.0, 2.0, 2.0, 5.0], dtype=F64)
    a = sym_matrix(5, lam, seed=9)
    probes = (torch.randint(0, 2, (3, 5), generator=_gen(1)) * 2 - 1).to(F64)
    dens = slq_density(op_of(a), num_steps=5, probes=probes)
    assert torch.allclose(dens.weights.sum(1), torch.ones(3, dtype=F64))
    assert dens.trace_power(0) == pytest.approx(5.0)
    for p in range(1, 12):
        exact = torch.stack([v @ torch.linalg.matrix_power(a, p) @ v / (v @ v) for v in probes])
        assert torch.allclose(dens.probe_moments(p), exact, rtol=1e-9), p
    nodes = dens.nodes[~dens.nodes.isnan()]
    assert bool((torch.cdist(nodes[:, None], lam.unique()[:, None]).min(1).values < 1e-9).all())


# ---------------------------------------------------------------------- Hutchinson / Frobenius
def test_hutchinson_trace_within_stated_error() -> None:
    n, P = 100, 200
    lam = torch.linspace(-1, 3, n, dtype=F64)
    a = sym_matrix(n, lam, seed=10)
    est = hutchinson_trace(op_of(a), num_probes=P, method="hutchinson", generator=_gen(11))
    exact = float(lam.sum())
    # stated error: variance 2(‖A‖_F² − Σ A_ii²)/P
    sd = math.sqrt(2 * (float(a.pow(2).sum()) - float(a.diagonal().pow(2).sum())) / P)
    assert abs(est.value - exact) <= 4 * sd
    assert est.stderr == pytest.approx(sd, rel=0.3)
    assert est.n_matvec == P


def test_hutchpp_beats_hutchinson_on_low_rank_plus_noise() -> None:
    n = 120
    lam = torch.cat([torch.tensor([50.0, 40.0, 30.0, 20.0, 10.0], dtype=F64), 0.01 * torch.ones(n - 5, dtype=F64)])
    a = sym_matrix(n, lam, seed=12)
    exact = float(lam.sum())
    errs_pp, errs_h = [], []
    for s in range(5):
        errs_pp.append(abs(hutchinson_trace(op_of(a), num_probes=30, generator=_gen(s)).value - exact))
        errs_h.append(abs(hutchinson_trace(op_of(a), num_probes=30, method="hutchinson", generator=_gen(s)).value - exact))
    assert max(errs_pp) < 0.05 * exact
    assert sum(errs_pp) < 0.2 * sum(errs_h)


def test_frobenius_norm_exact_and_estimated() -> None:
    n = 40
    lam = torch.linspace(-2, 5, n, dtype=F64)
    a = sym_matrix(n, lam, seed=13)
    exact = float(torch.linalg.norm(a))
    ex = frobenius_norm(op_of(a), exact=True)
    assert ex.value == pytest.approx(exact, rel=1e-12) and ex.stderr == 0 and ex.n_matvec == n
    for method in ("hutchinson", "hutch++"):
        est = frobenius_norm(op_of(a), num_probes=30, method=method, exact=False, generator=_gen(14))
        # stated: relative error of ‖A‖_F² about √(2/P) or better; checked at 4 standard errors
        assert abs(est.value - exact) <= 4 * est.stderr + 1e-12
        assert abs(est.value**2 - exact**2) <= 4 * math.sqrt(2 / 30) * exact**2


# ---------------------------------------------------------------------- baselines
def test_paper_shifted_power_iteration_fails_when_lambda_min_dominates() -> None:
    """The published estimator's pitfall: with |λ_min| > λ_max its "λ_max" is λ_min and its
    "λ_min" is λ_max. Lanczos gets both ends right from one Krylov space."""
    lam = torch.cat([torch.tensor([-10.0], dtype=F64), torch.linspace(-1, 2, 29, dtype=F64)])
    a = sym_matrix(30, lam, seed=15)
    lo, hi, n_mv = shifted_power_iteration(op_of(a), steps=60)
    assert n_mv == 122
    assert hi == pytest.approx(-10.0, abs=1e-3)  # "λ_max" is really λ_min
    assert 1.5 < lo <= 2.0 + 1e-9  # "λ_min" is near λ_max (a positive number, not -10)
    res = lanczos(op_of(a), k=1)
    assert res.lambda_min == pytest.approx(-10.0, abs=1e-9) and res.lambda_max == pytest.approx(2.0, abs=1e-9)
    top, _ = power_iteration(op_of(a), max_iter=500, tol=1e-12)
    assert top == pytest.approx(-10.0, abs=1e-6)  # dominant = largest magnitude
    other, _ = power_iteration(op_of(a), shift=top, max_iter=2000, tol=1e-14)
    assert other == pytest.approx(2.0, abs=1e-4)
