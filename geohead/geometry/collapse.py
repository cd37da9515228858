"""Curvature at collapsed states (Thm 4.1): :func:`escape_curvature`.

It evaluates the effective Hessian H_eff = G + M of an objective through a head at the
objective's collapsed state (complete collapse with a small perturbation, or dimensional
collapse to rank r) and reports both parts. Thm 4.1 of Chaudhry (2026) says that at a collapsed
*equilibrium*, for an objective with a positive semi-definite ∇²_e L and ∇_e L ≠ 0, a smooth
head makes the state a saddle through M, while linear and ReLU heads without LayerNorm (M = 0)
cannot. Four things can make a raw λ_min(H_eff) misleading as evidence about the head
(docs/theory.md, "Collapsed states" and "Measured facts"):

* the frame: for scale-invariant (cosine) objectives the ambient H_eff has about one negative
  eigenvalue per sample from the loss's radial directions, for every head; the curvature is
  measured in the sphere-tangent frame (H_tan = G_tan + M) for them;
* the state: a state with ∇_Z f ≠ 0 is no equilibrium, and its negative curvature no saddle; the
  result reports the gradient relative to the curvature (:mod:`geohead.geometry.equilibrium`)
  and can move the state to a nearby collapsed equilibrium (``refine``);
* the objective: batch standardisation (Barlow Twins, VICReg) and contrastive terms make ∇²_e L
  strongly indefinite near collapse, so G has negative eigenvalues for *every* head;
* the size: where the premise holds, the head-induced curvature is small.

So the result separates what the head does (M, the answer: :class:`EscapeCurvature`) from what
the objective does (G, ∇²_e L: its :class:`EscapeReference`), says which frame it used, and
whether the state is an equilibrium. :class:`EscapeSettings` says how it is measured.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor, nn

from geohead.geometry.equilibrium import RefinedState, Stationarity, refine_collapsed, stationarity
from geohead.geometry.escape import EscapeCurvature, EscapePremise, EscapeReference, EscapeSettings
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.lanczos import LanczosResult, lanczos
from geohead.geometry.summary import count_negative, m_over_h_ratio

#: How :func:`escape_premise` measures: the objective's spectrum only (no G, no ‖M‖/‖H‖), with
#: the fast Lanczos budget in float64.
PREMISE_SETTINGS = EscapeSettings(mode="fast", dtype=torch.float64, pullback=False, objective_spectrum=True,
                                  m_over_h=False)


def _lz(op, k: int, which: str, max_iter: int | None, tol: float | None, generator: torch.Generator | None,
        vectors: bool = False) -> LanczosResult:
    k = min(k, op.dim)
    if max_iter is not None:
        max_iter = max(max_iter, min(2 * k, op.dim))
    return lanczos(op, k=k, which=which, max_iter=max_iter, tol=tol, generator=generator, return_vectors=vectors)


def _frame(frame: str, eh: EffectiveHessian) -> str:
    if frame == "auto":
        return "tangent" if eh.cosine else "ambient"
    if frame == "tangent" and not eh.cosine:
        raise ValueError(f"frame='tangent' is for scale-invariant (cosine) objectives; {eh.objective_name!r} is not one")
    return frame


def escape_curvature(
    head: nn.Module,
    objective: nn.Module,
    *,
    settings: EscapeSettings | None = None,
    predictor: nn.Module | None = None,
    teacher: nn.Module | None = None,
    state: Any = None,
    generator: torch.Generator | None = None,
) -> EscapeCurvature:
    """Curvature of f(Z) = L(branch(h(Z)), b) through ``head`` at the objective's collapsed state
    (Thm 4.1, docs/theory.md: "at a collapsed equilibrium, if the objective's Hessian ∇²_e L is
    positive semi-definite and its gradient ∇_e L ≠ 0, then a smooth non-linear head gives M
    negative eigenvalues that make H_eff indefinite: the collapsed state is a saddle").

    With Z the state's online view (B, d), e = h(Z) (B, k) and J = ∂e/∂Z (B·k × B·d), on R^{B·d}
    H_eff = ∇²_Z f = Jᵀ (∇²_e L) J + Σ_i [∇_e L]_i ∇²_Z e_i = G + M (docs/theory.md, "The effective
    Hessian"); for scale-invariant objectives the frame is the sphere-tangent one (H_tan = G_tan + M,
    G_tan = Jᵀ P ∇²_e L P J, P the projection off each e_b).

    Args:
        head: the projection head (in_dim = d); not modified.
        objective: an Objective; ``objective.collapsed_state`` makes the state unless ``state``
            (a :class:`~geohead.objectives.base.CollapsedState`: z1, z2 of shape (B, d)) is given.
        settings: :class:`EscapeSettings` (default ``EscapeSettings()``: B = 32, complete
            collapse, accurate mode, every part).
        predictor: required when the objective needs one (BYOL, SimSiam). ``nn.Identity()``
            measures the head alone ("MSE to target").
        teacher: the head of the target branch (EMA teacher); default ``head``.
        generator: for the state and every random start/probe (seed 0 when None).

    Cost: one Lanczos run (≤ max_iter products) per operator computed, 2 products per negative
    Ritz direction, 2·fro_probes products for the ratio (2·B·d when exact); with ``refine`` (when
    the given state is not stationary) up to ~5·refine evaluations of f and two more Lanczos runs
    on H.

    Returns: :class:`EscapeCurvature` (its ``reference``: :class:`EscapeReference`).
    """
    s = settings if settings is not None else EscapeSettings()
    budget = s.budget()
    k = budget["k"]
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    if state is None:
        state = _collapsed_state(head, objective, s, g)
    if s.refine and state.kind != "complete":
        raise ValueError(f"refine looks for a complete-collapse equilibrium; the state is {state.kind!r}")
    kw = dict(predictor=predictor, teacher=teacher, bn_mode=s.bn_mode, dtype=budget["dtype"])
    eh = EffectiveHessian(head, objective, state.z1, state.z2, **kw)
    frame = _frame(s.frame, eh)
    tangent = frame == "tangent"
    for name, dim in (("H_eff", eh.dim), ("objective Hessian", eh.embed_dim)):
        if k > dim:
            raise ValueError(f"k={k} exceeds the dimension {dim} of the {name}; use k <= {dim}")

    def run(op, vectors: bool = False) -> LanczosResult:
        return _lz(op, k, "both", budget["max_iter"], budget["lanczos_tol"], g, vectors=vectors)

    def measure_h(e: EffectiveHessian) -> tuple[LanczosResult, Stationarity]:
        """The frame's H (Lanczos, with Ritz vectors) and the state's stationarity."""
        h_run = run(e.H_tangent if tangent else e.H, vectors=True)
        return h_run, stationarity(e.grad_z, h_run.scale, e.z, s.stationary_tol)

    def build(z1: Tensor, z2: Tensor | None = None, target: Tensor | None = None) -> EffectiveHessian:
        return EffectiveHessian(head, objective, z1, z2, target=target, **kw)

    lh, st = measure_h(eh)
    equilibrium, refinement, spread_measured = ("exact" if st.stationary else "none"), None, state.spread
    if s.refine and not st.stationary:
        refinement, found = _refined(eh, state.z2, build, measure_h, s.refine, lh.scale)
        if found is not None:
            eh, (lh, st), spread_measured = found[0], found[1:], 0.0
            equilibrium = "exact" if refinement["iterations"] == 0 else "refined"
    spectra = _other_spectra(eh, tangent, s.pullback, s.objective_spectrum, run)
    split = _split(eh, lh, eh.G_tangent if tangent else eh.G, s.pullback, s.tol)
    ratio = m_over_h_ratio(eh, num_probes=budget["fro_probes"], generator=g, exact_dim=budget["exact_dim"],
                           tangent=tangent) if s.m_over_h else None
    runs = [r for r in (lh, *spectra[:2]) if r is not None]  # H, G, objective: not the ambient references
    spec = getattr(head, "spec", None)
    return EscapeCurvature(
        objective=eh.objective_name, head=spec.to_dict() if hasattr(spec, "to_dict") else None,
        kind=state.kind, rank=state.rank, spread=spread_measured, batch_size=eh.batch_size, dim=eh.dim,
        embed_dim=eh.embed_dim, bn_mode=s.bn_mode, dtype=str(budget["dtype"]).replace("torch.", ""), frame=frame,
        loss=eh.loss,
        grad_norm_z=st.grad_norm_z, newton_length=st.newton_length, gradient_relative=st.gradient_relative,
        stationary=st.stationary, stationary_tol=st.tol, equilibrium=equilibrium, refinement=refinement,
        lambda_min_H=lh.lambda_min, lambda_max_H=lh.lambda_max, num_negative_H=count_negative(lh, s.tol),
        m_over_h=None if ratio is None else ratio.value, m_over_h_stderr=None if ratio is None else ratio.stderr,
        m_over_h_exact=None if ratio is None else ratio.exact,
        **split,
        tol=s.tol, k=k,
        exact=all(r.exact for r in runs) and (ratio is None or ratio.exact),
        converged=all(r.converged for r in runs),
        n_matvec=sum(op.n_matvec for op in (eh.H, eh.G, eh.M, eh.G_tangent, eh.H_tangent, eh.objective_hessian,
                                            eh.objective_hessian_tangent)),
        reference=_reference(eh, lh, spectra, s.tol, s.grad_tol),
    )


def escape_premise(head: nn.Module, objective: nn.Module, state: Any, *, predictor: nn.Module | None = None,
                   generator: torch.Generator | None = None, reference_head: str | None = None) -> EscapePremise:
    """Thm 4.1's premise for ``objective`` at ``state`` (a CollapsedState: z1, z2 of shape (B, d)),
    measured through ``head`` (a reference head, in_dim = d): "the objective's Hessian ∇²_e L is
    positive semi-definite [in the frame of :func:`escape_curvature`] and its gradient ∇_e L ≠ 0"
    at e = head(z1) (B, k). ``predictor`` as for :func:`escape_curvature`; ``reference_head``
    names the head in the record (default: its class name). One Lanczos run of the objective's
    Hessian in :data:`PREMISE_SETTINGS` (~0.1 s for the search's reference head)."""
    esc = escape_curvature(head, objective, settings=PREMISE_SETTINGS, predictor=predictor, state=state,
                           generator=generator)
    ref = esc.reference
    return EscapePremise(objective=esc.objective, holds=bool(ref.premise_holds), frame=esc.frame,
                         lambda_min_objective=ref.lambda_min_objective, lambda_max_objective=ref.lambda_max_objective,
                         grad_norm=float(ref.grad_norm), gradient_vanishes=bool(ref.gradient_vanishes),
                         equilibrium=esc.equilibrium,
                         reference_head=reference_head if reference_head is not None else type(head).__name__)


def _collapsed_state(head: nn.Module, objective: nn.Module, s: EscapeSettings, g: torch.Generator) -> Any:
    """The objective's collapsed state (z1, z2 of shape (B, d)) for ``head``'s input width d, drawn
    in float64 whatever the mode, so "fast" and "accurate" see the same state."""
    in_dim = getattr(head, "in_dim", None)
    if not isinstance(in_dim, int):
        raise ValueError("head has no integer in_dim; pass state=objective.collapsed_state(B, d, ...)")
    return objective.collapsed_state(s.batch_size, in_dim, kind=s.kind, rank=s.rank, spread=s.spread, generator=g,
                                     dtype=torch.float64)


def _other_spectra(eh: EffectiveHessian, tangent: bool, pullback: bool, objective_spectrum: bool, run) -> tuple:
    """Lanczos ``run``s (in this order, which fixes the random starts) of the frame's G, the ambient
    H_eff and G (tangent frame only: references, not part of ``exact``/``converged``), the frame's
    objective Hessian and the ambient ∇²_e L; None for parts switched off.

    Returns: (G, objective, H ambient, G ambient, objective ambient) LanczosResults or None.
    """
    lg = le = lha = lga = lea = None
    if pullback:
        lg = run(eh.G_tangent if tangent else eh.G)
        if tangent:
            lha, lga = run(eh.H), run(eh.G)
    if objective_spectrum:
        le = run(eh.objective_hessian_tangent if tangent else eh.objective_hessian)
        if tangent:
            lea = run(eh.objective_hessian)
    return lg, le, lha, lga, lea


def _reference(eh: EffectiveHessian, lh: LanczosResult, spectra: tuple, tol: float, grad_tol: float) -> EscapeReference:
    """:class:`EscapeReference` from the state's ∇_e L, the frame's H run ``lh`` and the
    :func:`_other_spectra` (None where switched off)."""
    lg, le, lha, lga, lea = spectra
    num_neg_e = count_negative(le, tol) if le is not None else None
    return EscapeReference(
        grad_norm=eh.grad_norm,
        gradient_vanishes=eh.grad_norm <= grad_tol,
        lambda_min_objective=le.lambda_min if le is not None else None,
        lambda_max_objective=le.lambda_max if le is not None else None,
        num_negative_objective=num_neg_e,
        objective_psd=(num_neg_e == 0) if num_neg_e is not None else None,
        objective_psd_ambient=(count_negative(lea, tol) == 0) if lea is not None else None,
        lambda_min_G=lg.lambda_min if lg is not None else None,
        lambda_max_G=lg.lambda_max if lg is not None else None,
        num_negative_G=count_negative(lg, tol, max(lg.scale, lh.scale)) if lg is not None else None,
        lambda_min_shift=lh.lambda_min - lg.lambda_min if lg is not None else None,
        lambda_min_H_ambient=lha.lambda_min if lha is not None else None,
        num_negative_H_ambient=count_negative(lha, tol) if lha is not None else None,
        lambda_min_G_ambient=lga.lambda_min if lga is not None else None,
    )


def _refined(eh: EffectiveHessian, z2: Tensor, build, measure_h, refine: int, scale_given: float):
    """The exact collapsed state of (eh.z, z2): both views at one centre, the mean of all their rows;
    if it is no equilibrium, its centre moved by L-BFGS (:func:`refine_collapsed`). Returns the
    record and, when the state is adopted, (its EffectiveHessian, its H run, its stationarity).

    Not adopted when the centre ran off (moved more than 100 times its own norm: no equilibrium
    at a finite distance, e.g. a cosine loss that keeps improving as ‖c‖ grows), when its curvature
    scale is below 1e-8 of the given state's (degenerate: H ≈ 0, e.g. Barlow Twins with a target
    branch at exact collapse, whose standardised values are 0), or when it is not stationary."""
    z1 = torch.cat([eh.z, z2.detach().to(eh.z)]).mean(0).expand_as(eh.z).clone()
    found = build(z1, z1.clone())
    lh, st = measure_h(found)
    r = RefinedState(z1, 0, 0, st.grad_norm_z, st.grad_norm_z, 0.0)
    if not st.stationary:  # the exact collapsed state is no equilibrium: move its centre
        r = refine_collapsed(found.composite, z1, max_iter=refine)
        found = build(r.z, target=found.target)
        lh, st = measure_h(found)
    ran_off = r.moved > 100.0
    degenerate = lh.scale <= 1e-8 * scale_given
    record = {**r.to_dict(), "gradient_relative": st.gradient_relative, "stationary": st.stationary,
              "curvature_scale": lh.scale, "adopted": st.stationary and not degenerate and not ran_off}
    if ran_off:
        record["why_not"] = f"the centre ran off ({r.moved:.3g} times its norm): no collapsed equilibrium at a finite distance"
    elif degenerate:  # (its relative gradient is then rounding over ~0 and says nothing)
        record["why_not"] = "the exact collapsed state is degenerate: H ≈ 0 there (scale ≤ 1e-8 of the given state's)"
    elif not st.stationary:
        record["why_not"] = f"no stationary collapsed state within {refine} L-BFGS iterations"
    return record, ((found, lh, st) if record["adopted"] else None)


def _split(eh: EffectiveHessian, lh: LanczosResult, g_op, pullback: bool, tol: float) -> dict[str, Any]:
    """θ = vᵀGv + vᵀMv along the bottom Ritz vectors v of H: the fields of :class:`EscapeCurvature`
    from vᵀMv and vᵀGv of the bottom one (``head_curvature``, ``pullback_curvature``,
    ``head_share``, ``head_negative_curvature``) and (θ, vᵀGv, vᵀMv) of each converged negative
    one (``negative_directions``). vᵀGv is a product of its own with ``pullback``, else θ − vᵀMv
    (vᵀHv = θ for a Ritz pair)."""
    assert lh.eigenvectors is not None
    scale_h = lh.scale
    order = torch.argsort(lh.eigenvalues)
    directions: list[tuple[float, float, float]] = []
    head_curv = pull_curv = float("nan")
    for j, idx in enumerate(order.tolist()):
        theta = float(lh.eigenvalues[idx])
        negative_converged = theta + float(lh.residuals[idx]) < -tol * scale_h
        if j > 0 and not negative_converged:
            break
        v = lh.eigenvectors[:, idx]
        v = v / v.norm()
        qm = float(torch.dot(v, eh.M(v)))
        qg = float(torch.dot(v, g_op(v))) if pullback else theta - qm
        if j == 0:
            head_curv, pull_curv = qm, qg
        if negative_converged:
            directions.append((theta, qg, qm))
        if not pullback:
            break  # fast path: the escape direction only
    lam_min = lh.lambda_min
    negative = lam_min < -tol * scale_h
    return dict(head_curvature=head_curv, pullback_curvature=pull_curv,
                head_share=head_curv / lam_min if negative and lam_min != 0 else 0.0,
                head_negative_curvature=max(0.0, -head_curv) / scale_h if scale_h > 0 else 0.0,
                negative_directions=directions)


__all__ = ["PREMISE_SETTINGS", "escape_curvature", "escape_premise"]
