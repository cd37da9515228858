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

So the result separates what the head does (M) from what the objective does (G, ∇²_e L), says
which frame it used, and whether the state is an equilibrium.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from geohead.geometry.equilibrium import RefinedState, Stationarity, refine_collapsed, stationarity
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.lanczos import LanczosResult, lanczos
from geohead.geometry.summary import Mode, count_negative, m_over_h_ratio, mode_settings

FRAMES: tuple[str, ...] = ("auto", "ambient", "tangent")


@dataclasses.dataclass
class EscapeCurvature:
    """Curvature of Z ↦ L(branch(h(Z)), b) at a collapsed state.

    Eigenvalue fields are extreme Ritz values of Lanczos runs (exact when ``exact``); negative
    counts are Ritz values below −tol·max|λ| of that operator: by Cauchy interlacing a lower
    bound on the number of such eigenvalues, exact when the run was (``k ≥ dim/2``).

    Fields of parts switched off (``pullback``, ``objective_spectrum``, ``m_over_h``) are None.

    Attributes:
        frame: ``"tangent"`` (scale-invariant objectives: H = H_tan = G_tan + M, G = G_tan =
            Jᵀ P ∇²_e L P J, objective = P ∇²_e L P) or ``"ambient"`` (H_eff = G + M, ∇²_e L).
        lambda_min_H, lambda_max_H, num_negative_H: of the frame's H (R^{B·d}).
        lambda_min_G, lambda_max_G, num_negative_G: of the frame's pullback metric G
            (negatives relative to max(|λ(G)|, |λ(H)|)).
        lambda_min_H_ambient, num_negative_H_ambient, lambda_min_G_ambient: the ambient H_eff and
            G for reference, in the tangent frame with ``pullback`` (else None).
        lambda_min_objective, lambda_max_objective, num_negative_objective: of the frame's
            objective Hessian (R^{B·k}); ``objective_psd`` is Thm 4.1's premise (no eigenvalue
            below −tol·max|λ|); ``objective_psd_ambient`` the ambient ∇²_e L's, for reference
            (tangent frame only).
        m_over_h: ‖M‖_F / ‖H‖_F of the frame's H (± ``m_over_h_stderr``); ``m_over_h_exact``
            whether both norms were computed exactly.
        grad_norm: ‖∇_e L‖ at the state; ``gradient_vanishes`` when it is below ``grad_tol``
            (then M = 0 whatever the head: the theorem needs ∇_e L ≠ 0).
        grad_norm_z, newton_length, gradient_relative, stationary: ‖∇_Z f‖_F, ‖∇_Z f‖/max|λ(H)|,
            that over ‖Z‖_F, and whether it is ≤ ``stationary_tol``
            (:class:`~geohead.geometry.equilibrium.Stationarity`): the state is an equilibrium.
        equilibrium: ``"exact"`` (the measured state is stationary as given), ``"refined"``
            (moved to a stationary collapsed state by ``refine``) or ``"none"`` (not an
            equilibrium: negative curvature there is not a saddle).
        refinement: what ``refine`` did (iterations, gradients, whether the refined state was
            stationary and adopted, and why not), or None.
        head_curvature, pullback_curvature: the head's own contribution to negative curvature,
            measured along the escape direction. With v the unit bottom Ritz vector of H (the
            frame's), the curvature there splits exactly as λ_min(H) = vᵀGv + vᵀMv:
            ``pullback_curvature`` = vᵀGv is what the objective contributes (through the head's
            Jacobian), ``head_curvature`` = vᵀMv what the head's own curvature contributes. (At
            collapse G is rank-deficient and its bottom eigenvectors an arbitrary basis of a
            large null space, so M's quotients on them say nothing; λ_min(H) − λ_min(G) compares
            minima along different directions. The split along v is exact, costs one product
            each, and is exactly 0 for a head with M = 0.)
        head_share: head_curvature / λ_min(H) when λ_min(H) < −tol·max|λ| (else 0): > 1 means G
            is positive along the escape direction and the head alone makes it negative (Thm
            4.1's mechanism); ≈ 0 means the objective's own indefiniteness does it.
        head_negative_curvature: max(0, −head_curvature) / max|λ(H)|: a dimensionless,
            non-negative score of the head's escape curvature (0 for linear/ReLU heads without
            LayerNorm, BatchNorm in eval mode, whatever the objective).
        lambda_min_shift: λ_min(H) − λ_min(G) (Weyl: |·| ≤ ‖M‖_2), for comparison.
        negative_directions: for each converged negative Ritz value of H found (≤ k), the
            triple (θ, vᵀGv, vᵀMv).
        exact: every Lanczos run spanned the whole space and ``m_over_h`` (if computed) is exact.
    """

    objective: str
    head: dict[str, Any] | None
    kind: str
    rank: int
    spread: float
    batch_size: int
    dim: int
    embed_dim: int
    bn_mode: str
    dtype: str
    frame: str
    loss: float
    grad_norm: float
    gradient_vanishes: bool
    grad_norm_z: float
    newton_length: float
    gradient_relative: float
    stationary: bool
    stationary_tol: float
    equilibrium: str
    refinement: dict[str, Any] | None
    lambda_min_H: float
    lambda_max_H: float
    num_negative_H: int
    lambda_min_G: float | None
    lambda_max_G: float | None
    num_negative_G: int | None
    lambda_min_H_ambient: float | None
    num_negative_H_ambient: int | None
    lambda_min_G_ambient: float | None
    lambda_min_objective: float | None
    lambda_max_objective: float | None
    num_negative_objective: int | None
    objective_psd: bool | None
    objective_psd_ambient: bool | None
    m_over_h: float | None
    m_over_h_stderr: float | None
    m_over_h_exact: bool | None
    head_curvature: float
    pullback_curvature: float
    head_share: float
    head_negative_curvature: float
    lambda_min_shift: float | None
    negative_directions: list[tuple[float, float, float]]
    tol: float
    k: int
    exact: bool
    converged: bool
    n_matvec: int

    @property
    def premise_holds(self) -> bool | None:
        """Thm 4.1's premises: the frame's objective Hessian PSD and ∇_e L ≠ 0 (None when the
        objective's spectrum was not computed)."""
        if self.objective_psd is None:
            return None
        return bool(self.objective_psd) and not self.gradient_vanishes

    @property
    def saddle(self) -> bool:
        """An equilibrium (``equilibrium != "none"``) with a negative eigenvalue of H: the only
        states this module calls saddles."""
        return self.equilibrium != "none" and self.num_negative_H > 0

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["negative_directions"] = [list(t) for t in self.negative_directions]
        d["premise_holds"] = self.premise_holds
        d["saddle"] = self.saddle
        return d


