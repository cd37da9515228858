"""Thm 4.1 at collapsed states for every objective, and the collapse monitors on known spectra."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch
from torch import nn

from geohead.errors import NonFiniteError
from geohead.geometry.collapse import PREMISE_SETTINGS, escape_curvature, escape_premise
from geohead.geometry.escape import RECORD_KEYS, EscapeCurvature, EscapeReference, EscapeSettings
from geohead.geometry.monitors import alpha_req, collapse_monitors, normalized_std, rankme, within_rank_condition
from geohead.heads import GeometricHead
from geohead.objectives import CollapsedState, get_objective

B, D, K, HID = 8, 4, 4, 8
F64 = torch.float64
CASES = [
    ("barlow", {}), ("vicreg", {}), ("simclr", {}), ("byol", {}), ("simsiam", {}), ("dino", {"out_dim": K}),
    ("byol", {"distance": "mse"}), ("simsiam", {"distance": "mse"}),
]
IDS = [n + ("-" + kw["distance"] if "distance" in kw else "") for n, kw in CASES]
MSE = [c for c in CASES if c[1].get("distance") == "mse"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def setup(name: str, kw: dict, act: str, seed: int = 0):
    torch.manual_seed(seed)
    obj = get_objective(name, **kw)
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation=act)
    pred = GeometricHead(K, K, hidden_dim=HID, depth=2, activation=act) if obj.needs_predictor else None
    return obj, head, pred


def run(name: str, kw: dict, act: str, **extra):
    obj, head, pred = setup(name, kw, act)
    settings = EscapeSettings(batch_size=B, k=extra.pop("k", B * D // 2), **extra)
    return escape_curvature(head, obj, settings=settings, predictor=pred, generator=_gen(0))


# ---------------------------------------------------------------------- Thm 4.1
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_linear_and_relu_heads_have_no_interaction_term(name: str, kw: dict) -> None:
    for act in ("identity", "relu"):
        r = run(name, kw, act)
        assert r.m_over_h < 1e-12, act
        assert r.head_curvature == 0.0 and r.head_negative_curvature == 0.0, act
        assert not r.reference.gradient_vanishes, act
        # along the escape direction all curvature is the pullback's
        assert r.pullback_curvature == pytest.approx(r.lambda_min_H, abs=1e-8 * abs(r.lambda_max_H))


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_smooth_heads_have_interaction_term(name: str, kw: dict) -> None:
    for act in ("silu", "gelu"):
        r = run(name, kw, act)
        assert r.m_over_h > 1e-3, act
        assert r.exact  # k >= dim/2: full spectra of H_eff
        # the split along the escape direction is exact
        assert r.head_curvature + r.pullback_curvature == pytest.approx(r.lambda_min_H, abs=1e-8 * r.lambda_max_H)


@pytest.mark.parametrize("name,kw", MSE, ids=["byol-mse", "simsiam-mse"])
def test_psd_objective_linear_and_relu_heads_have_no_negative_curvature(name: str, kw: dict) -> None:
    for act in ("identity", "relu"):
        r = run(name, kw, act)
        assert r.reference.objective_psd and r.reference.premise_holds
        assert r.exact and r.num_negative_H == 0, act
        assert r.lambda_min_H >= -1e-10 * r.lambda_max_H, act


@pytest.mark.parametrize("name,kw", MSE, ids=["byol-mse", "simsiam-mse"])
def test_psd_objective_smooth_heads_bend_the_escape_direction_through_m(name: str, kw: dict) -> None:
    """Thm 4.1's mechanism: G is PSD (premise), the negative curvature comes from the head. The
    default state (spread 1e-2, a predictor between head and target) is no equilibrium, so this
    negative curvature is not called a saddle."""
    for act in ("silu", "gelu"):
        r = run(name, kw, act)
        assert r.reference.premise_holds and r.frame == "ambient"
        assert not r.stationary and r.equilibrium == "none" and not r.saddle
        assert r.gradient_relative > 1e-3
        assert r.reference.lambda_min_G >= -1e-10 * r.lambda_max_H and r.reference.num_negative_G == 0
        assert r.num_negative_H > 0 and r.lambda_min_H < 0
        assert r.head_curvature < 0 and r.pullback_curvature >= -1e-12 * r.lambda_max_H
        assert r.head_share >= 1.0 and r.head_negative_curvature > 0
        for theta, qg, qm in r.negative_directions:
            assert qm <= theta + 1e-10 * r.lambda_max_H  # G adds non-negative curvature


def test_barlow_objective_is_indefinite_so_g_is_negative_even_for_a_linear_head() -> None:
    r = run("barlow", {}, "identity")
    ref = r.reference
    assert not ref.objective_psd and not ref.premise_holds
    assert ref.num_negative_objective > 0 and ref.lambda_min_objective < 0
    assert ref.num_negative_G > 0 and ref.lambda_min_G < 0
    assert r.lambda_min_H == pytest.approx(ref.lambda_min_G, rel=1e-8)  # M = 0


def test_vanishing_gradient_is_flagged_and_kills_m() -> None:
    """Exact collapse for MSE to the head's own output: ∇_e L = 0, so M = 0 even for SiLU."""
    obj = get_objective("byol", distance="mse")
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="silu")
    z = torch.randn(B, D, generator=_gen(1), dtype=F64)
    state = CollapsedState(z, z.clone(), "complete", 0, 0.0)
    r = escape_curvature(head, obj, settings=EscapeSettings(k=4), predictor=nn.Identity(), state=state)
    assert r.reference.grad_norm == 0.0 and r.reference.gradient_vanishes and not r.reference.premise_holds
    assert r.m_over_h == 0.0


