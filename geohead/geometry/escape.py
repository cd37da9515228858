"""Thm 4.1 measured at a collapsed state: how (:class:`EscapeSettings`), the answer
(:class:`EscapeCurvature`, with what the objective does apart in its :class:`EscapeReference`)
and the premise (:class:`EscapePremise`). :mod:`geohead.geometry.collapse` computes them
(:func:`~geohead.geometry.collapse.escape_curvature`, :func:`~geohead.geometry.collapse.escape_premise`).

Thm 4.1 (docs/theory.md): "at a collapsed equilibrium, if the objective's Hessian ∇²_e L is
positive semi-definite and its gradient ∇_e L ≠ 0, then a smooth non-linear head gives M negative
eigenvalues that make H_eff indefinite: the collapsed state is a saddle and gradient flow leaves
it". H_eff = G + M acts on R^{B·d} (the state Z is (B, d)); the objective's Hessian on R^{B·k}
(the embeddings e = h(Z) are (B, k)).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from geohead.geometry.summary import Mode, mode_settings

FRAMES: tuple[str, ...] = ("auto", "ambient", "tangent")


@dataclasses.dataclass(frozen=True)
class EscapeSettings:
    """How :func:`escape_curvature` measures: the collapsed state it draws, the frame, the
    Lanczos budget and which parts it computes (``dataclasses.replace`` makes variants).

    Attributes:
        batch_size, kind, rank, spread: the collapsed state drawn when none is given (B,
            ``"complete"`` or ``"dimensional"``, the subspace rank, the perturbation std).
        frame: ``"auto"`` (sphere-tangent for scale-invariant objectives, ambient otherwise),
            ``"ambient"`` or ``"tangent"``.
        bn_mode: ``"eval"`` (default) or ``"train"`` (couples samples; curves ReLU heads).
        refine: when > 0 (complete collapse only), also look for a collapsed equilibrium: the
            exact collapsed state (every row of both views at their common mean) moved by at most
            this many L-BFGS iterations (:func:`~geohead.geometry.equilibrium.refine_collapsed`). It is
            measured instead of the given state when it is stationary and its curvature is not
            identically 0 (``equilibrium="exact"`` or ``"refined"``); otherwise the given state
            is measured and ``refinement`` says why.
        mode: ``"accurate"`` (float64, converged Lanczos, ‖M‖/‖H‖ exact up to B·d = 1024 else 30
            probes) or ``"fast"`` (float32, ≤ 10 Lanczos steps per operator, 4 probes: screening).
        k, max_iter, lanczos_tol, fro_probes, exact_dim, dtype: override the mode's
            (:data:`~geohead.geometry.summary.MODES`): Ritz values per end (``k ≥ dim/2`` gives the
            full spectra), Lanczos steps and residual tolerance, probes of ‖M‖/‖H‖, the B·d up to
            which it is exact, the dtype.
        tol: negativity threshold relative to max|λ| of each operator.
        grad_tol: ‖∇_e L‖ below this flags ``gradient_vanishes``.
        stationary_tol: relative-gradient tolerance of "stationary" (1e-8 float64, 1e-4 float32).
        pullback, objective_spectrum, m_over_h: compute G's spectrum (and the ambient
            references), the objective Hessian's spectrum (the premise) and ‖M‖_F/‖H‖_F; switch
            off for screening (their fields are then None). The head's curvature along the
            escape direction is always computed: one M product (and, without ``pullback``,
            vᵀGv = θ − vᵀMv from the Ritz pair).
    """

    batch_size: int = 32
    kind: str = "complete"
    rank: int = 1
    spread: float = 1e-2
    frame: str = "auto"
    bn_mode: str = "eval"
    refine: int = 0
    mode: Mode = "accurate"
    k: int | None = None
    max_iter: int | None = None
    lanczos_tol: float | None = None
    fro_probes: int | None = None
    exact_dim: int | None = None
    dtype: torch.dtype | None = None
    tol: float = 1e-6
    grad_tol: float = 1e-12
    stationary_tol: float | None = None
    pullback: bool = True
    objective_spectrum: bool = True
    m_over_h: bool = True

    def __post_init__(self) -> None:
        k = self.budget()["k"]  # raises for an unknown mode
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if isinstance(self.refine, bool) or not isinstance(self.refine, int) or self.refine < 0:
            raise ValueError(f"refine must be a non-negative integer (L-BFGS iterations), got {self.refine!r}")
        if self.frame not in FRAMES:
            raise ValueError(f"unknown frame {self.frame!r}; use one of {list(FRAMES)}")

    def budget(self) -> dict[str, Any]:
        """The mode's k, max_iter, lanczos_tol, fro_probes, exact_dim and dtype, with the ones set here."""
        return mode_settings(self.mode, k=self.k, max_iter=self.max_iter, lanczos_tol=self.lanczos_tol,
                             fro_probes=self.fro_probes, exact_dim=self.exact_dim, dtype=self.dtype)


