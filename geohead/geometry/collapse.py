"""Curvature at collapsed states (Thm 4.1) and collapse monitors on embedding batches.

:func:`escape_curvature` evaluates the effective Hessian H_eff = G + M of an objective through a
head at the objective's collapsed state (complete collapse with a small perturbation, or
dimensional collapse to rank r) and reports both parts. Thm 4.1 of Chaudhry (2026) says that,
for an objective with a positive semi-definite ∇²_e L and ∇_e L ≠ 0, a smooth head makes the
collapsed state a saddle through M, while linear and ReLU heads (M = 0) cannot. Two things can
make a raw λ_min(H_eff) misleading as evidence about the head (docs/theory.md, "Measured facts"):
objectives with batch standardisation (Barlow Twins, VICReg) or contrastive terms have a strongly
indefinite ∇²_e L near collapse, so G has negative eigenvalues for *every* head, linear
included; and where the premise holds (MSE to a target), the head-induced curvature is small.
So the result separates what the head does (M) from what the objective does (G, ∇²_e L).

Monitors (on a batch of embeddings E, (N, k)): :func:`rankme` (Garrido et al. 2023),
:func:`alpha_req` (Agrawal et al. 2022), :func:`normalized_std` (Chen & He 2021, ≈ 1/√k when
healthy), :func:`within_rank_condition` (covariance condition number on its numerical range).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from geohead.errors import NonFiniteError
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.lanczos import LanczosResult, lanczos
from geohead.geometry.summary import Mode, count_negative, m_over_h_ratio, mode_settings


@dataclasses.dataclass
class EscapeCurvature:
    """Curvature of Z ↦ L(branch(h(Z)), b) at a collapsed state.

    Eigenvalue fields are extreme Ritz values of Lanczos runs (exact when ``exact``); negative
    counts are Ritz values below −tol·max|λ| of that operator: by Cauchy interlacing a lower
    bound on the number of such eigenvalues, exact when the run was (``k ≥ dim/2``).

    Fields of parts switched off (``pullback``, ``objective_spectrum``, ``m_over_h``) are None.

    Attributes:
        lambda_min_H, lambda_max_H, num_negative_H: of H_eff (R^{B·d}).
        lambda_min_G, lambda_max_G, num_negative_G: of the pullback metric G = Jᵀ ∇²_e L J
            (negatives relative to max(|λ(G)|, |λ(H_eff)|)).
        lambda_min_G_tangent, num_negative_G_tangent: of Jᵀ P ∇²_e L P J (cosine objectives
            only, else None).
        lambda_min_objective, lambda_max_objective, num_negative_objective: of ∇²_e L itself
            (R^{B·k}); ``objective_psd`` is Thm 4.1's premise (no eigenvalue below −tol·max|λ|);
            ``objective_psd_tangent`` the same for P ∇²_e L P (cosine objectives).
        m_over_h: ‖M‖_F / ‖H_eff‖_F (± ``m_over_h_stderr``; exact for small problems).
        grad_norm: ‖∇_e L‖ at the state; ``gradient_vanishes`` when it is below ``grad_tol``
            (then M = 0 whatever the head: the theorem needs ∇_e L ≠ 0).
        head_curvature, pullback_curvature: the head's own contribution to negative curvature,
            measured along the escape direction. With v the unit bottom Ritz vector of H_eff
            (the direction gradient flow leaves the saddle along), the curvature there splits
            exactly as λ_min(H_eff) = vᵀGv + vᵀMv: ``pullback_curvature`` = vᵀGv is what the
            objective contributes (through the head's Jacobian), ``head_curvature`` = vᵀMv what
            the head's own curvature contributes. Why this and not λ_min(H) − λ_min(G) or M's
            Rayleigh quotients on G's bottom eigenvectors: at collapse G is rank-deficient, its
            bottom eigenvectors are an arbitrary basis of a large null space, and M's quotients
            on them say nothing about where H_eff actually bends down; λ_min(H) − λ_min(G)
            compares minima attained along different directions (it is bounded by ‖M‖_2 but
            can have either sign when G's own negative curvature dominates, as for Barlow
            Twins). The split along v is exact, costs one product each, and is exactly 0 for a
            head with M = 0.
        head_share: head_curvature / λ_min(H_eff) when λ_min(H_eff) < −tol·max|λ| (else 0):
            > 1 means G is positive along the escape direction and the head alone makes it
            negative (Thm 4.1's mechanism); ≈ 0 means the objective's own indefiniteness does it.
        head_negative_curvature: max(0, −head_curvature) / max|λ(H_eff)|: a dimensionless,
            non-negative score of the head's escape curvature (what a search criterion should
            use: it is 0 for linear/ReLU heads, whatever the objective).
        lambda_min_shift: λ_min(H_eff) − λ_min(G) (Weyl: |·| ≤ ‖M‖_2), for comparison.
        negative_directions: for each converged negative Ritz value of H_eff found (≤ k), the
            triple (θ, vᵀGv, vᵀMv).
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
    loss: float
    grad_norm: float
    gradient_vanishes: bool
    lambda_min_H: float
    lambda_max_H: float
    num_negative_H: int
    lambda_min_G: float | None
    lambda_max_G: float | None
    num_negative_G: int | None
    lambda_min_G_tangent: float | None
    num_negative_G_tangent: int | None
    lambda_min_objective: float | None
    lambda_max_objective: float | None
    num_negative_objective: int | None
    objective_psd: bool | None
    objective_psd_tangent: bool | None
    m_over_h: float | None
    m_over_h_stderr: float | None
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
        """Thm 4.1's premises: ∇²_e L PSD (tangent version for cosine losses) and ∇_e L ≠ 0
        (None when the objective's spectrum was not computed)."""
        psd = self.objective_psd_tangent if self.objective_psd_tangent is not None else self.objective_psd
        if psd is None:
            return None
        return bool(psd) and not self.gradient_vanishes

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["negative_directions"] = [list(t) for t in self.negative_directions]
        d["premise_holds"] = self.premise_holds
        return d


def _lz(op, k: int, which: str, max_iter: int | None, tol: float | None, generator: torch.Generator | None,
        vectors: bool = False) -> LanczosResult:
    k = min(k, op.dim)
    if max_iter is not None:
        max_iter = max(max_iter, min(2 * k, op.dim))
    return lanczos(op, k=k, which=which, max_iter=max_iter, tol=tol, generator=generator, return_vectors=vectors)


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
    dtype: torch.dtype | None = None,
    generator: torch.Generator | None = None,
    bn_mode: str = "eval",
    state: Any = None,
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
        k: Ritz values per end (default: mode's; ``k ≥ dim/2`` gives the full spectra, and
            ``exact=True`` in the result when that holds for every operator).
        tol: negativity threshold relative to max|λ| of each operator.
        grad_tol: ‖∇_e L‖ below this flags ``gradient_vanishes``.
        mode: ``"accurate"`` (float64, converged Lanczos, 30 Frobenius probes) or ``"fast"``
            (float32, ≤ 10 Lanczos steps per operator, 4 probes: for screening).
        dtype: overrides the mode's dtype.
        generator: for the state and every random start/probe (seed 0 when None).
        bn_mode: ``"eval"`` (default) or ``"train"`` (couples samples; curves ReLU heads).
        pullback, objective_spectrum, m_over_h: compute G's spectrum, ∇²_e L's spectrum (the
            premise) and ‖M‖_F/‖H‖_F; switch off for screening (their fields are then None).
            The head's curvature along the escape direction (``head_curvature``,
            ``head_negative_curvature``, ``head_share``) is always computed: one M product
            (and, without ``pullback``, vᵀGv = θ − vᵀMv from the Ritz pair).

    Cost: one Lanczos run (≤ max_iter products) per operator computed, 2 products per negative
    Ritz direction, 2·fro_probes products for the ratio (or 2·B·d exactly when B·d ≤ probes).

    Returns: :class:`EscapeCurvature`.
    """
    cfg = mode_settings(mode, k=k, max_iter=max_iter, lanczos_tol=lanczos_tol, fro_probes=fro_probes, dtype=dtype)
    k, max_iter, lanczos_tol, fro_probes, dtype = (cfg[n] for n in ("k", "max_iter", "lanczos_tol", "fro_probes", "dtype"))
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}")
    g = generator if generator is not None else torch.Generator().manual_seed(0)
    in_dim = getattr(head, "in_dim", None)
    if state is None:
        if not isinstance(in_dim, int):
            raise ValueError("head has no integer in_dim; pass state=objective.collapsed_state(B, d, ...)")
        # drawn in float64 whatever the mode, so "fast" and "accurate" see the same state
        state = objective.collapsed_state(batch_size, in_dim, kind=kind, rank=rank, spread=spread, generator=g, dtype=torch.float64)
    eh = EffectiveHessian(head, objective, state.z1, state.z2, predictor=predictor, teacher=teacher, bn_mode=bn_mode, dtype=dtype)
    for name, dim in (("H_eff", eh.dim), ("objective Hessian", eh.embed_dim)):
        if k > dim:
            raise ValueError(f"k={k} exceeds the dimension {dim} of the {name}; use k <= {dim}")

    lh = _lz(eh.H, k, "both", max_iter, lanczos_tol, g, vectors=True)
    scale_h = lh.scale
    runs = [lh]
    lg = le = lgt = let = None
    if pullback:
        lg = _lz(eh.G, k, "both", max_iter, lanczos_tol, g)
        runs.append(lg)
        if eh.cosine:
            lgt = _lz(eh.G_tangent, k, "both", max_iter, lanczos_tol, g)
            runs.append(lgt)
    if objective_spectrum:
        le = _lz(eh.objective_hessian, k, "both", max_iter, lanczos_tol, g)
        runs.append(le)
        if eh.cosine:
            let = _lz(eh.objective_hessian_tangent, k, "both", max_iter, lanczos_tol, g)
            runs.append(let)

    # split the curvature along the bottom Ritz vectors of H_eff: θ = vᵀGv + vᵀMv. vᵀGv is a
    # product of its own when the pullback is computed, else θ − vᵀMv (vᵀHv = θ for a Ritz pair)
    assert lh.eigenvectors is not None
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
        qg = float(torch.dot(v, eh.G(v))) if pullback else float(torch.dot(v, eh.H(v))) - qm
        if j == 0:
            head_curv, pull_curv = qm, qg
        if negative_converged:
            directions.append((theta, qg, qm))
        if not pullback:
            break  # fast path: the escape direction only
    lam_min_h = lh.lambda_min
    negative = lam_min_h < -tol * scale_h
    share = head_curv / lam_min_h if negative and lam_min_h != 0 else 0.0
    head_neg = max(0.0, -head_curv) / scale_h if scale_h > 0 else 0.0

    ratio = ratio_se = None
    if m_over_h:
        ratio, ratio_se = m_over_h_ratio(eh, num_probes=fro_probes, generator=g)
    spec = getattr(head, "spec", None)
    n_matvec = sum(op.n_matvec for op in (eh.H, eh.G, eh.M, eh.G_tangent, eh.objective_hessian, eh.objective_hessian_tangent))
    num_neg_e = count_negative(le, tol) if le is not None else None
    return EscapeCurvature(
        objective=eh.objective_name,
        head=spec.to_dict() if hasattr(spec, "to_dict") else None,
        kind=state.kind,
        rank=state.rank,
        spread=state.spread,
        batch_size=eh.batch_size,
        dim=eh.dim,
        embed_dim=eh.embed_dim,
        bn_mode=bn_mode,
        dtype=str(dtype).replace("torch.", ""),
        loss=eh.loss,
        grad_norm=eh.grad_norm,
        gradient_vanishes=eh.grad_norm <= grad_tol,
        lambda_min_H=lam_min_h,
        lambda_max_H=lh.lambda_max,
        num_negative_H=count_negative(lh, tol),
        lambda_min_G=lg.lambda_min if lg is not None else None,
        lambda_max_G=lg.lambda_max if lg is not None else None,
        num_negative_G=count_negative(lg, tol, max(lg.scale, scale_h)) if lg is not None else None,
        lambda_min_G_tangent=lgt.lambda_min if lgt is not None else None,
        num_negative_G_tangent=count_negative(lgt, tol, max(lgt.scale, scale_h)) if lgt is not None else None,
        lambda_min_objective=le.lambda_min if le is not None else None,
        lambda_max_objective=le.lambda_max if le is not None else None,
        num_negative_objective=num_neg_e,
        objective_psd=(num_neg_e == 0) if num_neg_e is not None else None,
        objective_psd_tangent=(count_negative(let, tol) == 0) if let is not None else None,
        m_over_h=ratio,
        m_over_h_stderr=ratio_se,
        head_curvature=head_curv,
        pullback_curvature=pull_curv,
        head_share=share,
        head_negative_curvature=head_neg,
        lambda_min_shift=lam_min_h - lg.lambda_min if lg is not None else None,
        negative_directions=directions,
        tol=tol,
        k=k,
        exact=all(r.exact for r in runs),
        converged=all(r.converged for r in runs),
        n_matvec=n_matvec,
    )


# ---------------------------------------------------------------------- monitors
def _embeddings(emb: Tensor, name: str) -> Tensor:
    if not isinstance(emb, Tensor) or emb.dim() != 2:
        raise ValueError(f"{name} expects embeddings of shape (N, k), got {tuple(getattr(emb, 'shape', ()))}")
    if emb.shape[0] < 2:
        raise ValueError(f"{name} needs at least 2 embeddings, got {emb.shape[0]}")
    x = emb.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise NonFiniteError(f"{name} got non-finite embeddings (NaN or inf)")
    return x


def rankme(emb: Tensor, eps: float = 1e-7) -> float:
    """RankMe (Garrido et al. 2023, Eq. 1): exp(−Σ_k p_k log p_k), p_k = σ_k/‖σ‖₁ + ε, with σ the
    singular values of the (uncentred) embedding matrix (N, k). Between 1 and min(N, k)."""
    x = _embeddings(emb, "rankme")
    s = torch.linalg.svdvals(x)
    if float(s.sum()) == 0:
        return 1.0
    p = s / s.sum() + eps
    return float(torch.exp(-(p * torch.log(p)).sum()))


def alpha_req(emb: Tensor, rtol: float = 1e-6) -> float:
    """α-ReQ (Agrawal et al. 2022): the exponent α of a power-law fit λ_i ∝ i^{−α} to the
    eigenvalues of the embedding covariance, by least squares of log λ_i on log i over the
    eigenvalues above ``rtol``·λ_max. Small α: a flat (high-rank, possibly noisy) spectrum;
    large α: a few dominant directions (collapse). ~1 is reported as a sweet spot."""
    x = _embeddings(emb, "alpha_req")
    xc = x - x.mean(0)
    lam = torch.linalg.eigvalsh(xc.T @ xc / (x.shape[0] - 1)).flip(0)
    if float(lam[0]) <= 0:
        return float("inf")
    lam = lam[lam > rtol * lam[0]]
    if lam.numel() < 2:
        return float("inf")
    i = torch.arange(1, lam.numel() + 1, dtype=torch.float64)
    lx, ly = torch.log(i), torch.log(lam)
    lx_c = lx - lx.mean()
    slope = float((lx_c * (ly - ly.mean())).sum() / (lx_c**2).sum())
    return -slope


def normalized_std(emb: Tensor) -> float:
    """Mean over dimensions of the batch std of L2-normalised embeddings (SimSiam, Chen & He
    2021, Sec. 4.1): ≈ 1/√k for embeddings spread isotropically over the sphere, → 0 at
    complete collapse."""
    x = _embeddings(emb, "normalized_std")
    return float(F.normalize(x, dim=1).std(0).mean())


@dataclasses.dataclass
class WithinRankCondition:
    """Condition number of the embedding covariance on its numerical range.

    Attributes:
        condition: λ_max / λ_r with r the numerical rank (1 for perfectly white embeddings).
        rank: r, the number of covariance eigenvalues above the tolerance.
        dim: k, the embedding width; ``rank < dim`` means dimensional collapse.
        tol: the relative eigenvalue tolerance used.
        eigenvalues: the r in-range eigenvalues, descending.
    """

    condition: float
    rank: int
    dim: int
    tol: float
    eigenvalues: list[float]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def within_rank_condition(emb: Tensor, rtol: float | None = None, normalize: bool = False) -> WithinRankCondition:
    """Condition number of cov(E) restricted to its numerical range, and that range's rank.

    The paper's tracker divides λ_max by λ_min clamped at 1e-7, which for a rank-deficient
    covariance is just λ_max·1e7; here eigenvalues below ``rtol``·λ_max count as zero and the
    condition number is taken over the rest. The default ``rtol`` is the numerical-rank
    tolerance of the centred data's singular values, squared: (max(N, k)·ε)² with ε the machine
    epsilon of ``emb``'s dtype (so float32 embeddings are not credited with float64 precision).

    Args:
        emb: (N, k) embeddings.
        rtol: relative eigenvalue tolerance (overrides the default).
        normalize: L2-normalise rows first (the paper's tracker does).
    """
    eps = torch.finfo(emb.dtype).eps if isinstance(emb, Tensor) and emb.is_floating_point() else torch.finfo(torch.float64).eps
    x = _embeddings(emb, "within_rank_condition")
    if normalize:
        x = F.normalize(x, dim=1)
    n, kdim = x.shape
    xc = (x - x.mean(0)) / math.sqrt(n - 1)
    lam = torch.linalg.svdvals(xc) ** 2
    if rtol is None:
        rtol = (max(n, kdim) * eps) ** 2
    lam_r = lam[lam > rtol * lam[0]] if float(lam[0]) > 0 else lam[:0]
    r = int(lam_r.numel())
    cond = float(lam_r[0] / lam_r[-1]) if r else float("nan")
    return WithinRankCondition(condition=cond, rank=r, dim=kdim, tol=float(rtol), eigenvalues=lam_r.tolist())


@dataclasses.dataclass
class CollapseMonitors:
    """All four monitors of one embedding batch (for logging every N steps)."""

    rankme: float
    alpha_req: float
    normalized_std: float
    healthy_std: float
    condition: float
    rank: int
    dim: int
    n: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def collapse_monitors(emb: Tensor) -> CollapseMonitors:
    """RankMe, α-ReQ, std of L2-normalised embeddings (with the healthy 1/√k), and the
    within-rank covariance condition number with its rank, for one batch (N, k)."""
    x = _embeddings(emb, "collapse_monitors")
    wr = within_rank_condition(x)
    return CollapseMonitors(
        rankme=rankme(x), alpha_req=alpha_req(x), normalized_std=normalized_std(x),
        healthy_std=1.0 / math.sqrt(x.shape[1]), condition=wr.condition, rank=wr.rank, dim=x.shape[1], n=x.shape[0],
    )


__all__ = [
    "CollapseMonitors", "EscapeCurvature", "WithinRankCondition", "alpha_req", "collapse_monitors",
    "escape_curvature", "normalized_std", "rankme", "within_rank_condition",
]
