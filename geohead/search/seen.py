"""Heads a study has already measured: no trial is spent twice on one head.

Every trial trains under the common seed, so measuring a head again gives the same numbers. A
trial whose sampler draws a head that an earlier trial measured (complete, pruned, failed
without a retry) or is measuring now (another worker) is a *duplicate*: it is not trained, it is
recorded as PRUNED with ``duplicate_of`` (no intermediate value, so TPE ranks it among the worst
trials and draws less near it), it does not count towards ``--trials``, and an unmeasured
neighbour of the head (one dimension changed; or any unmeasured head) is enqueued as the next
trial, so a sampler that keeps proposing the same head still moves on. The search ends when
every head of the space is measured (or the target or the timeout is reached).
"""
from __future__ import annotations

import json
import random
from typing import Any

from geohead.heads import HeadSpec
from geohead.search.space import SearchSpace

#: Random draws tried for an unmeasured head before the space is enumerated.
RANDOM_TRIES = 200
#: Largest space that is enumerated to find an unmeasured head.
MAX_ENUMERATE = 200_000


def head_key(head: dict[str, Any] | HeadSpec) -> str:
    """A hashable key of a head (its spec as sorted JSON)."""
    d = head.to_dict() if isinstance(head, HeadSpec) else head
    return json.dumps(d, sort_keys=True, default=str)


def measured_heads(study: Any, exclude: int | None = None) -> dict[str, int]:
    """Head key -> number of the trial that measured it (or is measuring it now): trials with a
    head that are COMPLETE, PRUNED, RUNNING, or FAIL without a retry; duplicates and ``exclude``
    (the asking trial) left out."""
    from optuna.trial import TrialState

    from geohead.search.storage import retried_numbers

    trials = study.get_trials(deepcopy=False)
    retried = retried_numbers(trials)
    out: dict[str, int] = {}
    for t in trials:
        head = t.user_attrs.get("head")
        if not head or t.number == exclude or "duplicate_of" in t.user_attrs:
            continue
        if t.state in (TrialState.COMPLETE, TrialState.PRUNED, TrialState.RUNNING) or (
                t.state == TrialState.FAIL and t.number not in retried):
            out.setdefault(head_key(head), t.number)
    return out


def unmeasured_params(space: SearchSpace, base: HeadSpec, params: dict[str, Any], seen: set[str],
                      seed: int) -> dict[str, Any] | None:
    """Optuna parameters of a head not in ``seen``: a neighbour of ``params`` (one dimension
    changed) when one is unmeasured, else any unmeasured head; None when the space is exhausted."""
    rng = random.Random(seed)
    near = space.neighbours(params, rng)
    rng.shuffle(near)
    for p in near:
        if head_key(space.spec_of(p, base)) not in seen:
            return p
    for _ in range(RANDOM_TRIES):
        p = space.random_params(rng)
        if head_key(space.spec_of(p, base)) not in seen:
            return p
    if space.size() > MAX_ENUMERATE:
        return None
    for p in _all_params(space):
        if head_key(space.spec_of(p, base)) not in seen:
            return p
    return None


def _all_params(space: SearchSpace):
    """Every head of ``space`` as Optuna parameters (depth-1 heads once per shared choice)."""
    import itertools

    multi = {k: v for k, v in space.choices.items() if len(v) > 1}
    shared = [k for k in multi if k not in ("hidden_dim", "activation", "norm", "depth")]
    hidden = [k for k in ("hidden_dim", "activation", "norm") if k in multi]
    for depth in space.choices["depth"]:
        keys = shared + (hidden if int(depth) > 1 else [])
        for values in itertools.product(*(multi[k] for k in keys)):
            p = dict(zip(keys, values))
            if "depth" in multi:
                p["depth"] = depth
            yield p


__all__ = ["head_key", "measured_heads", "unmeasured_params"]
