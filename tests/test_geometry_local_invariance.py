"""The local invariance ratio and the soft Fisher rank (geohead.geometry.local_invariance) against dense
per-point Jacobians (torch.func.jacrev, float64), and the changes they must not see."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from geohead.geometry.orbits import Orbits
from geohead.geometry.local_invariance import (
    between_image_directions, effective_rank, effective_span, local_invariance,
)
from geohead.geometry.tangents import orbit_tangents, tangent_invariance
from geohead.heads import GeometricHead

F64 = torch.float64
N, P, D, K = 5, 6, 7, 5

pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def low_rank_orbits(seed: int = 0, rank: int = 4) -> Orbits:
    """Backbone orbits (N, P, D) in a rank-``rank`` subspace of R^D (the rest of R^D unused, like
    a trained backbone's), moving along curved paths."""
    g = _gen(seed)
    basis, _ = torch.linalg.qr(torch.randn(D, rank, generator=g, dtype=F64))
    centres = 2 * torch.randn(N, rank, generator=g, dtype=F64)
    t = torch.linspace(-1, 1, P, dtype=F64)
    a, b = torch.randn(2, rank, generator=g, dtype=F64)
    coords = centres[:, None] + t[None, :, None] * a + (t[None, :, None] ** 2) * b * 0.3
    z = coords @ basis.T
    return Orbits(t, z, torch.zeros(N, P, 1, dtype=F64))


def smooth_head(seed: int = 0, in_dim: int = D) -> nn.Module:
    torch.manual_seed(seed)
    return GeometricHead(in_dim, K, hidden_dim=12, depth=2, activation="silu", norm=None).double()


def dense_reference(head: nn.Module, z, v, u, span, rtol=1e-3):
    """The definition, point by point with dense Jacobians."""
    jac = [torch.func.jacrev(lambda x: head(x[None])[0])(zm).detach() for zm in z]  # each (K, D)
    proj = span @ span.T
    gt, gb = [], []
    for j, vm, um in zip(jac, v, u):
        pv, pu = proj @ vm, proj @ um
        gt.append(float((j.detach() @ pv).pow(2).sum() / pv.pow(2).sum()))
        gb.append(float((j.detach() @ pu).pow(2).sum() / pu.pow(2).sum()))
    pv_all = v @ proj
    _, sv, wh = torch.linalg.svd(pv_all, full_matrices=False)
    r = int((sv > rtol * sv.max()).sum())
    q = wh[:r].T
    fisher = sum(q.T @ j.T @ j @ q for j in jac) / len(jac)
    lam = torch.linalg.eigvalsh(fisher).clamp_min(0)
    p = lam / lam.sum()
    p = p[p > 0]
    erank = math.exp(-float((p * p.log()).sum()))
    return sum(gt) / len(gt) / (sum(gb) / len(gb)), r, erank


def test_local_invariance_equals_its_definition() -> None:
    orb = low_rank_orbits()
    z, v = orbit_tangents(orb)
    u = between_image_directions(orb)
    head = smooth_head()
    span = effective_span(orb.backbone.reshape(-1, D))
    assert span.shape == (D, 4)  # the data's rank, not D
    li = local_invariance(head, z, v, u, span=span)
    ratio, r, erank = dense_reference(head, z, v, u, span)
    assert li.ratio == pytest.approx(ratio, rel=1e-10)
    assert li.tangent_rank == r and li.fisher_effective_rank == pytest.approx(erank, rel=1e-10)
    assert li.fisher_soft_rank_loss == pytest.approx(r - erank, rel=1e-10) and li.fisher_soft_rank_loss >= 0
    assert li.span_rank == 4 and li.tangent_in_span == pytest.approx(1.0, rel=1e-12)
    assert li.n_tangents == N * (P - 2)


def test_between_image_directions_align_with_the_tangents_base_points() -> None:
    orb = low_rank_orbits()
    z, _ = orbit_tangents(orb)
    u = between_image_directions(orb)
    zz = z.view(N, P - 2, D)
    assert torch.equal(u.view(N, P - 2, D)[0], zz[1] - zz[0])
    assert torch.equal(u.view(N, P - 2, D)[-1], zz[0] - zz[-1])


def test_ratio_and_soft_rank_ignore_isometries_output_width_and_null_dimensions() -> None:
    """What the head does on the data is unchanged by (a) an orthogonal map after it, (b) an
    isometric embedding into a wider output, (c) extra feature dimensions the data never uses
    (even where the head's Jacobian along them is not zero). The random-direction normalisation
    of tangent_invariance moves under (c): the rank artefact."""
    orb = low_rank_orbits(1)
    z, v = orbit_tangents(orb)
    u = between_image_directions(orb)
    head = smooth_head(1)
    base = local_invariance(head, z, v, u)
    g = _gen(5)
    q, _ = torch.linalg.qr(torch.randn(K, K, generator=g, dtype=F64))
    wide, _ = torch.linalg.qr(torch.randn(3 * K, K, generator=g, dtype=F64))
    for post in (q, wide):
        lin = nn.Linear(K, post.shape[0], bias=False).double()
        with torch.no_grad():
            lin.weight.copy_(post)
        other = local_invariance(nn.Sequential(head, lin), z, v, u)
        assert other.ratio == pytest.approx(base.ratio, rel=1e-10)
        assert other.fisher_effective_rank == pytest.approx(base.fisher_effective_rank, rel=1e-10)
    extra = 9
    pad = torch.zeros(z.shape[0], extra, dtype=F64)
    mix = torch.cat([torch.eye(D, dtype=F64), 3 * torch.randn(D, extra, generator=g, dtype=F64)], 1)  # reads the null dims too
    lin = nn.Linear(D + extra, D, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(mix)
    padded_head = nn.Sequential(lin, head)
    zp, vp, up = (torch.cat([x, pad], 1) for x in (z, v, u))
    padded = local_invariance(padded_head, zp, vp, up)
    assert padded.span_rank == base.span_rank
    assert padded.ratio == pytest.approx(base.ratio, rel=1e-9)
    assert padded.fisher_effective_rank == pytest.approx(base.fisher_effective_rank, rel=1e-9)
    old, old_padded = tangent_invariance(head, z, v, exact=True), tangent_invariance(padded_head, zp, vp, exact=True)
    assert old.tangent_gain == pytest.approx(old_padded.tangent_gain, rel=1e-9)
    assert abs(old_padded.invariance / old.invariance - 1) > 0.1  # the random direction's gain moved


def test_soft_rank_sees_a_squeezed_tangent_direction_the_threshold_does_not() -> None:
    """Tangents span e1, e2; images differ along e3. A linear head scaling e2 by 0.01: the
    thresholded Fisher-rank loss is 0 (1e-4 is above rtol²), the soft loss ≈ 1, and the local
    ratio sees the squeezed tangents against the kept image differences."""
    g = _gen(3)
    n_img = 6
    t = torch.linspace(-1, 1, P, dtype=F64)
    z = torch.zeros(n_img, P, 4, dtype=F64)
    z[:, :, 2] = torch.randn(n_img, 1, generator=g, dtype=F64) * 3
    z[:, :, 0] = t * torch.rand(n_img, 1, generator=g, dtype=F64)
    z[:, :, 1] = t * torch.rand(n_img, 1, generator=g, dtype=F64)
    orb = Orbits(t, z, z)
    zz, v = orbit_tangents(orb)
    u = between_image_directions(orb)
    lin = nn.Linear(4, 4, bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(torch.diag(torch.tensor([1.0, 0.01, 1.0, 1.0], dtype=F64)))
    li = local_invariance(lin, zz, v, u)
    old = tangent_invariance(lin, zz, v, exact=True)
    assert old.fisher_rank_loss == 0 and old.rank_backbone == 2
    p = torch.tensor([1.0, 1e-4], dtype=F64) / 1.0001
    assert li.tangent_rank == 2
    assert li.fisher_effective_rank == pytest.approx(math.exp(-float((p * p.log()).sum())), rel=1e-10)
    assert 0.9 < li.fisher_soft_rank_loss < 1.0
    w = torch.tensor([1.0, 1e-4, 1.0, 1.0], dtype=F64)  # the head's gain per coordinate, squared
    want_t = float(((v.pow(2) * w).sum(1) / v.pow(2).sum(1)).mean())
    want_b = float(((u.pow(2) * w).sum(1) / u.pow(2).sum(1)).mean())
    assert li.ratio == pytest.approx(want_t / want_b, rel=1e-10) and li.ratio < 0.7


def test_effective_span_and_rank_on_known_spectra() -> None:
    g = _gen(4)
    q, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=F64))
    coords = torch.randn(4000, 6, generator=g, dtype=F64)
    coords = (coords - coords.mean(0)) @ torch.linalg.inv(torch.linalg.cholesky(torch.cov(coords.T))).T  # white
    x = coords * torch.tensor([10.0, 3.0, 1.0, 0.2, 1e-5, 0.0], dtype=F64) @ q.T
    # variances 100, 9, 1, 0.04, 1e-10, 0: the first four are at least 1e-4 of the largest
    s = effective_span(x)
    assert s.shape == (6, 4) and torch.allclose(s.T @ s, torch.eye(4, dtype=F64), atol=1e-12)
    assert effective_span(x, 0.05).shape == (6, 2)
    assert effective_rank(torch.tensor([2.0, 2.0, 2.0, 0.0])) == pytest.approx(3.0, rel=1e-12)
    assert effective_rank(torch.zeros(3)) == 0.0
    with pytest.raises(ValueError, match="rtol"):
        effective_span(x, 0.0)