@dataclasses.dataclass
class EscapeReference:
    """What the objective and the pullback do at the state, beside the head's answer: Thm 4.1's
    premise (∇_e L and the frame's objective Hessian), the pullback metric G, and in the tangent
    frame the ambient operators. Fields of parts switched off (``pullback``,
    ``objective_spectrum``) are None; negative counts as in :class:`EscapeCurvature`.

    Attributes:
        grad_norm: ‖∇_e L‖ at the state; ``gradient_vanishes`` when it is below ``grad_tol``
            (then M = 0 whatever the head: the theorem needs ∇_e L ≠ 0).
        lambda_min_objective, lambda_max_objective, num_negative_objective: of the frame's
            objective Hessian (R^{B·k}: P ∇²_e L P in the tangent frame, ∇²_e L in the ambient one);
            ``objective_psd`` is Thm 4.1's premise (no eigenvalue below −tol·max|λ|);
            ``objective_psd_ambient`` the ambient ∇²_e L's, for reference (tangent frame only).
        lambda_min_G, lambda_max_G, num_negative_G: of the frame's pullback metric G (R^{B·d}:
            G_tan = Jᵀ P ∇²_e L P J or G = Jᵀ ∇²_e L J; negatives relative to max(|λ(G)|, |λ(H)|)).
        lambda_min_shift: λ_min(H) − λ_min(G) (Weyl: |·| ≤ ‖M‖_2), for comparison.
        lambda_min_H_ambient, num_negative_H_ambient, lambda_min_G_ambient: the ambient H_eff and
            G, in the tangent frame with ``pullback`` (else None).
    """

    grad_norm: float
    gradient_vanishes: bool
    lambda_min_objective: float | None
    lambda_max_objective: float | None
    num_negative_objective: int | None
    objective_psd: bool | None
    objective_psd_ambient: bool | None
    lambda_min_G: float | None
    lambda_max_G: float | None
    num_negative_G: int | None
    lambda_min_shift: float | None
    lambda_min_H_ambient: float | None
    num_negative_H_ambient: int | None
    lambda_min_G_ambient: float | None

    @property
    def premise_holds(self) -> bool | None:
        """Thm 4.1's premises: the frame's objective Hessian PSD and ∇_e L ≠ 0 (None when the
        objective's spectrum was not computed)."""
        if self.objective_psd is None:
            return None
        return bool(self.objective_psd) and not self.gradient_vanishes


#: The keys of :meth:`EscapeCurvature.to_dict`, in the order ``geohead diagnose`` writes them
#: (the ``escape`` section of ``geohead.diagnose/1``): the answer's and the reference's fields, flat.
RECORD_KEYS: tuple[str, ...] = (
    "objective", "head", "kind", "rank", "spread", "batch_size", "dim", "embed_dim", "bn_mode", "dtype", "frame",
    "loss", "grad_norm", "gradient_vanishes", "grad_norm_z", "newton_length", "gradient_relative", "stationary",
    "stationary_tol", "equilibrium", "refinement", "lambda_min_H", "lambda_max_H", "num_negative_H", "lambda_min_G",
    "lambda_max_G", "num_negative_G", "lambda_min_H_ambient", "num_negative_H_ambient", "lambda_min_G_ambient",
    "lambda_min_objective", "lambda_max_objective", "num_negative_objective", "objective_psd", "objective_psd_ambient",
    "m_over_h", "m_over_h_stderr", "m_over_h_exact", "head_curvature", "pullback_curvature", "head_share",
    "head_negative_curvature", "lambda_min_shift", "negative_directions", "tol", "k", "exact", "converged", "n_matvec",
    "premise_holds", "saddle",
)


