"""Linear heads: induced metric and Thm 3.1's implicit subspace whitening."""
from __future__ import annotations

import json
import warnings

import pytest
import torch
from torch import nn

from geohead.geometry.linear import induced_metric, isotropy, linear_head_geometry, linear_weight
from geohead.heads import GeometricHead

F64 = torch.float64


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def anisotropic_features(n: int = 400, d: int = 6, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = _gen(seed)
    q, _ = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=F64))
    scales = torch.logspace(0, 2, d, dtype=F64)  # std from 1 to 100: covariance condition 1e4
    z = torch.randn(n, d, generator=g, dtype=F64) * scales @ q.T + 2.0
    return z, q


def sample_cov(z: torch.Tensor) -> torch.Tensor:
    zc = z - z.mean(0)
    return zc.T @ zc / (z.shape[0] - 1)


def test_isotropy_of_known_spectrum() -> None:
    iso = isotropy(torch.diag(torch.tensor([4.0, 2.0, 2.0, 0.0], dtype=F64)))
    assert iso.rank == 3 and iso.dim == 4
    assert iso.condition == pytest.approx(2.0)
    mean = 8.0 / 3
    expected = ((4 / mean - 1) ** 2 + 2 * (2 / mean - 1) ** 2) ** 0.5
    assert iso.deviation == pytest.approx(expected) and iso.deviation_normalized == pytest.approx(expected / 3**0.5)
    assert isotropy(torch.eye(5)).deviation == pytest.approx(0.0, abs=1e-15)


def test_whitening_matrix_makes_embeddings_isotropic() -> None:
    z, _ = anisotropic_features()
    cov = sample_cov(z)
    lam, u = torch.linalg.eigh(cov)
    w = u @ torch.diag(lam.rsqrt()) @ u.T  # ZCA: W Σ Wᵀ = I
    geo = linear_head_geometry(w, z)
    assert geo.embeddings.condition == pytest.approx(1.0, abs=1e-9)
    assert geo.embeddings.deviation < 1e-9
    assert geo.features.condition == pytest.approx(float(lam[-1] / lam[0]), rel=1e-10)
    assert geo.whitening_gain == pytest.approx(geo.features.condition, rel=1e-9)
    assert torch.allclose(induced_metric(w), torch.linalg.inv(cov), rtol=1e-9, atol=1e-12)
    assert geo.metric_rank == 6
    json.dumps(geo.to_dict())


def test_narrow_head_whitens_one_subspace() -> None:
    """k < d: W = Λ_k^{-1/2} U_kᵀ is isotropic on its k-dimensional range; WᵀW has rank k."""
    z, _ = anisotropic_features()
    lam, u = torch.linalg.eigh(sample_cov(z))
    w = torch.diag(lam[-3:].rsqrt()) @ u[:, -3:].T
    geo = linear_head_geometry(nn.Linear(6, 3, bias=False).double().requires_grad_(False).to(F64), z)  # random head
    assert geo.embeddings.rank == 3 and geo.embeddings.condition > 1.5
    white = linear_head_geometry(w, z)
    assert white.embeddings.rank == 3 and white.embeddings.condition == pytest.approx(1.0, abs=1e-9)
    assert white.metric_rank == 3


def test_geometric_head_whiten_init_is_an_implicit_whitening() -> None:
    z, _ = anisotropic_features(seed=1)
    head = GeometricHead(6, 6, depth=1, norm=None)
    raw = linear_head_geometry(head, z.float())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        head.whiten_(z.float())
    geo = linear_head_geometry(head, z.float())
    assert geo.embeddings.condition < 1.001  # float32 weights
    assert geo.whitening_gain > 1e3 and raw.whitening_gain < geo.whitening_gain


def test_batchnorm_output_is_folded_into_the_weight() -> None:
    torch.manual_seed(2)
    head = GeometricHead(5, 4, depth=1, norm=None, last_norm="batch").double()
    bn = head.mlp.last_norm
    bn.running_mean.uniform_(-1, 1)
    bn.running_var.uniform_(0.5, 3)
    bn.weight.data.uniform_(0.5, 2)
    head.eval()
    w = linear_weight(head)
    z = torch.randn(7, 5, dtype=F64)
    with torch.no_grad():
        diff = head(z) - head(torch.zeros(1, 5, dtype=F64))
    assert torch.allclose(diff, z @ w.T, atol=1e-12)


def test_linear_geometry_bad_input() -> None:
    with pytest.raises(ValueError, match="not linear"):
        linear_weight(GeometricHead(5, 4, hidden_dim=8, depth=3))
    with pytest.raises(ValueError, match="not linear"):
        linear_weight(GeometricHead(5, 4, depth=1, norm=None, last_norm="layer"))
    with pytest.raises(ValueError, match=r"\(N, 5\)"):
        linear_head_geometry(torch.randn(3, 5), torch.randn(10, 4))
    with pytest.raises(ValueError, match="cannot read"):
        linear_weight(nn.ReLU())
