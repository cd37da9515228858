"""Frames, equilibria, exactness and LayerNorm at collapsed states, against dense float64 Hessians
(torch.func.hessian / jacrev on float64 copies; spectra by torch.linalg.eigvalsh)."""
from __future__ import annotations

import copy
import dataclasses

import pytest
import torch
from torch import nn

from geohead.geometry.collapse import escape_curvature
from geohead.geometry.escape import EscapeSettings
from geohead.geometry.equilibrium import refine_collapsed, stationarity
from geohead.geometry.hessian import EffectiveHessian
from geohead.heads import GeometricHead
from geohead.objectives import CollapsedState, get_objective

B, D, K, HID = 6, 4, 4, 8
F64 = torch.float64
TOL = 1e-6  # escape_curvature's negativity threshold, relative to max|λ|

pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def models(name: str, act: str, seed: int = 0, **kw):
    torch.manual_seed(seed)
    obj = get_objective(name, **kw)
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation=act)
    pred = GeometricHead(K, K, hidden_dim=HID, depth=2, activation=act) if obj.needs_predictor else None
    return obj, head, pred


def dense(obj, head, pred, z1: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """H_eff, J, ∇²_e L, ∇_e L, ê, M and the gradient of Z ↦ L(branch(Z), target), densely."""
    h = copy.deepcopy(head).double().eval()
    p = copy.deepcopy(pred).double().eval() if pred is not None else nn.Identity()

    def branch(z):
        return p(h(z))

    def f(z):
        return obj.loss(branch(z), target)

    n = z1.numel()
    e = branch(z1).detach()
    kk = e.shape[1]
    ge = torch.func.grad(lambda a: obj.loss(a, target))(e).detach()
    return {
        "H": torch.func.hessian(f)(z1).reshape(n, n).detach(),
        "J": torch.func.jacrev(branch)(z1).reshape(B * kk, n).detach(),
        "He": torch.func.hessian(lambda a: obj.loss(a, target))(e).reshape(B * kk, B * kk).detach(),
        "M": torch.func.hessian(lambda z: (ge * branch(z)).sum())(z1).reshape(n, n).detach(),
        "ge": ge, "e": e, "grad_z": torch.func.grad(f)(z1).detach(),
    }


def negatives(lam: torch.Tensor) -> int:
    return int((lam < -TOL * lam.abs().max()).sum())


# ---------------------------------------------------------------------- the sphere-tangent frame
@pytest.mark.parametrize("name", ["simsiam", "byol"])
@pytest.mark.parametrize("act", ["relu", "identity", "silu"])
def test_tangent_frame_against_dense_hessians(name: str, act: str) -> None:
    """H_tan = G_tan + M = H_eff − Jᵀ C J with C = −blockdiag (g êᵀ + ê gᵀ)/‖e‖ (docs/theory.md):
    ReLU and linear heads have no negative eigenvalue in the tangent frame and exactly one per
    sample in the ambient one; a SiLU head's M is what the tangent frame keeps."""
    obj, head, pred = models(name, act)
    state = obj.collapsed_state(B, D, generator=_gen(0))
    eh = EffectiveHessian(head, obj, state.z1, state.z2, predictor=pred)
    ref = dense(obj, head, pred, eh.z, eh.target)
    e_hat = ref["e"] / ref["e"].norm(dim=1, keepdim=True)
    P = torch.block_diag(*[torch.eye(K, dtype=F64) - torch.outer(r, r) for r in e_hat])
    C = -torch.block_diag(*[(torch.outer(g, r) + torch.outer(r, g)) / e.norm() for g, r, e in zip(ref["ge"], e_hat, ref["e"])])
    scale = float(ref["H"].norm())
    # the decomposition of a scale-invariant loss's Hessian, and the operator, against dense
    assert float((ref["He"] - P @ ref["He"] @ P - C).norm()) <= 1e-10 * float(ref["He"].norm())
    h_tan = ref["H"] - ref["J"].T @ C @ ref["J"]
    assert float((eh.H_tangent.dense() - h_tan).norm()) <= 1e-9 * scale
    assert float((h_tan - ref["J"].T @ P @ ref["He"] @ P @ ref["J"] - ref["M"]).norm()) <= 1e-9 * scale

    lam_t, lam_a = torch.linalg.eigvalsh(h_tan), torch.linalg.eigvalsh(ref["H"])
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2), predictor=pred, state=state, generator=_gen(1))
    assert r.frame == "tangent" and r.exact and r.m_over_h_exact
    assert r.reference.objective_psd  # cos(p, t) > 0 in every row here: P ∇²_e L P ⪰ 0 (the premise)
    assert r.num_negative_H == negatives(lam_t) and r.reference.num_negative_H_ambient == negatives(lam_a)
    assert r.lambda_min_H == pytest.approx(float(lam_t[0]), abs=1e-10 * float(lam_t.abs().max()))
    assert r.m_over_h == pytest.approx(float(ref["M"].norm() / h_tan.norm()), rel=1e-10)
    if act in ("relu", "identity"):
        assert float(ref["M"].norm()) == 0.0 and r.m_over_h == 0.0
        assert float(lam_t[0]) >= -1e-12 * float(lam_t.abs().max())  # G_tan ⪰ 0: nothing to escape by
        assert negatives(lam_t) == 0 and negatives(lam_a) == B  # ambient: one radial negative per sample
    else:
        assert r.m_over_h > 1e-3 and negatives(lam_t) > 0