def test_cosine_objectives_are_measured_in_the_tangent_frame() -> None:
    r = run("simsiam", {}, "silu")
    assert r.frame == "tangent"
    assert r.reference.lambda_min_H_ambient is not None and r.reference.objective_psd_ambient is not None
    amb = run("simsiam", {}, "silu", frame="ambient")
    assert amb.frame == "ambient" and amb.lambda_min_H == pytest.approx(r.reference.lambda_min_H_ambient, rel=1e-8)
    r2 = run("barlow", {}, "silu")
    assert r2.frame == "ambient" and r2.reference.lambda_min_H_ambient is None and r2.reference.objective_psd_ambient is None
    with pytest.raises(ValueError, match="scale-invariant"):
        run("barlow", {}, "silu", frame="tangent")


def test_dino_prototype_head_is_curved_even_with_relu() -> None:
    """DINO's L2-normalised bottleneck is smooth: a ReLU DINO head still has M != 0."""
    obj = get_objective("dino", out_dim=6)
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="relu", norm=None, prototypes=6)
    r = escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, k=4))
    assert r.m_over_h > 1e-3


def test_dimensional_collapse_fast_mode_and_json() -> None:
    obj, head, _ = setup("vicreg", {}, "silu")
    acc = escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, kind="dimensional", rank=2, k=3))
    assert acc.kind == "dimensional" and acc.rank == 2 and acc.dtype == "float64"
    fast = escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, kind="dimensional", rank=2, mode="fast"))
    assert fast.dtype == "float32" and fast.k == 2
    assert fast.lambda_max_H == pytest.approx(acc.lambda_max_H, rel=1e-3)
    screen = escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, kind="dimensional", rank=2, mode="fast",
                                                                 pullback=False, objective_spectrum=False, m_over_h=False))
    assert screen.reference.lambda_min_G is None and screen.reference.premise_holds is None and screen.m_over_h is None
    assert screen.lambda_min_H == fast.lambda_min_H
    assert screen.head_curvature == pytest.approx(fast.head_curvature, rel=1e-4, abs=1e-7)
    assert screen.n_matvec < fast.n_matvec / 2
    d = json.loads(json.dumps(acc.to_dict()))
    assert d["objective"] == "vicreg" and d["head"]["activation"] == "silu" and "premise_holds" in d


