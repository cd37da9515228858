"""Orbits and invariance on constructed cases with known answers."""
from __future__ import annotations

import dataclasses
import json
import math

import pytest
import torch
from torch import nn

from geohead.errors import NonFiniteError
from geohead.geometry.invariance import orbit_invariance
from geohead.geometry.operators import functional_module
from geohead.geometry.orbits import build_orbits, lidar, space_geometry
from geohead.geometry.tangents import TangentInvariance, orbit_tangents, summarise_tangents, tangent_invariance
from geohead.heads import GeometricHead

F64 = torch.float64
N, C, S = 6, 3, 2
DIM = C * S * S


pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def flatten(x: torch.Tensor) -> torch.Tensor:
    return x.flatten(1)


def linear_head(w: torch.Tensor) -> nn.Linear:
    lin = nn.Linear(w.shape[1], w.shape[0], bias=False).double()
    with torch.no_grad():
        lin.weight.copy_(w)
    return lin


def shrink_along(u: torch.Tensor, a: float) -> torch.Tensor:
    """I − (1 − a) u uᵀ: scales the unit direction u by a, keeps its complement."""
    return torch.eye(u.numel(), dtype=F64) - (1 - a) * torch.outer(u, u)


def mean_sq_to_mean(x: torch.Tensor) -> float:
    return float((x - x.mean(0)).pow(2).sum(1).mean())


@pytest.mark.parametrize("a", [0.25, 0.0])
def test_head_that_shrinks_or_kills_the_tangent_direction(a: float) -> None:
    g = _gen(0)
    images = torch.randn(N, C, S, S, generator=g, dtype=F64)
    pattern = torch.randn(C, S, S, generator=g, dtype=F64)
    u = pattern.flatten() / pattern.norm()
    params = torch.linspace(-1, 1, 7, dtype=F64)
    labels = torch.tensor([0, 0, 0, 1, 1, 1])
    head = linear_head(shrink_along(u, a))
    rep = orbit_invariance(flatten, head, images, lambda x, t: x + t * pattern, params, labels=labels)

    # orbits are straight segments along u: spread = ‖pattern‖²·Var(t)
    var_t = float(params.var(unbiased=False))
    o_z = float(pattern.norm() ** 2) * var_t
    assert rep.backbone.orbit_spread == pytest.approx(o_z, rel=1e-12)
    assert rep.head.orbit_spread == pytest.approx(a**2 * o_z, rel=1e-12, abs=1e-14)
    z = torch.stack([images.flatten(1) + t * pattern.flatten() for t in params], 1).reshape(-1, DIM)
    e = z @ shrink_along(u, a).T
    t_z, t_h = mean_sq_to_mean(z), mean_sq_to_mean(e)
    assert rep.backbone.total_spread == pytest.approx(t_z, rel=1e-12)
    assert rep.head.total_spread == pytest.approx(t_h, rel=1e-12)
    assert rep.backbone.turning == pytest.approx(0.0, abs=1e-6)
    if a > 0:
        assert rep.compression == pytest.approx((o_z / t_z) / (a**2 * o_z / t_h), rel=1e-10)
        assert rep.compression_paper_var == pytest.approx(1 / a**2, rel=1e-10)
        assert rep.head.turning == pytest.approx(0.0, abs=1e-6)
        zn = nn.functional.normalize(z.reshape(N, 7, DIM), dim=-1)
        en = nn.functional.normalize(e.reshape(N, 7, DIM), dim=-1)
        o_zn = float((zn - zn.mean(1, keepdim=True)).pow(2).sum(-1).mean())
        o_en = float((en - en.mean(1, keepdim=True)).pow(2).sum(-1).mean())
        assert rep.compression_paper_l2 == pytest.approx(o_zn / o_en, rel=1e-10)
    else:
        assert rep.compression > 1e12  # the head collapses every orbit to a point (up to rounding)
    # class/orbit ratio: distance between the two class centroids over the RMS orbit radius
    cz = z.reshape(N, 7, DIM).mean(1)
    inter = float((cz[:3].mean(0) - cz[3:].mean(0)).norm())
    assert rep.backbone.class_orbit_ratio == pytest.approx(inter / math.sqrt(o_z), rel=1e-10)

    # tangents: v = pattern exactly; ‖Jv‖²/‖v‖² = a², ‖J‖_F²/d = (d − 1 + a²)/d
    t = rep.tangents
    assert t is not None and t.jacobian_exact and t.n_tangents == N * 5
    assert t.tangent_gain == pytest.approx(a**2, abs=1e-12)
    assert t.jacobian_gain == pytest.approx((DIM - 1 + a**2) / DIM, rel=1e-12)
    assert t.invariance == pytest.approx(a**2 * DIM / (DIM - 1 + a**2), abs=1e-12)
    assert t.rank_backbone == 1
    assert t.rank_head == (1 if a > 0 else 0)
    assert t.fisher_rank_loss == (0 if a > 0 else 1)
    assert t.killed_fraction == (0.0 if a > 0 else 1.0)
    json.dumps(rep.to_dict())