def _lz(op, k: int, which: str, max_iter: int | None, tol: float | None, generator: torch.Generator | None,
        vectors: bool = False) -> LanczosResult:
    k = min(k, op.dim)
    if max_iter is not None:
        max_iter = max(max_iter, min(2 * k, op.dim))
    return lanczos(op, k=k, which=which, max_iter=max_iter, tol=tol, generator=generator, return_vectors=vectors)


def _frame(frame: str, eh: EffectiveHessian) -> str:
    if frame not in FRAMES:
        raise ValueError(f"unknown frame {frame!r}; use one of {list(FRAMES)}")
    if frame == "auto":
        return "tangent" if eh.cosine else "ambient"
    if frame == "tangent" and not eh.cosine:
        raise ValueError(f"frame='tangent' is for scale-invariant (cosine) objectives; {eh.objective_name!r} is not one")
    return frame


def escape_curvature(
    head: nn.Module,
    objective: nn.Module,
    *,
    predictor: nn.Module | None = None,
    teacher: nn.Module | None = None,
    batch_size: int = 32,
    kind: str = "complete",
    rank: int = 1,
    spread: float = 1e-2,
    k: int | None = None,
    tol: float = 1e-6,
    grad_tol: float = 1e-12,
    mode: Mode = "accurate",
    max_iter: int | None = None,
    lanczos_tol: float | None = None,
    fro_probes: int | None = None,
    exact_dim: int | None = None,
    dtype: torch.dtype | None = None,
    generator: torch.Generator | None = None,
    bn_mode: str = "eval",
    state: Any = None,
    frame: str = "auto",
    refine: int = 0,
    stationary_tol: float | None = None,
    pullback: bool = True,
    objective_spectrum: bool = True,
    m_over_h: bool = True,
) -> EscapeCurvature:
    """Curvature of the objective through ``head`` at its collapsed state (Thm 4.1).

    Args:
        head: the projection head (in_dim = d); not modified.
        objective: an Objective; ``objective.collapsed_state`` makes the state unless ``state``
            (a :class:`~geohead.objectives.base.CollapsedState`) is given.
        predictor: required when the objective needs one (BYOL, SimSiam). ``nn.Identity()``
            measures the head alone ("MSE to target").
        teacher: the head of the target branch (EMA teacher); default ``head``.
        batch_size, kind, rank, spread: the collapsed state (B, ``"complete"`` or
            ``"dimensional"``, the subspace rank, the perturbation std).
        k: Ritz values per end (default: mode's; ``k ≥ dim/2`` gives the full spectra).
        tol: negativity threshold relative to max|λ| of each operator.
        grad_tol: ‖∇_e L‖ below this flags ``gradient_vanishes``.
        mode: ``"accurate"`` (float64, converged Lanczos, ‖M‖/‖H‖ exact up to B·d = 1024 else 30
            probes) or ``"fast"`` (float32, ≤ 10 Lanczos steps per operator, 4 probes: screening).
        exact_dim: ‖M‖/‖H‖ exactly up to this B·d (overrides the mode's).
        dtype: overrides the mode's dtype.
        generator: for the state and every random start/probe (seed 0 when None).
        bn_mode: ``"eval"`` (default) or ``"train"`` (couples samples; curves ReLU heads).
        frame: ``"auto"`` (sphere-tangent for scale-invariant objectives, ambient otherwise),
            ``"ambient"`` or ``"tangent"``.
        refine: when > 0 (complete collapse only), also look for a collapsed equilibrium: the
            exact collapsed state (every row of both views at their common mean) moved by at most
            this many L-BFGS iterations (:func:`~geohead.geometry.equilibrium.refine_collapsed`). It is
            measured instead of the given state when it is stationary and its curvature is not
            identically 0 (``equilibrium="exact"`` or ``"refined"``); otherwise the given state
            is measured and ``refinement`` says why.
        stationary_tol: relative-gradient tolerance of "stationary" (1e-8 float64, 1e-4 float32).
        pullback, objective_spectrum, m_over_h: compute G's spectrum (and the ambient
            references), the objective Hessian's spectrum (the premise) and ‖M‖_F/‖H‖_F; switch
            off for screening (their fields are then None). The head's curvature along the
            escape direction is always computed: one M product (and, without ``pullback``,
            vᵀGv = θ − vᵀMv from the Ritz pair).

    Cost: one Lanczos run (≤ max_iter products) per operator computed, 2 products per negative
    Ritz direction, 2·fro_probes products for the ratio (2·B·d when exact); with ``refine`` (when
    the given state is not stationary) up to ~5·refine evaluations of f and two more Lanczos runs
    on H.

    Returns: :class:`EscapeCurvature`.
    """
    cfg = mode_settings(mode, k=k, max_iter=max_iter, lanczos_tol=lanczos_tol, fro_probes=fro_probes,
                        exact_dim=exact_dim, dtype=dtype)
    k, max_iter, lanczos_tol, fro_probes, dtype = (cfg[n] for n in ("k", "max_iter", "lanczos_tol", "fro_probes", "dtype"))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    if isinstance(refine, bool) or not isinstance(refine, int) or refine < 0:
        raise ValueError(f"refine must be a non-negative integer (L-BFGS iterations), got {refine!r}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    if state is None:
        state = _collapsed_state(head, objective, batch_size, kind, rank, spread, g)
    if refine and state.kind != "complete":
        raise ValueError(f"refine looks for a complete-collapse equilibrium; the state is {state.kind!r}")
    kw = dict(predictor=predictor, teacher=teacher, bn_mode=bn_mode, dtype=dtype)
    eh = EffectiveHessian(head, objective, state.z1, state.z2, **kw)
    frame = _frame(frame, eh)
    tangent = frame == "tangent"
    for name, dim in (("H_eff", eh.dim), ("objective Hessian", eh.embed_dim)):
        if k > dim:
            raise ValueError(f"k={k} exceeds the dimension {dim} of the {name}; use k <= {dim}")

    def measure_h(e: EffectiveHessian) -> tuple[LanczosResult, Stationarity]:
        """The frame's H (Lanczos, with Ritz vectors) and the state's stationarity."""
        run = _lz(e.H_tangent if tangent else e.H, k, "both", max_iter, lanczos_tol, g, vectors=True)
        return run, stationarity(e.grad_z, run.scale, e.z, stationary_tol)

    def build(z1: Tensor, z2: Tensor | None = None, target: Tensor | None = None) -> EffectiveHessian:
        return EffectiveHessian(head, objective, z1, z2, target=target, **kw)

    lh, st = measure_h(eh)
    equilibrium = "exact" if st.stationary else "none"
    refinement = None
    spread_measured = state.spread
    if refine and not st.stationary:
        refinement, found = _refined(eh, state.z2, build, measure_h, refine, lh.scale)
        if found is not None:
            eh, (lh, st), spread_measured = found[0], found[1:], 0.0
            equilibrium = "exact" if refinement["iterations"] == 0 else "refined"
    scale_h = lh.scale
    g_op = eh.G_tangent if tangent else eh.G
    lg, le, lha, lga, lea = _other_spectra(eh, tangent, pullback, objective_spectrum,
                                           lambda op: _lz(op, k, "both", max_iter, lanczos_tol, g))
    runs = [r for r in (lh, lg, le) if r is not None]

    head_curv, pull_curv, directions = _split(eh, lh, g_op, pullback, tol)
    lam_min_h = lh.lambda_min
    negative = lam_min_h < -tol * scale_h
    share = head_curv / lam_min_h if negative and lam_min_h != 0 else 0.0
    head_neg = max(0.0, -head_curv) / scale_h if scale_h > 0 else 0.0

    ratio = m_over_h_ratio(eh, num_probes=fro_probes, generator=g, exact_dim=cfg["exact_dim"], tangent=tangent) if m_over_h else None
    spec = getattr(head, "spec", None)
    n_matvec = sum(op.n_matvec for op in (eh.H, eh.G, eh.M, eh.G_tangent, eh.H_tangent, eh.objective_hessian,
                                          eh.objective_hessian_tangent))
    num_neg_e = count_negative(le, tol) if le is not None else None
    return EscapeCurvature(
        objective=eh.objective_name,
        head=spec.to_dict() if hasattr(spec, "to_dict") else None,
        kind=state.kind, rank=state.rank, spread=spread_measured,
        batch_size=eh.batch_size, dim=eh.dim, embed_dim=eh.embed_dim, bn_mode=bn_mode,
        dtype=str(dtype).replace("torch.", ""),
        frame=frame,
        loss=eh.loss,
        grad_norm=eh.grad_norm,
        gradient_vanishes=eh.grad_norm <= grad_tol,
        grad_norm_z=st.grad_norm_z, newton_length=st.newton_length, gradient_relative=st.gradient_relative,
        stationary=st.stationary, stationary_tol=st.tol, equilibrium=equilibrium, refinement=refinement,
        lambda_min_H=lam_min_h,
        lambda_max_H=lh.lambda_max,
        num_negative_H=count_negative(lh, tol),
        lambda_min_G=lg.lambda_min if lg is not None else None,
        lambda_max_G=lg.lambda_max if lg is not None else None,
        num_negative_G=count_negative(lg, tol, max(lg.scale, scale_h)) if lg is not None else None,
        lambda_min_H_ambient=lha.lambda_min if lha is not None else None,
        num_negative_H_ambient=count_negative(lha, tol) if lha is not None else None,
        lambda_min_G_ambient=lga.lambda_min if lga is not None else None,
        lambda_min_objective=le.lambda_min if le is not None else None,
        lambda_max_objective=le.lambda_max if le is not None else None,
        num_negative_objective=num_neg_e,
        objective_psd=(num_neg_e == 0) if num_neg_e is not None else None,
        objective_psd_ambient=(count_negative(lea, tol) == 0) if lea is not None else None,
        m_over_h=ratio.value if ratio is not None else None,
        m_over_h_stderr=ratio.stderr if ratio is not None else None,
        m_over_h_exact=ratio.exact if ratio is not None else None,
        head_curvature=head_curv,
        pullback_curvature=pull_curv,
        head_share=share,
        head_negative_curvature=head_neg,
        lambda_min_shift=lam_min_h - lg.lambda_min if lg is not None else None,
        negative_directions=directions,
        tol=tol,
        k=k,
        exact=all(r.exact for r in runs) and (ratio is None or ratio.exact),
        converged=all(r.converged for r in runs),
        n_matvec=n_matvec,
    )


def _collapsed_state(head: nn.Module, objective: nn.Module, batch_size: int, kind: str, rank: int, spread: float,
                     g: torch.Generator) -> Any:
    """The objective's collapsed state for ``head``'s input width, drawn in float64 whatever the
    mode, so "fast" and "accurate" see the same state."""
    in_dim = getattr(head, "in_dim", None)
    if not isinstance(in_dim, int):
        raise ValueError("head has no integer in_dim; pass state=objective.collapsed_state(B, d, ...)")
    return objective.collapsed_state(batch_size, in_dim, kind=kind, rank=rank, spread=spread, generator=g,
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


def _split(eh: EffectiveHessian, lh: LanczosResult, g_op, pullback: bool, tol: float):
    """θ = vᵀGv + vᵀMv along the bottom Ritz vectors v of H: (vᵀMv, vᵀGv) of the bottom one and
    (θ, vᵀGv, vᵀMv) of each converged negative one. vᵀGv is a product of its own with
    ``pullback``, else θ − vᵀMv (vᵀHv = θ for a Ritz pair)."""
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
    return head_curv, pull_curv, directions


__all__ = ["EscapeCurvature", "FRAMES", "escape_curvature"]
