"""The escape criterion of the search: a constraint only where Thm 4.1's premise holds.

Thm 4.1 (docs/theory.md) says that at a collapsed state where the objective's Hessian is positive
semi-definite (in the sphere-tangent frame for scale-invariant, cosine objectives) and its
gradient does not vanish, H = G + M has negative curvature only through the head's own
curvature M: a head without it cannot leave collapse by curvature. Where the premise fails
(Barlow Twins, VICReg: batch standardisation; SimCLR: the contrastive term; measured per study,
not assumed), G is indefinite for every head, every head "escapes" through the objective, and
the head's escape curvature says nothing about the head.

So, once per study, :func:`escape_premise` measures the objective's Hessian at the collapsed
state (around the real feature mean) through a reference head (the objective's standard head,
its hidden and output widths capped at :data:`REFERENCE_WIDTH`), in the frame
:func:`~geohead.geometry.escape_curvature` chooses. Where the premise holds, the screen prunes a
head whose H has no negative eigenvalue at collapse (:func:`screen_verdict`; the trial's
``constraint`` attribute, which TPE and NSGA-II learn from, is 1); where it fails, the criterion
is off and the search says so and why. The screen still records every head's escape curvature.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
from torch import Tensor, nn

from geohead.heads import HeadSpec

#: Hidden and output width of the reference head of the premise check (prototypes are kept).
REFERENCE_WIDTH = 256


@dataclasses.dataclass
class EscapePremise:
    """Whether Thm 4.1's premise holds for the study's objective at its collapsed state.

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
    def reason(self) -> str:
        """Why the criterion is on or off, in words (with the measured numbers)."""
        lo, hi = self.lambda_min_objective, self.lambda_max_objective
        spec = f"λ_min {lo:.3g}, λ_max {hi:.3g}" if lo is not None and hi is not None else "spectrum not computed"
        where = f"{self.frame} frame, at the collapsed state around the real feature mean through {self.reference_head}"
        if self.holds:
            return (f"Thm 4.1's premise holds for {self.objective}: its Hessian is positive semi-definite ({spec}) and "
                    f"‖∇_e L‖ = {self.grad_norm:.3g} ≠ 0 ({where}); a head without negative curvature at collapse "
                    "cannot escape it, so the screen prunes it")
        if self.gradient_vanishes:
            why = f"∇_e L vanishes (‖∇_e L‖ = {self.grad_norm:.3g})"
        else:
            why = f"its Hessian is indefinite ({spec})"
        return (f"Thm 4.1's premise fails for {self.objective}: {why} ({where}); every head gets negative curvature "
                "from the objective, so the head's escape curvature is recorded, not used")

    def describe(self) -> str:
        return f"escape criterion {'ON' if self.holds else 'OFF'}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "on": self.holds, "reason": self.reason}


def premise_head_spec(base: HeadSpec) -> HeadSpec:
    """The objective's standard head with hidden and output widths capped (prototypes kept)."""
    return base.replace(hidden_dim=min(base.hidden_dim, REFERENCE_WIDTH),
                        out_dim=base.out_dim if base.prototypes else min(base.out_dim, REFERENCE_WIDTH))


def escape_premise(name: str, objective: nn.Module, base: HeadSpec, z: Tensor, collapsed: tuple[Tensor, Tensor],
                   predictor_spec: Callable[[int], HeadSpec | None], seed: int, spread: float) -> EscapePremise:
    """Measure Thm 4.1's premise for ``objective`` (see the module docstring); ~0.1 s."""
    from geohead.geometry import EscapeSettings, escape_curvature
    from geohead.objectives import CollapsedState
    from geohead.search.criteria import build_head

    spec = premise_head_spec(base)
    head, predictor = build_head(spec, z, seed, predictor_spec(spec.output_dim))
    state = CollapsedState(collapsed[0], collapsed[1], "complete", 0, spread)
    settings = EscapeSettings(mode="fast", dtype=torch.float64, pullback=False, objective_spectrum=True, m_over_h=False)
    esc = escape_curvature(head, objective, settings=settings, predictor=predictor, state=state,
                           generator=torch.Generator().manual_seed(seed))
    ref = esc.reference
    return EscapePremise(objective=name, holds=bool(ref.premise_holds), frame=esc.frame,
                         lambda_min_objective=ref.lambda_min_objective, lambda_max_objective=ref.lambda_max_objective,
                         grad_norm=float(ref.grad_norm), gradient_vanishes=bool(ref.gradient_vanishes),
                         equilibrium=esc.equilibrium, reference_head=spec.describe())


def screen_verdict(crit: dict[str, float], premise: EscapePremise) -> str | None:
    """Why a candidate is pruned before training, or None: only where the premise holds, a head
    whose H has no negative eigenvalue at the collapsed state cannot escape it."""
    if premise.holds and crit.get("screen_escape_negative", 1.0) == 0:
        return (f"screen: cannot escape collapse (Thm 4.1's premise holds for {premise.objective}; no negative "
                f"curvature of H in the {premise.frame} frame, λ_min {crit.get('screen_escape_lambda_min', float('nan')):.3g})")
    return None


__all__ = ["EscapePremise", "REFERENCE_WIDTH", "escape_premise", "premise_head_spec", "screen_verdict"]