# ---------------------------------------------------------------------- ‖M‖/‖H‖ exact when small
def test_m_over_h_is_exact_on_a_small_problem_and_says_when_it_is_not() -> None:
    """A 48-dimensional Barlow Twins problem: exact means equal to the dense ratio."""
    torch.manual_seed(0)
    obj = get_objective("barlow")
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="silu")
    state = obj.collapsed_state(12, D, generator=_gen(0))
    eh = EffectiveHessian(head, obj, state.z1, state.z2)
    ref = dense_barlow = eh.M.dense().norm() / eh.H.dense().norm()
    settings = EscapeSettings(k=24, fro_probes=30, pullback=False, objective_spectrum=False)
    r = escape_curvature(head, obj, settings=settings, state=state)
    assert r.dim == 48 and r.m_over_h_exact and r.m_over_h_stderr == 0.0 and r.exact
    assert r.m_over_h == pytest.approx(float(ref), rel=1e-12)
    est = escape_curvature(head, obj, settings=dataclasses.replace(settings, exact_dim=0), state=state)
    assert not est.m_over_h_exact and not est.exact and est.m_over_h_stderr > 0  # full spectra, estimated ratio
    assert est.m_over_h != float(dense_barlow)


# ---------------------------------------------------------------------- where M = 0
@pytest.mark.parametrize("act", ["identity", "relu"])
def test_layernorm_makes_a_linear_or_relu_head_curved(act: str) -> None:
    """M = 0 holds for linear/ReLU heads *without LayerNorm*: a depth-1 head with an output
    LayerNorm divides by the feature standard deviation, which is curved."""
    obj = get_objective("byol", distance="mse")
    g = _gen(2)
    z1, z2 = torch.randn(B, D, generator=g, dtype=F64), torch.randn(B, D, generator=g, dtype=F64)
    for last_norm, curved in (("layer", True), (None, False)):
        torch.manual_seed(0)
        head = GeometricHead(D, K, depth=1 if act == "identity" else 2, hidden_dim=HID, activation=act,
                             norm=None, last_norm=last_norm)
        assert head.spec.curved is curved
        eh = EffectiveHessian(head, obj, z1, z2, predictor=nn.Identity())
        ref = dense(obj, head, None, z1, eh.target)
        assert float(ref["ge"].norm()) > 0
        m = eh.M.dense()
        assert float((m - ref["M"]).norm()) <= 1e-10 * float(ref["H"].norm())
        ratio = float(ref["M"].norm() / ref["H"].norm())
        if curved:
            assert ratio > 1e-3
        else:
            assert ratio == 0.0 and torch.count_nonzero(m) == 0