def test_escape_curvature_bad_input() -> None:
    obj, head, pred = setup("byol", {}, "silu")
    with pytest.raises(ValueError, match="needs a predictor"):
        escape_curvature(head, obj, settings=EscapeSettings(batch_size=B))
    with pytest.raises(ValueError, match="k=1000"):
        escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, k=1000), predictor=pred)
    with pytest.raises(ValueError, match="collapse kind"):
        escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, kind="partial"), predictor=pred)
    with pytest.raises(ValueError, match="mode"):
        EscapeSettings(batch_size=B, mode="quick")  # type: ignore[arg-type]



def test_settings_are_checked_when_made() -> None:
    for bad in (dict(mode="quick"), dict(k=0), dict(k=True), dict(refine=-1), dict(refine=1.5), dict(frame="sphere")):
        with pytest.raises(ValueError):
            EscapeSettings(**bad)
    s = EscapeSettings(mode="fast", k=3)
    assert s.budget()["k"] == 3 and s.budget()["dtype"] == torch.float32 and s.budget()["max_iter"] == 10
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.k = 4  # type: ignore[misc]


def test_the_answer_keeps_its_reference_apart_and_writes_one_flat_record() -> None:
    """EscapeCurvature holds the head's answer in the frame's H, EscapeReference what the objective
    and the pullback do; to_dict writes both flat, in the order of RECORD_KEYS (the ``escape``
    section of geohead diagnose's JSON), so files keep their layout."""
    r = run("simsiam", {}, "silu")
    d = r.to_dict()
    assert tuple(d) == RECORD_KEYS
    answer = {f.name for f in dataclasses.fields(EscapeCurvature)} - {"reference"}
    reference = {f.name for f in dataclasses.fields(EscapeReference)}
    assert not answer & reference and set(RECORD_KEYS) == answer | reference | {"premise_holds", "saddle"}
    assert d["premise_holds"] == r.reference.premise_holds and d["lambda_min_G"] == r.reference.lambda_min_G
    assert r.frame == "tangent" and r.reference.lambda_min_H_ambient is not None
    assert d["lambda_min_H_ambient"] == r.reference.lambda_min_H_ambient


def test_escape_premise_is_the_reference_of_the_escape_curvature() -> None:
    """Thm 4.1's premise through a head is the reference part of escape_curvature in
    PREMISE_SETTINGS: MSE to a target (∇²_e L = (2/k)·I) holds at the perturbed state, Barlow Twins
    (batch standardisation) fails."""
    obj, head, _ = setup("byol", {"distance": "mse"}, "silu")
    state = obj.collapsed_state(B, D, generator=_gen(0))
    p = escape_premise(head, obj, state, predictor=nn.Identity(), generator=_gen(3), reference_head="a SiLU head")
    esc = escape_curvature(head, obj, settings=PREMISE_SETTINGS, predictor=nn.Identity(), state=state, generator=_gen(3))
    ref = esc.reference
    assert p.holds and p.holds == ref.premise_holds and p.objective == "byol" and p.reference_head == "a SiLU head"
    assert (p.lambda_min_objective, p.lambda_max_objective, p.grad_norm, p.frame, p.equilibrium) == \
        (ref.lambda_min_objective, ref.lambda_max_objective, ref.grad_norm, esc.frame, esc.equilibrium)
    assert p.why.startswith("its Hessian is positive semi-definite") and "reason" not in p.to_dict()
    obj, head, _ = setup("barlow", {}, "relu")
    p = escape_premise(head, obj, obj.collapsed_state(B, D, generator=_gen(0)))
    assert not p.holds and p.why.startswith("its Hessian is indefinite") and p.reference_head == "GeometricHead"

# ---------------------------------------------------------------------- monitors
def embeddings_with_covariance(eigenvalues: torch.Tensor, n: int, seed: int = 0) -> torch.Tensor:
    """(n, k) centred-data embeddings whose sample covariance has exactly these eigenvalues."""
    k = eigenvalues.numel()
    g = _gen(seed)
    a = torch.randn(n, k + 1, generator=g, dtype=F64)
    a[:, 0] = 1.0
    q, _ = torch.linalg.qr(a)
    u = q[:, 1:]  # orthonormal columns, orthogonal to the ones vector: zero-mean
    v, _ = torch.linalg.qr(torch.randn(k, k, generator=g, dtype=F64))
    return 3.0 + u @ torch.diag(torch.sqrt((n - 1) * eigenvalues.to(F64))) @ v.T


