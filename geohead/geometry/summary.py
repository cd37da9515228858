"""One symmetric operator's spectrum condensed into the numbers the training loop and the head
search log: :func:`spectrum_summary` (λ_min, λ_max, negative count, within-rank condition number,
and ‖M‖_F/‖H_eff‖_F for an :class:`~geohead.geometry.hessian.EffectiveHessian`).

Two cost modes (:data:`MODES`): ``"accurate"`` (float64 diagnostics, Ritz residuals to
1e-8·max|λ|) and ``"fast"`` (a fixed small Krylov budget for screening many heads). An eigenvalue
counts as negative only below −tol·max|λ|, never at rounding level (docs/theory.md,
"Measurement pitfalls").
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Literal, NamedTuple

import torch
from torch import Tensor

from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.lanczos import LanczosResult, lanczos
from geohead.geometry.operators import Operator, as_operator
from geohead.geometry.trace import frobenius_norm

Mode = Literal["accurate", "fast"]

#: Settings of the two cost modes of :func:`spectrum_summary` and ``escape_curvature``.
#: "accurate": float64 diagnostics, Ritz residuals to 1e-8·max|λ|, ‖M‖/‖H‖ exact up to B·d = 1024
#: (2·B·d products). "fast": a fixed small Krylov budget for screening many heads (λ_max converges
#: in a few steps, λ_min only roughly) and a 4-probe ‖M‖/‖H‖.
MODES: dict[str, dict[str, Any]] = {
    "accurate": {"k": 6, "max_iter": None, "lanczos_tol": None, "fro_probes": 30, "exact_dim": 1024,
                 "dtype": torch.float64},
    "fast": {"k": 2, "max_iter": 10, "lanczos_tol": 1e-3, "fro_probes": 4, "exact_dim": 0, "dtype": torch.float32},
}


#: The most rows B of an effective Hessian that a recipe or a diagnosis may ask for, and the most
#: Lanczos steps on one: H_eff is B·d-dimensional and its Lanczos basis holds steps × B·d numbers,
#: so at both bounds a ResNet-18's (d = 512) basis is 4 GiB in float64 (the bound on pixels too).
MAX_HESSIAN_BATCH = 1024
MAX_LANCZOS_STEPS = 1000


def hessian_size_problem(batches: dict[str, int], steps: dict[str, int]) -> str | None:
    """Why the named H_eff batch sizes and Lanczos step counts cannot be asked for (the first one
    above :data:`MAX_HESSIAN_BATCH` or :data:`MAX_LANCZOS_STEPS`, naming it and the bound), else None."""
    named = [(k, v, MAX_HESSIAN_BATCH) for k, v in batches.items()] + [(k, v, MAX_LANCZOS_STEPS) for k, v in steps.items()]
    return next((f"{k}={v} is above the bound of {top:,}; give at most {top:,}" for k, v, top in named if v > top), None)


def mode_settings(mode: str, **given: Any) -> dict[str, Any]:
    """The settings of ``mode`` (see :data:`MODES`) with every ``given`` value that is not None."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; use one of {list(MODES)}")
    return {**MODES[mode], **{k: v for k, v in given.items() if v is not None}}


@dataclasses.dataclass
class SpectrumSummary:
    """The numbers one Lanczos run gives about a symmetric operator.

    Attributes:
        lambda_min, lambda_max: extreme Ritz values; ``residual_min``/``residual_max`` their
            Ritz residuals (an eigenvalue lies within the residual).
        scale: max|θ| over the Ritz values (what ``tol`` is relative to).
        num_negative: Ritz values below −tol·scale: a lower bound on the number of eigenvalues
            there (Cauchy interlacing), exact when ``exact``.
        negative_tol: tol.
        condition_within_rank: max|θ| / min{|θ| : converged, |θ| > tol·scale}: for a positive
            semi-definite operator the ratio of its largest eigenvalue to its smallest *non-zero*
            one, i.e. the condition number on its range (a single Krylov sequence sees the null
            space as one eigenvalue, so the bottom end after it is the range's bottom end);
            for an indefinite operator the ratio over the converged extremes (a lower bound).
        m_over_h: ‖M‖_F/‖H_eff‖_F (only when an :class:`EffectiveHessian` was summarised),
            ``m_over_h_stderr`` its propagated standard error (0 when computed exactly),
            ``m_over_h_exact`` whether it was.
        n_matvec, iterations, converged: cost and status of the Lanczos run.
        exact: the Lanczos run spanned the whole space (every eigenvalue, multiplicities
            included) *and* ‖M‖/‖H‖, if computed, is exact: every number is exact.
    """

    name: str
    dim: int
    lambda_min: float
    lambda_max: float
    residual_min: float
    residual_max: float
    scale: float
    num_negative: int
    negative_tol: float
    condition_within_rank: float
    iterations: int
    n_matvec: int
    converged: bool
    exact: bool
    dtype: str
    eigenvalues: list[float]
    m_over_h: float | None = None
    m_over_h_stderr: float | None = None
    m_over_h_exact: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _condition(lz: LanczosResult, tol: float) -> float:
    theta, res = lz.ritz_values, lz.ritz_residuals
    scale = lz.scale
    if scale == 0:
        return float("nan")
    ok = (res <= max(lz.tol, 1e-12) * scale * 10) & (theta.abs() > tol * scale)
    if not bool(ok.any()):
        return float("nan")
    return scale / float(theta[ok].abs().min())