# ---------------------------------------------------------------------- equilibria
def test_stationarity_matches_its_definition_and_saddles_need_it() -> None:
    """Barlow Twins at the default spread is no equilibrium (a negative eigenvalue there is no
    saddle); VICReg and SimCLR at exact complete collapse are exact equilibria with negative
    curvature: saddles."""
    torch.manual_seed(0)
    obj = get_objective("barlow")
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="relu")
    state = obj.collapsed_state(B, D, generator=_gen(0))
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2), state=state)
    eh = EffectiveHessian(head, obj, state.z1, state.z2)
    ref = dense(obj, head, None, eh.z, eh.target)
    lam = torch.linalg.eigvalsh(ref["H"])
    want = float(ref["grad_z"].norm()) / (float(lam.abs().max()) * float(eh.z.norm()))
    assert r.gradient_relative == pytest.approx(want, rel=1e-10)
    assert r.grad_norm_z == pytest.approx(float(ref["grad_z"].norm()), rel=1e-12)
    assert r.num_negative_H > 0 and not r.stationary and r.equilibrium == "none" and not r.saddle
    for name in ("vicreg", "simclr"):
        obj = get_objective(name)
        exact = obj.collapsed_state(B, D, spread=0.0, generator=_gen(0))
        r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2), state=exact)
        assert r.grad_norm_z <= 1e-14 and r.stationary and r.equilibrium == "exact"
        assert r.num_negative_H > 0 and r.saddle, name


def test_refined_collapsed_equilibrium_of_simsiam() -> None:
    """SimSiam's collapsed state is no equilibrium (the predictor moves p off the target); L-BFGS
    on the collapsed centre finds one for a SiLU head, and the dense Hessian there says what it
    is: a minimum, no saddle (for a mean over samples with identical fixed targets H = I_B ⊗ A/B,
    A the curvature within the collapsed set, so a collapsed equilibrium found by descent is a
    minimum of Z ↦ f(Z) too)."""
    obj, head, pred = models("simsiam", "silu")
    state = obj.collapsed_state(B, D, spread=0.0, generator=_gen(0))
    given = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2), predictor=pred, state=state)
    assert given.equilibrium == "none" and given.gradient_relative > 1e-3
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2, refine=200), predictor=pred, state=state)
    assert r.equilibrium == "refined" and r.stationary and r.refinement["adopted"]
    assert r.gradient_relative <= 1e-8 and r.spread == 0.0
    # the same refinement by hand, then dense
    eh0 = EffectiveHessian(head, obj, state.z1, state.z2, predictor=pred)
    ref_state = refine_collapsed(eh0.composite, eh0.z, max_iter=200)
    assert torch.equal(ref_state.z[0], ref_state.z[-1])  # still complete collapse
    ref = dense(obj, head, pred, ref_state.z, eh0.target)
    e_hat = ref["e"] / ref["e"].norm(dim=1, keepdim=True)
    C = -torch.block_diag(*[(torch.outer(g, u) + torch.outer(u, g)) / e.norm() for g, u, e in zip(ref["ge"], e_hat, ref["e"])])
    lam = torch.linalg.eigvalsh(ref["H"] - ref["J"].T @ C @ ref["J"])
    st = stationarity(ref["grad_z"], float(lam.abs().max()), ref_state.z)
    assert st.stationary  # both refinements end at rounding level (1e-12 .. 1e-10 here), at one state:
    assert r.lambda_min_H == pytest.approx(float(lam[0]), abs=1e-6 * float(lam.abs().max()))
    assert r.lambda_max_H == pytest.approx(float(lam[-1]), rel=1e-6)
    assert negatives(lam) == r.num_negative_H == 0 and not r.saddle

    # a linear head reaches p ∥ t: an equilibrium where ∇_e L itself vanishes (Thm 4.1's premise fails)
    obj, head, pred = models("simsiam", "identity")
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2, refine=200), predictor=pred, state=state)
    assert r.equilibrium == "refined" and r.reference.grad_norm < 1e-10 and r.m_over_h == 0.0
    # a ReLU head: L-BFGS stalls on the piecewise-linear composite, no equilibrium is adopted
    obj, head, pred = models("simsiam", "relu")
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2, refine=30), predictor=pred, state=state)
    assert r.equilibrium == "none" and not r.refinement["adopted"] and "no stationary" in r.refinement["why_not"]
    assert r.gradient_relative > 1e-3 and not r.saddle