def test_fisher_rank_loss_with_two_tangent_directions() -> None:
    """x + t·P1 + t²·P2: tangents P1 + 2t·P2 span two directions; a head killing P2 keeps one."""
    g = _gen(1)
    images = torch.randn(N, C, S, S, generator=g, dtype=F64)
    p1 = torch.randn(C, S, S, generator=g, dtype=F64)
    p2 = torch.randn(C, S, S, generator=g, dtype=F64)
    p2 = p2 - (p2 * p1).sum() / (p1 * p1).sum() * p1  # orthogonal to p1
    u2 = p2.flatten() / p2.norm()
    params = torch.linspace(-1, 1, 9, dtype=F64)
    tf = lambda x, t: x + t * p1 + t * t * p2  # noqa: E731
    keep = orbit_invariance(flatten, linear_head(torch.eye(DIM, dtype=F64)), images, tf, params)
    kill = orbit_invariance(flatten, linear_head(shrink_along(u2, 0.0)), images, tf, params)
    assert keep.tangents.rank_backbone == 2 and keep.tangents.rank_head == 2 and keep.tangents.fisher_rank_loss == 0
    assert keep.tangents.invariance == pytest.approx(1.0, rel=1e-12)  # the identity treats all directions alike
    assert kill.tangents.rank_backbone == 2 and kill.tangents.rank_head == 1 and kill.tangents.fisher_rank_loss == 1
    assert 0 < kill.tangents.invariance < 1
    assert keep.backbone.turning > 0  # a parabola bends


def test_turning_and_paper_curvature_of_a_circular_orbit() -> None:
    g = _gen(2)
    a_pat = torch.randn(C, S, S, generator=g, dtype=F64)
    b_pat = torch.randn(C, S, S, generator=g, dtype=F64)
    b_pat = b_pat - (b_pat * a_pat).sum() / (a_pat * a_pat).sum() * a_pat
    b_pat = b_pat * a_pat.norm() / b_pat.norm()  # orthogonal, same norm: a circle of radius ‖A‖
    step = 0.3
    params = step * torch.arange(8, dtype=F64)
    images = torch.zeros(2, C, S, S, dtype=F64)
    tf = lambda x, t: x + math.cos(t) * a_pat + math.sin(t) * b_pat  # noqa: E731
    orbits = build_orbits(flatten, nn.Identity(), images, tf, params)
    geo = space_geometry(orbits.backbone)
    assert geo.turning == pytest.approx(step, rel=1e-10)
    assert geo.curvature_paper == pytest.approx(2 * (1 - math.cos(step)), rel=1e-10)


