"""The published head, measured in every search: the reference the search's pick must beat.

Every study measures the method's standard head (its preset with the paper's ReLU; DINO keeps
GELU) as one of its trials, enqueued before the first sampled one. Its widths are the paper's,
capped at the space's widest candidate (4·d: for the CPU default backbone, d = 128, Barlow Twins'
8192-wide projector becomes 512-wide, SimCLR's keeps d = 128 hidden units and 128 outputs);
the fields the search does not choose (prototypes, bias, ...) are the base head's, as for every
trial. The reference trial is never pruned (neither by the screen nor by successive halving):
it always trains the full budget, so the pick and the reference are compared at equal steps.

A head outside a narrowed space (``--fix activation=silu``) is still measured, without Optuna
parameters, so the sampler does not learn from it.
"""
from __future__ import annotations

from typing import Any

from geohead.heads import HeadSpec
from geohead.search.space import SearchSpace

#: The user attribute that marks the reference trial (its value names the head).
REFERENCE_ATTR = "reference"
REFERENCE_NAME = "published"


def published_spec(objective: str, base: HeadSpec, space: SearchSpace) -> HeadSpec:
    """The method's published head (ReLU, the paper's widths capped at the space's widest
    candidate 4·d) on ``base``'s fields that the search does not choose."""
    from geohead.heads import preset_spec
    from geohead.objectives import OBJECTIVES

    paper = preset_spec(OBJECTIVES[objective].head_preset, base.in_dim, smooth=False)
    widest = 4 * base.in_dim
    values = {"depth": paper.depth, "hidden_dim": min(paper.hidden_dim, widest), "out_dim": min(paper.out_dim, widest),
              "activation": paper.activation, "norm": paper.norm or "none", "last_norm": paper.last_norm or "none",
              "whiten": paper.whiten or "none"}
    return space.spec(base, **values)


def in_space(space: SearchSpace, spec: HeadSpec) -> bool:
    """Whether the sampler could draw ``spec`` (:meth:`SearchSpace.contains`)."""
    return space.contains(spec)


def is_reference(trial: Any) -> bool:
    """Whether ``trial`` (an Optuna trial or FrozenTrial) measures the reference head."""
    return trial.user_attrs.get(REFERENCE_ATTR) == REFERENCE_NAME


def enqueue_reference(study: Any, space: SearchSpace, spec: HeadSpec) -> bool:
    """Enqueue the reference trial unless the study holds one (any state); True when enqueued."""
    if any(is_reference(t) for t in study.get_trials(deepcopy=False)):
        return False
    params = space.params_of(spec) if in_space(space, spec) else {}
    study.enqueue_trial(params, user_attrs={REFERENCE_ATTR: REFERENCE_NAME})
    return True


def reference_trial(study: Any) -> Any | None:
    """The study's COMPLETE reference trial (the last one, were there several), else None."""
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if is_reference(t)]
    return done[-1] if done else None


__all__ = ["REFERENCE_ATTR", "enqueue_reference", "in_space", "is_reference", "published_spec", "reference_trial"]