def test_barlow_exact_collapse_with_a_fixed_target_is_a_degenerate_equilibrium() -> None:
    """With the target branch at exact collapse its standardised values are 0, so C ≡ 0 and the
    loss is flat in the online branch: gradient and curvature both vanish; refine does not adopt it."""
    torch.manual_seed(0)
    obj = get_objective("barlow")
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="silu")
    state = obj.collapsed_state(B, D, generator=_gen(0))
    r = escape_curvature(head, obj, settings=EscapeSettings(k=B * D // 2, refine=10), state=state)
    assert r.refinement["curvature_scale"] <= 1e-20 * abs(r.lambda_max_H) and not r.refinement["adopted"]
    assert "degenerate" in r.refinement["why_not"] and r.equilibrium == "none" and r.spread == state.spread
    exact = CollapsedState(state.z1.mean(0).expand(B, D).clone(), state.z2.mean(0).expand(B, D).clone(), "complete", 0, 0.0)
    flat = EffectiveHessian(head, obj, exact.z1, exact.z2)
    # zero up to the rounding of the batch mean of identical rows (the given state's scale is ~1e1)
    assert float(flat.grad_z.norm()) <= 1e-20 and float(flat.H.dense().norm()) <= 1e-20


def test_refine_needs_complete_collapse() -> None:
    obj, head, _ = models("vicreg", "silu")
    with pytest.raises(ValueError, match="complete"):
        escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, kind="dimensional", rank=2, refine=5))
    with pytest.raises(ValueError, match="refine"):
        escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, refine=-1))


def test_refine_uses_the_exact_state_when_it_is_stationary_and_reports_a_runaway_centre() -> None:
    """VICReg: the exact collapsed state (both views at one centre) is already an equilibrium, a
    saddle for every head. SimSiam with a predictor (heads 6 → 16 → 16 → 8, B = 12, as in
    benchmarks/collapse_states.py): the centre runs off to infinity, no equilibrium is adopted."""
    torch.manual_seed(0)
    obj = get_objective("vicreg")
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="relu")
    r = escape_curvature(head, obj, settings=EscapeSettings(batch_size=B, k=B * D // 2, refine=20))
    assert r.equilibrium == "exact" and r.refinement["iterations"] == 0 and r.spread == 0.0
    assert r.saddle and r.reference.grad_norm < 1e-12  # the objective's own saddle: ∇_e L = 0, so M = 0 there

    torch.manual_seed(0)
    obj = get_objective("simsiam")
    head = GeometricHead(6, 8, hidden_dim=16, depth=3, activation="silu")
    pred = GeometricHead(8, 8, hidden_dim=16, depth=2, activation="silu")
    r = escape_curvature(head, obj, settings=EscapeSettings(batch_size=12, k=36, refine=200), predictor=pred)
    assert r.equilibrium == "none" and not r.refinement["adopted"] and r.refinement["moved"] > 100
    assert "ran off" in r.refinement["why_not"] and not r.saddle