def naive_lidar(points: torch.Tensor, delta: float, eps: float) -> float:
    n, q, d = points.shape
    mu_c = points.mean(1)
    mu = mu_c.mean(0)
    sb = sum(torch.outer(m - mu, m - mu) for m in mu_c) / n
    sw = sum(torch.outer(x - mu_c[i], x - mu_c[i]) for i in range(n) for x in points[i]) / (n * q)
    sw = sw + delta * torch.eye(d, dtype=F64)
    ew, vw = torch.linalg.eigh(sw)
    isq = vw @ torch.diag(ew.rsqrt()) @ vw.T
    lam = torch.linalg.eigvalsh(isq @ sb @ isq).clamp_min(0)
    p = lam / lam.sum() + eps
    return math.exp(float(-(p * p.log()).sum()))


@pytest.mark.parametrize("shape", [(5, 4, 3), (4, 3, 30)])
def test_lidar_matches_the_naive_full_dimensional_formula(shape: tuple[int, int, int]) -> None:
    pts = torch.randn(*shape, generator=_gen(3), dtype=F64)
    pts[..., 0] *= 5.0
    assert lidar(pts) == pytest.approx(naive_lidar(pts, 1e-4, 1e-7), rel=1e-9)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, prefix + k + "."))
        elif isinstance(v, list):
            out.update({f"{prefix}{k}[{i}]": x for i, x in enumerate(v)})
        else:
            out[prefix + k] = v
    return out


def test_roll_orbits_through_a_smooth_head_and_batching() -> None:
    """A discrete rotation (torch.roll) sweep through a small conv encoder and a BN head."""
    torch.manual_seed(4)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.Tanh(), nn.AdaptiveAvgPool2d(2), nn.Flatten()).double().eval()
    head = GeometricHead(16, 5, hidden_dim=8, depth=3, activation="silu")
    before = {k: v.clone() for k, v in head.state_dict().items()}
    images = torch.rand(7, 3, 6, 6, generator=_gen(5), dtype=F64)
    roll = lambda x, t: torch.roll(x, shifts=int(t), dims=3)  # noqa: E731
    params = [0, 1, 2, 3, 4]
    with torch.no_grad():
        big = orbit_invariance(conv, head, images, roll, params)
        small = orbit_invariance(conv, head, images, roll, params, batch_size=3)
    flat_big, flat_small = _flat(big.to_dict()), _flat(small.to_dict())
    assert flat_big.keys() == flat_small.keys()
    for key, val in flat_big.items():
        assert flat_small[key] == (pytest.approx(val, rel=1e-9) if isinstance(val, float) else val), key
    assert big.head.dim == 5 and big.backbone.dim == 16 and big.n_images == 7
    t = big.tangents
    assert t is not None and t.jacobian_exact and t.n_tangents == 7 * 3  # d = 16 <= 16 probes: exact
    # F_T averages per-point matrices of rank <= 5 (the head's width) over 21 points: its rank
    # can exceed 5, never the tangents' own rank
    assert t.rank_backbone >= t.rank_head >= 1 and t.fisher_rank_loss == t.rank_backbone - t.rank_head
    assert big.compression > 0 and big.head.lidar >= 1
    for k, v in head.state_dict().items():
        assert torch.equal(v, before[k])
    assert head.training  # flags restored


def test_tangent_invariance_hutchinson_is_unbiased() -> None:
    torch.manual_seed(6)
    head = GeometricHead(20, 6, hidden_dim=12, depth=3, activation="gelu").double()
    z = torch.randn(64, 20, generator=_gen(7), dtype=F64)
    v = torch.randn(64, 20, generator=_gen(8), dtype=F64)
    exact = tangent_invariance(head, z, v, exact=True)
    est = tangent_invariance(head, z, v, num_probes=64, exact=False, generator=_gen(9))
    assert exact.jacobian_exact and not est.jacobian_exact
    assert est.tangent_gain == pytest.approx(exact.tangent_gain, rel=1e-12)  # J v itself is exact
    assert est.jacobian_gain == pytest.approx(exact.jacobian_gain, rel=0.05)