@dataclasses.dataclass
class EscapeCurvature:
    """Curvature of Z ↦ L(branch(h(Z)), b) at a collapsed state Z (B, d): the answer, in the
    frame's H (R^{B·d}); what the objective does is its ``reference``.

    Eigenvalue fields are extreme Ritz values of Lanczos runs (exact when ``exact``); negative
    counts are Ritz values below −tol·max|λ| of that operator: by Cauchy interlacing a lower
    bound on the number of such eigenvalues, exact when the run was (``k ≥ dim/2``).

    Attributes:
        objective, head: the objective's name and the head's spec (``HeadSpec.to_dict``, or None).
        kind, rank, spread, batch_size: the state measured (spread 0 when a refined state was);
            dim = B·d, embed_dim = B·k; bn_mode, dtype: how.
        frame: ``"tangent"`` (scale-invariant objectives: H = H_tan = G_tan + M) or
            ``"ambient"`` (H = H_eff = G + M).
        loss: L at the state.
        lambda_min_H, lambda_max_H, num_negative_H: of the frame's H.
        grad_norm_z, newton_length, gradient_relative, stationary: ‖∇_Z f‖_F, ‖∇_Z f‖/max|λ(H)|,
            that over ‖Z‖_F, and whether it is ≤ ``stationary_tol``
            (:class:`~geohead.geometry.equilibrium.Stationarity`): the state is an equilibrium.
        equilibrium: ``"exact"`` (the measured state is stationary as given), ``"refined"``
            (moved to a stationary collapsed state by ``refine``) or ``"none"`` (not an
            equilibrium: negative curvature there is not a saddle).
        refinement: what ``refine`` did (iterations, gradients, whether the refined state was
            stationary and adopted, and why not), or None.
        m_over_h: ‖M‖_F / ‖H‖_F of the frame's H (± ``m_over_h_stderr``); ``m_over_h_exact``
            whether both norms were computed exactly (None when switched off).
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
        negative_directions: for each converged negative Ritz value of H found (≤ k), the
            triple (θ, vᵀGv, vᵀMv).
        tol, k: the negativity threshold and Ritz values per end used.
        exact: every Lanczos run spanned the whole space and ``m_over_h`` (if computed) is exact;
            converged: every run converged; n_matvec: operator products.
        reference: :class:`EscapeReference` (the premise, G, the ambient operators).
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
    m_over_h: float | None
    m_over_h_stderr: float | None
    m_over_h_exact: bool | None
    head_curvature: float
    pullback_curvature: float
    head_share: float
    head_negative_curvature: float
    negative_directions: list[tuple[float, float, float]]
    tol: float
    k: int
    exact: bool
    converged: bool
    n_matvec: int
    reference: EscapeReference

    @property
    def saddle(self) -> bool:
        """An equilibrium (``equilibrium != "none"``) with a negative eigenvalue of H: the only
        states this module calls saddles."""
        return self.equilibrium != "none" and self.num_negative_H > 0

    def to_dict(self) -> dict[str, Any]:
        """One flat record (:data:`RECORD_KEYS`): the answer's and the reference's fields,
        ``premise_holds`` and ``saddle``."""
        flat = {**dataclasses.asdict(self), **dataclasses.asdict(self.reference)}
        del flat["reference"]
        flat.update(negative_directions=[list(t) for t in self.negative_directions],
                    premise_holds=self.reference.premise_holds, saddle=self.saddle)
        ordered = {key: flat.pop(key) for key in RECORD_KEYS}
        return {**ordered, **flat}


@dataclasses.dataclass
class EscapePremise:
    """Whether Thm 4.1's premise holds for an objective at a collapsed state, measured through a
    reference head (:func:`~geohead.geometry.collapse.escape_premise`).

    Attributes:
        objective: the objective's name.
        holds: the premise (objective Hessian PSD in ``frame``, ∇_e L ≠ 0).
        frame: ``"tangent"`` (cosine objectives) or ``"ambient"``.
        lambda_min_objective, lambda_max_objective: extremes of the frame's objective Hessian.
        grad_norm: ‖∇_e L‖ at the state; gradient_vanishes: below the tolerance.
        equilibrium: ``"exact"``/``"none"``: whether the measured state is stationary.
        reference_head: the head the premise was measured through.
    """

    objective: str
    holds: bool
    frame: str
    lambda_min_objective: float | None
    lambda_max_objective: float | None
    grad_norm: float
    gradient_vanishes: bool
    equilibrium: str
    reference_head: str

    @property
    def why(self) -> str:
        """Why the premise holds or fails, in words with the measured numbers."""
        lo, hi = self.lambda_min_objective, self.lambda_max_objective
        spec = f"λ_min {lo:.3g}, λ_max {hi:.3g}" if lo is not None and hi is not None else "spectrum not computed"
        if self.holds:
            return f"its Hessian is positive semi-definite ({spec}) and ‖∇_e L‖ = {self.grad_norm:.3g} ≠ 0"
        if self.gradient_vanishes:
            return f"∇_e L vanishes (‖∇_e L‖ = {self.grad_norm:.3g})"
        return f"its Hessian is indefinite ({spec})"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


__all__ = ["EscapeCurvature", "EscapePremise", "EscapeReference", "EscapeSettings", "FRAMES", "RECORD_KEYS"]