def count_negative(lz: LanczosResult, tol: float, scale: float | None = None) -> int:
    """Ritz values below −tol·scale (scale defaults to max|θ| of the run).

    By Cauchy interlacing (T_m = QᵀAQ is a compression of A) the i-th smallest Ritz value is
    ≥ the i-th smallest eigenvalue, so this count is a guaranteed lower bound on the number of
    eigenvalues (with multiplicity) below the threshold; it equals it when the run was exact.
    """
    scale = lz.scale if scale is None else scale
    return int((lz.ritz_values < -tol * scale).sum())


class Ratio(NamedTuple):
    """‖M‖_F / ‖H‖_F: ``value`` ± ``stderr``; ``exact`` when both norms were computed exactly
    (then ``stderr`` is 0)."""

    value: float
    stderr: float
    exact: bool


def m_over_h_ratio(
    eh: EffectiveHessian,
    *,
    num_probes: int = 30,
    generator: torch.Generator | None = None,
    exact: bool | None = None,
    exact_dim: int = 0,
    tangent: bool = False,
) -> Ratio:
    """‖M‖_F / ‖H‖_F with H = H_eff (or H_tan = G_tan + M with ``tangent``, the frame of
    scale-invariant objectives).

    Exact (‖A‖_F² = Σ_i ‖A e_i‖², B·d products per operator, stderr 0) when ``exact=True``, or
    by default when B·d ≤ max(``exact_dim``, ``num_probes``); otherwise Hutch++ with
    ``num_probes`` shared probes, and the standard error combines the two relative standard
    errors. M is computed directly, so the ratio is exactly 0 where the head has no curvature.
    """
    if exact is None:
        exact = eh.dim <= max(exact_dim, num_probes)
    seed = int(torch.randint(0, 2**31 - 1, (1,), generator=generator)) if generator is not None else 0
    h_op = eh.H_tangent if tangent else eh.H
    m = frobenius_norm(eh.M, num_probes=num_probes, exact=exact, generator=torch.Generator().manual_seed(seed))
    h = frobenius_norm(h_op, num_probes=num_probes, exact=exact, generator=torch.Generator().manual_seed(seed))
    if h.value == 0:
        return Ratio(0.0 if m.value == 0 else float("inf"), 0.0, bool(exact))
    ratio = m.value / h.value
    rel = math.hypot(m.stderr / m.value if m.value else 0.0, h.stderr / h.value)
    return Ratio(ratio, ratio * rel, bool(exact))


def spectrum_summary(
    op: Operator | EffectiveHessian | Callable[[Tensor], Tensor],
    dim: int | None = None,
    *,
    k: int | None = None,
    tol: float = 1e-6,
    mode: Mode = "accurate",
    max_iter: int | None = None,
    lanczos_tol: float | None = None,
    fro_probes: int | None = None,
    exact_dim: int | None = None,
    generator: torch.Generator | None = None,
) -> SpectrumSummary:
    """λ_min, λ_max, negatives, within-rank condition number (and ‖M‖_F/‖H‖_F) of an operator.

    Args:
        op: an :class:`Operator`, a matvec callable (with ``dim``), or an
            :class:`EffectiveHessian` (then H_eff is summarised and ‖M‖_F/‖H_eff‖_F added).
        k: Ritz values per end (default by ``mode``: 6 accurate, 2 fast).
        tol: an eigenvalue counts as negative only below −tol·max|λ| (docs/theory.md,
            "Measurement pitfalls").
        mode: ``"accurate"`` (converge to ``lanczos_tol``, default 1e-8 relative in float64) or
            ``"fast"`` (at most 10 Lanczos steps, 4 Frobenius probes: a screening budget; the
            operator's dtype is whatever the EffectiveHessian was built with).
        max_iter, lanczos_tol, fro_probes, exact_dim: override the mode's settings (‖M‖/‖H‖ is
            exact when B·d ≤ max(exact_dim, fro_probes)).
    """
    cfg = mode_settings(mode, k=k, max_iter=max_iter, lanczos_tol=lanczos_tol, fro_probes=fro_probes,
                        exact_dim=exact_dim)
    k, max_iter, lanczos_tol, fro_probes = cfg["k"], cfg["max_iter"], cfg["lanczos_tol"], cfg["fro_probes"]
    eh = op if isinstance(op, EffectiveHessian) else None
    A = eh.H if eh is not None else as_operator(op, dim)
    start = A.n_matvec
    k = min(k, A.dim)
    if max_iter is not None:
        max_iter = max(max_iter, min(2 * k, A.dim))
    lz = lanczos(A, k=k, which="both", max_iter=max_iter, tol=lanczos_tol, generator=generator)
    ratio = None
    if eh is not None:
        ratio = m_over_h_ratio(eh, num_probes=fro_probes, generator=generator, exact_dim=cfg["exact_dim"])
    return SpectrumSummary(
        name=A.name,
        dim=A.dim,
        lambda_min=lz.lambda_min,
        lambda_max=lz.lambda_max,
        residual_min=float(lz.ritz_residuals[0]),
        residual_max=float(lz.ritz_residuals[-1]),
        scale=lz.scale,
        num_negative=count_negative(lz, tol),
        negative_tol=tol,
        condition_within_rank=_condition(lz, tol),
        iterations=lz.iterations,
        n_matvec=A.n_matvec - start,
        converged=lz.converged,
        exact=lz.exact and (ratio is None or ratio.exact),
        dtype=str(A.dtype).replace("torch.", ""),
        eigenvalues=lz.eigenvalues.tolist(),
        m_over_h=ratio.value if ratio is not None else None,
        m_over_h_stderr=ratio.stderr if ratio is not None else None,
        m_over_h_exact=ratio.exact if ratio is not None else None,
    )


__all__ = [
    "MODES", "Mode", "Ratio", "SpectrumSummary", "count_negative", "m_over_h_ratio", "mode_settings", "spectrum_summary",
]
