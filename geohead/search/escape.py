"""The escape criterion of the search: a constraint only where Thm 4.1's premise holds.

Thm 4.1 (docs/theory.md) says that at a collapsed state where the objective's Hessian is positive
semi-definite (in the sphere-tangent frame for scale-invariant, cosine objectives) and its
gradient does not vanish, H = G + M has negative curvature only through the head's own
curvature M: a head without it cannot leave collapse by curvature. Where the premise fails
(Barlow Twins, VICReg: batch standardisation; SimCLR: the contrastive term; measured per study,
not assumed), G is indefinite for every head, every head "escapes" through the objective, and
the head's escape curvature says nothing about the head.

So, once per study, :func:`reference_premise` measures the premise
(:func:`geohead.geometry.escape_premise`) at the collapsed state (around the real feature mean)
through a reference head (the objective's standard head, its hidden and output widths capped at
:data:`REFERENCE_WIDTH`). Where the premise holds, the screen prunes a head whose H has no
negative eigenvalue at collapse (:func:`screen_verdict`; the trial's ``constraint`` attribute,
which TPE and NSGA-II learn from, is 1); where it fails, the criterion is off and the search says
so and why (:func:`describe_criterion`, :func:`criterion_record`). The screen still records every
head's escape curvature.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch import Tensor, nn

from geohead.heads import HeadSpec

if TYPE_CHECKING:
    from geohead.geometry import EscapePremise

#: Hidden and output width of the reference head of the premise check (prototypes are kept).
REFERENCE_WIDTH = 256


def premise_head_spec(base: HeadSpec) -> HeadSpec:
    """The objective's standard head with hidden and output widths capped (prototypes kept)."""
    return base.replace(hidden_dim=min(base.hidden_dim, REFERENCE_WIDTH),
                        out_dim=base.out_dim if base.prototypes else min(base.out_dim, REFERENCE_WIDTH))


def reference_premise(objective: nn.Module, base: HeadSpec, z: Tensor, collapsed: tuple[Tensor, Tensor],
                      predictor_spec: Callable[[int], HeadSpec | None], seed: int, spread: float) -> EscapePremise:
    """Thm 4.1's premise for the study's objective at the complete collapsed state
    ``collapsed`` (two (B, d) views, perturbation std ``spread``), through the reference head of
    ``base`` built on the features ``z`` (N, d) with ``seed`` (see the module docstring); ~0.1 s."""
    from geohead.geometry import escape_premise
    from geohead.objectives import CollapsedState
    from geohead.search.criteria import build_head

    spec = premise_head_spec(base)
    head, predictor = build_head(spec, z, seed, predictor_spec(spec.output_dim))
    state = CollapsedState(collapsed[0], collapsed[1], "complete", 0, spread)
    return escape_premise(head, objective, state, predictor=predictor, generator=torch.Generator().manual_seed(seed),
                          reference_head=spec.describe())


def _reason(premise: EscapePremise) -> str:
    """Why the criterion is on or off, in words (with the measured numbers)."""
    where = f"{premise.frame} frame, at the collapsed state around the real feature mean through {premise.reference_head}"
    if premise.holds:
        return (f"Thm 4.1's premise holds for {premise.objective}: {premise.why} ({where}); a head without negative "
                "curvature at collapse cannot escape it, so the screen prunes it")
    return (f"not needed for {premise.objective} (not a fault): Thm 4.1's premise fails there: {premise.why} ({where}); "
            "every head gets negative curvature from the objective itself, so the head's escape curvature is recorded, "
            "not used")


#: What the header adds when ``--no-escape`` turns the constraint off where the premise holds.
_TURNED_OFF = "; but --no-escape is set: escape curvature is recorded, and no head is pruned or marked infeasible for it"


def describe_criterion(premise: EscapePremise, enabled: bool = True) -> str:
    """One line for the search's header: the escape criterion ON or OFF, and why (``enabled``:
    the search's ``escape`` setting)."""
    off = _TURNED_OFF if premise.holds and not enabled else ""
    return f"escape criterion {'ON' if premise.holds else 'OFF'}: {_reason(premise)}{off}"


def criterion_record(premise: EscapePremise, enabled: bool = True) -> dict[str, Any]:
    """``escape_criterion`` of search.json: the premise's fields, ``on`` (the premise holds and
    the constraint is enabled), ``enabled`` and ``reason``."""
    return {**premise.to_dict(), "on": premise.holds and enabled, "enabled": enabled, "reason": _reason(premise)}


def screen_verdict(crit: dict[str, float], premise: EscapePremise, enabled: bool = True) -> str | None:
    """Why a candidate is pruned before training, or None: only where the premise holds (and the
    constraint is ``enabled``), a head whose H has no negative eigenvalue at the collapsed state
    cannot escape it."""
    if enabled and premise.holds and crit.get("screen_escape_negative", 1.0) == 0:
        return (f"screen: cannot escape collapse (Thm 4.1's premise holds for {premise.objective}; no negative "
                f"curvature of H in the {premise.frame} frame, λ_min {crit.get('screen_escape_lambda_min', float('nan')):.3g})")
    return None


__all__ = ["REFERENCE_WIDTH", "criterion_record", "describe_criterion", "premise_head_spec", "reference_premise",
           "screen_verdict"]