def test_invariance_bad_input() -> None:
    images = torch.rand(3, 3, 4, 4)
    head = nn.Identity()
    with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
        build_orbits(flatten, head, images[0], lambda x, t: x, [0.0])
    with pytest.raises(ValueError, match="floating point"):
        build_orbits(flatten, head, (images * 255).to(torch.uint8), lambda x, t: x, [0.0])
    with pytest.raises(ValueError, match="encode"):
        build_orbits(lambda x: x, head, images, lambda x, t: x, [0.0])
    with pytest.raises(ValueError, match="transform"):
        build_orbits(flatten, head, images, lambda x, t: x[:1], [0.0])
    with pytest.raises(ValueError, match="labels"):
        build_orbits(flatten, head, images, lambda x, t: x, [0.0], labels=torch.zeros(2))
    with pytest.raises(NonFiniteError, match="non-finite"):
        build_orbits(lambda x: flatten(x) / 0.0, head, images, lambda x, t: x, [0.0])
    with pytest.raises(NonFiniteError, match="non-finite"):
        tangent_invariance(head, torch.full((2, 3), float("nan")), torch.ones(2, 3))
    with pytest.raises(ValueError, match="at least 3"):
        orbit_tangents(build_orbits(flatten, head, images, lambda x, t: x + t, [0.0, 1.0]))
    rep = orbit_invariance(flatten, head, images, lambda x, t: x + t, [0.0, 1.0])
    assert rep.tangents is None


def test_fisher_rank_never_exceeds_the_tangent_rank() -> None:
    """One tangent direction at many points of a curved head: J(z_m) v differ from point to point,
    so the pooled [J(z_m) v] has rank > 1, but the head cannot know more than one direction."""
    torch.manual_seed(0)
    head = GeometricHead(6, 6, hidden_dim=32, depth=3, activation="tanh", norm=None).double().eval()
    z = 3 * torch.randn(40, 6, dtype=torch.float64)
    v = torch.zeros_like(z)
    v[:, 0] = 1.0
    t = tangent_invariance(head, z, v)
    pooled = torch.func.jvp(head, (z,), (v,))[1]
    assert int(torch.linalg.matrix_rank(pooled, rtol=1e-3)) > 1  # what the old definition counted
    assert t.rank_backbone == 1 and t.rank_head == 1 and t.fisher_rank_loss == 0


# ---------------------------------------------------------------------- batched products vs the reference
def _reference_tangent_invariance(head: nn.Module, z: torch.Tensor, v: torch.Tensor, *, rtol: float = 1e-3,
                                  num_probes: int = 16, exact: bool | None = None, bn_mode: str = "eval",
                                  generator: torch.Generator | None = None) -> TangentInvariance:
    """The unbatched definition (the library's implementation before the batched one replaced it):
    one forward-mode call per probe for ‖J_h‖_F² and one per tangent-basis direction (and 64 points)
    for the Fisher information F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q."""
    dtype = z.dtype
    h = functional_module(head, dtype=dtype, device=z.device, bn_mode=bn_mode)
    m, d = z.shape
    _, jv = torch.func.jvp(h, (z,), (v.to(dtype),))
    exact = d <= num_probes if exact is None else exact
    jf = torch.zeros(m, dtype=F64)
    if exact:
        for i in range(d):
            u = torch.zeros_like(z)
            u[:, i] = 1
            jf += torch.func.jvp(h, (z,), (u,))[1].to(F64).pow(2).sum(1)
    else:
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        for _ in range(num_probes):
            u = (torch.randint(0, 2, (m, d), generator=g) * 2 - 1).to(dtype=dtype)
            jf += torch.func.jvp(h, (z,), (u,))[1].to(F64).pow(2).sum(1)
        jf /= num_probes

    def fisher(q: torch.Tensor, chunk: int = 64) -> torch.Tensor:
        q = q.to(dtype)
        out = torch.zeros(q.shape[1], q.shape[1], dtype=F64)
        for i in range(0, m, chunk):
            zc = z[i:i + chunk]
            jq = torch.stack([torch.func.jvp(h, (zc,), (q[:, j].expand_as(zc),))[1].to(F64) for j in range(q.shape[1])], -1)
            out += torch.einsum("mkr,mks->rs", jq, jq)
        return out / m

    return summarise_tangents(v, jv, jf, d, rtol, bool(exact), fisher)