def test_rankme_matches_formula() -> None:
    g = _gen(2)
    u, _ = torch.linalg.qr(torch.randn(50, 6, generator=g, dtype=F64))
    v, _ = torch.linalg.qr(torch.randn(6, 6, generator=g, dtype=F64))
    s = np.array([5.0, 3.0, 2.0, 1.0, 0.5, 0.0])
    e = u @ torch.diag(torch.tensor(s)) @ v.T
    p = s / s.sum() + 1e-7
    assert rankme(e) == pytest.approx(float(np.exp(-(p * np.log(p)).sum())), rel=1e-10)
    flat = u[:, :4] @ v[:4] * 2.0  # four equal singular values
    assert rankme(flat) == pytest.approx(4.0, rel=1e-5)
    assert rankme(torch.ones(10, 5)) == pytest.approx(1.0, rel=1e-5)


def test_alpha_req_recovers_power_law() -> None:
    for alpha in (0.5, 1.0, 2.0):
        lam = torch.arange(1, 33, dtype=F64) ** (-alpha)
        assert alpha_req(embeddings_with_covariance(lam, 200)) == pytest.approx(alpha, rel=1e-8)


def test_normalized_std_healthy_and_collapsed() -> None:
    k = 64
    e = torch.randn(20000, k, generator=_gen(3))
    assert normalized_std(e) == pytest.approx(1 / math.sqrt(k), rel=0.02)
    collapsed = torch.randn(1, k, generator=_gen(4)) + 1e-6 * torch.randn(500, k, generator=_gen(5))
    assert normalized_std(collapsed) < 1e-5


def test_within_rank_condition_ignores_the_null_space() -> None:
    lam = torch.tensor([8.0, 4.0, 2.0, 1.0, 0.0, 0.0, 0.0], dtype=F64)
    e = embeddings_with_covariance(lam, 100)
    wr = within_rank_condition(e)
    assert wr.rank == 4 and wr.dim == 7
    assert wr.condition == pytest.approx(8.0, rel=1e-8)
    assert wr.eigenvalues == pytest.approx([8.0, 4.0, 2.0, 1.0], rel=1e-8)
    # float32 input gets the float32 tolerance, not the float64 one
    wr32 = within_rank_condition(e.float())
    assert wr32.rank == 4 and wr32.condition == pytest.approx(8.0, rel=1e-3)
    m = collapse_monitors(e)
    assert m.rank == 4 and m.healthy_std == pytest.approx(1 / math.sqrt(7))
    assert json.loads(json.dumps(m.to_dict()))["rank"] == 4


def test_monitor_bad_input() -> None:
    with pytest.raises(ValueError, match=r"\(N, k\)"):
        rankme(torch.ones(5))
    with pytest.raises(NonFiniteError, match="non-finite"):  # a ValueError too
        normalized_std(torch.tensor([[1.0, float("nan")], [0.0, 1.0]]))
    with pytest.raises(ValueError, match="at least 2"):
        within_rank_condition(torch.ones(1, 3))


def test_alpha_req_of_embeddings_wider_than_the_batch_uses_the_gram_matrix() -> None:
    """k > N (DINO's prototypes): the same α as the k x k covariance, without forming it."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(12, 300, generator=g, dtype=torch.float64) * torch.linspace(3.0, 0.1, 300, dtype=torch.float64)
    xc = x - x.mean(0)
    lam = torch.linalg.eigvalsh(xc.T @ xc / 11).flip(0)  # the reference: the covariance itself
    lam = lam[lam > 1e-6 * lam[0]]
    lx = torch.log(torch.arange(1, lam.numel() + 1, dtype=torch.float64))
    want = -float(((lx - lx.mean()) * (torch.log(lam) - torch.log(lam).mean())).sum() / ((lx - lx.mean()) ** 2).sum())
    assert alpha_req(x) == pytest.approx(want, rel=1e-9)
    wide = torch.randn(8, 65536, generator=g)  # a 65536 x 65536 covariance would need 34 GB
    assert math.isfinite(alpha_req(wide))
