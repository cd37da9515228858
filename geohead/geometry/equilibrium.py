"""Is a collapsed state an equilibrium? Stationarity relative to the curvature, and refinement.

Thm 4.1 (Chaudhry 2026) is a statement about collapsed *equilibria*: points where the backbone's
gradient ∇_Z f vanishes. A state with ∇_Z f ≠ 0 is not a saddle whatever the sign of its
curvature: gradient flow leaves it along −∇_Z f before any negative eigenvalue matters. So every
curvature measurement at a collapsed state comes with

    newton_length     ℓ = ‖∇_Z f‖_F / max|λ(H)|     (the distance a quadratic model needs to cancel
                                                   the gradient: Z is within ~ℓ of a critical point
                                                   only if the curvature there is that of H),
    gradient_relative ℓ / ‖Z‖_F                     (dimensionless: invariant to rescaling f, and to
                                                   rescaling Z together with the head's input),

and is called *stationary* when ``gradient_relative`` ≤ tol (default 1e-8 in float64, 1e-4 in
float32), a *saddle* only when it is stationary and H has a negative eigenvalue
(docs/theory.md, "Collapsed states").

:func:`refine_collapsed` looks for a collapsed equilibrium near a state where the given one is
not: every row of the online view is tied to one centre c (complete collapse stays complete
collapse), the target branch is held fixed (stop-gradient / EMA teacher, as everywhere in
:class:`~geohead.geometry.hessian.EffectiveHessian`), and L-BFGS (strong-Wolfe line search)
moves c to a stationary point of c ↦ f(1 cᵀ). When the target rows are identical too (the exact
collapsed state), every row's gradient is the same by the permutation symmetry of the objectives,
so a stationary centre is a stationary Z; the caller checks ∇_Z f anyway.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import torch
from torch import Tensor


def default_stationary_tol(dtype: torch.dtype) -> float:
    """Relative-gradient tolerance of "stationary": 1e-8 in float64, 1e-4 in lower precision."""
    return 1e-8 if dtype == torch.float64 else 1e-4


@dataclasses.dataclass
class Stationarity:
    """How far a state is from an equilibrium, relative to the curvature there.

    Attributes:
        grad_norm_z: ‖∇_Z f‖_F.
        curvature_scale: max|λ(H)| of the operator the curvature was measured with.
        state_norm: ‖Z‖_F.
        newton_length: ‖∇_Z f‖_F / curvature_scale (0 when the gradient is exactly 0, inf when
            the curvature is 0 but the gradient is not).
        gradient_relative: newton_length / state_norm.
        stationary: gradient_relative ≤ tol (an exactly zero gradient is stationary even at zero
            curvature).
        tol: the tolerance.
    """

    grad_norm_z: float
    curvature_scale: float
    state_norm: float
    newton_length: float
    gradient_relative: float
    stationary: bool
    tol: float

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def stationarity(grad_z: Tensor, curvature_scale: float, z: Tensor, tol: float | None = None) -> Stationarity:
    """:class:`Stationarity` of a state z (B, d) with gradient ``grad_z`` (B, d) and curvature
    scale max|λ(H)| (see the module docstring)."""
    tol = default_stationary_tol(z.dtype) if tol is None else float(tol)
    g = float(grad_z.detach().to(torch.float64).norm())
    zn = float(z.detach().to(torch.float64).norm())
    if g == 0.0:
        length = 0.0
    elif curvature_scale > 0:
        length = g / curvature_scale
    else:
        length = math.inf
    rel = 0.0 if length == 0.0 else (length / zn if zn > 0 else math.inf)
    return Stationarity(g, float(curvature_scale), zn, length, rel, rel <= tol, tol)


@dataclasses.dataclass
class RefinedState:
    """The result of :func:`refine_collapsed`.

    Attributes:
        z: (B, d) the refined online representations (every row the centre c*).
        iterations: L-BFGS iterations used.
        function_evals: evaluations of f (each one forward and one backward pass).
        grad_norm_start, grad_norm_end: ‖∇_c f(1 cᵀ)‖ at the start centre and at c*.
        moved: ‖c* − c_0‖ / ‖c_0‖.
    """

    z: Tensor
    iterations: int
    function_evals: int
    grad_norm_start: float
    grad_norm_end: float
    moved: float

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d.pop("z")
        return d


def refine_collapsed(
    composite: Callable[[Tensor], Tensor],
    z: Tensor,
    *,
    max_iter: int = 100,
    history_size: int = 20,
) -> RefinedState:
    """Move the centre of a completely collapsed online view to a stationary point.

    Args:
        composite: Z (B, d) ↦ f(Z), the scalar objective with the target branch held fixed
            (:meth:`EffectiveHessian.composite`).
        z: (B, d) representations; the start centre is their row mean c_0 (for an exact collapsed
            state, the common row).
        max_iter: L-BFGS iterations at most (each one line search of a few evaluations).
        history_size: L-BFGS memory.

    Returns: :class:`RefinedState` with ``z`` = 1 c*ᵀ in z's dtype. Whether c* is an equilibrium
    of Z ↦ f(Z) is for the caller to check with :func:`stationarity` (L-BFGS stops at
    ``max_iter`` or when it can make no more progress, stationary or not).
    """
    if z.dim() != 2:
        raise ValueError(f"z must be (B, d), got shape {tuple(z.shape)}")
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer, got {max_iter!r}")
    b = z.shape[0]
    c0 = z.detach().mean(0)
    c = c0.clone().requires_grad_(True)
    evals = 0

    def closure() -> Tensor:
        nonlocal evals
        evals += 1
        c.grad = None
        loss = composite(c.expand(b, -1))
        loss.backward()
        return loss

    def grad_norm() -> float:
        closure()
        assert c.grad is not None
        return float(c.grad.norm())

    start = grad_norm()
    opt = torch.optim.LBFGS([c], lr=1.0, max_iter=max_iter, max_eval=max_iter * 5, history_size=history_size,
                            tolerance_grad=0.0, tolerance_change=0.0, line_search_fn="strong_wolfe")
    if start > 0:
        opt.step(closure)
    iterations = int(opt.state[c].get("n_iter", 0)) if start > 0 else 0
    end = grad_norm()
    c_star = c.detach()
    moved = float((c_star - c0).norm() / c0.norm()) if float(c0.norm()) > 0 else float((c_star - c0).norm())
    return RefinedState(c_star.expand(b, -1).clone(), iterations, evals, start, end, moved)


__all__ = ["RefinedState", "Stationarity", "default_stationary_tol", "refine_collapsed", "stationarity"]