@pytest.mark.parametrize("d, probes, depth, bn_mode", [
    (6, 16, 3, "eval"), (24, 5, 2, "eval"), (24, 5, 1, "eval"), (24, 5, 3, "train"), (6, 16, 2, "train"),
])
def test_batched_tangent_invariance_equals_the_reference(d, probes, depth, bn_mode) -> None:
    """Same gains, invariance, ranks (incl. a Fisher-rank loss) as the unbatched definition, with
    products split over several calls (max_batch=7) and in BatchNorm train mode (M ≤ 64 points)."""
    torch.manual_seed(0)
    # the linear head maps to 2 dimensions: it must lose one direction of the 3-d tangent span
    head = GeometricHead(d, 2 if depth == 1 else 4, hidden_dim=9, depth=depth, activation="gelu", norm="batch")
    head = head.double().eval()
    with torch.no_grad():  # non-trivial running statistics
        head.mlp.norm0.running_mean.normal_() if depth > 1 else None
    z = torch.randn(15, d, dtype=F64)
    v = torch.randn(15, 3, dtype=F64) @ torch.randn(3, d, dtype=F64)  # a 3-d tangent span
    v[4] = 0.0  # a zero tangent is skipped by both
    ref = _reference_tangent_invariance(head, z, v, num_probes=probes, bn_mode=bn_mode, generator=_gen(3))
    got = tangent_invariance(head, z, v, num_probes=probes, bn_mode=bn_mode, generator=_gen(3), max_batch=7)
    r, g = dataclasses.asdict(ref), dataclasses.asdict(got)
    for key in r:
        assert g[key] == pytest.approx(r[key], rel=1e-10, abs=1e-14), key
    assert got.rank_backbone == 3 and got.n_tangents == 14
    if bn_mode == "eval":  # (train mode: batch centring removes a direction shared by all points)
        assert got.fisher_rank_loss == (1 if depth == 1 else 0)


def test_the_report_composes_tangents_of_a_few_orbits_and_local_invariance_exactly() -> None:
    """``tangent_orbits``/``local`` (what the search's criteria use): the report's parts are the
    parts computed by hand on the first orbits, bit for bit, and compression still uses all."""
    from geohead.geometry.orbits import Orbits, compression
    from geohead.geometry.local_invariance import between_image_directions, effective_span, local_invariance

    torch.manual_seed(0)
    images = torch.rand(N, C, 2 * S, 2 * S, dtype=F64)
    head = GeometricHead(DIM, 5, hidden_dim=7, depth=2, activation="silu").double().eval()
    encode = lambda x: nn.functional.avg_pool2d(x, 2).flatten(1)  # noqa: E731

    def shift(x: torch.Tensor, t: float) -> torch.Tensor:
        return x * (1 + t) + 0.1 * t ** 2

    params = [-0.2, -0.1, 0.0, 0.1, 0.2]
    rep = orbit_invariance(encode, head, images, shift, params, num_probes=4, generator=_gen(3), tangent_orbits=3, local=True)
    orb = build_orbits(encode, head, images, shift, params)
    few = Orbits(orb.params, orb.backbone[:3], orb.head[:3])
    z, v = orbit_tangents(few)
    ti = tangent_invariance(head, z, v, num_probes=4, generator=_gen(3))
    li = local_invariance(head, z, v, between_image_directions(few), span=effective_span(orb.backbone.flatten(0, 1)))
    assert rep.tangents == ti and rep.local == li
    assert rep.compression == compression(space_geometry(orb.backbone), space_geometry(orb.head))["relative"]
    assert orbit_invariance(encode, head, images, shift, params).local is None
