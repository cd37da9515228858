"""The label-free score of a trained head: criteria from the theory, each mapped to [0, 1] by a
fixed transform (so a trial's score never depends on the other trials), and their weights.

    rankme        log RankMe(backbone) / log d          effective dimension of the features
    uniformity    min(1, std(normalised backbone)·√d)   spread over the sphere (1 = healthy)
    invariance    1 / (1 + local invariance ratio)      the head squeezes augmentation tangents
                                                         more than image differences, within the
                                                         backbone's effective span (Prop. 5.2)
    fisher        (r − erank(F_T)) / r                   the head's soft Fisher-rank loss on the
                                                         tangent span, as a fraction (Thm 5.3)
    conditioning  log stable rank(H_eff) / log(B·d)     curvature spread over many directions

The local invariance ratio replaces the global orbit compression of earlier versions (still
recorded as ``compression``, not scored): compression measured the backbone's rank as much as
the head. See :data:`SCORE_WEIGHTS` for the weights and the measurement they come from.
"""
from __future__ import annotations

import math

#: The label-free criteria of the default score, in the order of ``--multi``'s objectives.
SCORE_CRITERIA: tuple[str, ...] = ("rankme", "uniformity", "invariance", "fisher", "conditioning")
#: Weights of the default score (see the module docstring of :mod:`benchmarks.search_weights`
#: for how they were chosen and checked).
SCORE_WEIGHTS: dict[str, float] = {"rankme": 1.0, "uniformity": 1.0, "invariance": 1.0, "fisher": 1.0, "conditioning": 1.0}


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x)) if math.isfinite(x) else 0.0


def score_components(crit: dict[str, float]) -> dict[str, float]:
    """The criteria of the default score, each mapped to [0, 1] (larger = better; see the module
    docstring). Undefined inputs count as 0."""
    rm = crit.get("rankme_backbone", float("nan"))
    d = crit.get("dim_backbone", float("nan"))
    li = crit.get("local_invariance", float("nan"))
    lost, r = crit.get("fisher_soft_rank_loss", float("nan")), crit.get("fisher_tangent_rank", float("nan"))
    return {
        "rankme": _unit(math.log(rm) / math.log(d)) if rm > 0 and d > 1 else 0.0,
        "uniformity": _unit(crit.get("std_backbone", float("nan"))),
        "invariance": _unit(1.0 / (1.0 + li)) if li >= 0 else 0.0,
        "fisher": _unit(lost / r) if r > 0 else 0.0,  # Σ_families (r − erank) / Σ r
        "conditioning": _unit(crit.get("heff_isotropy", float("nan"))),
    }


def geometric_score(crit: dict[str, float], weights: dict[str, float] | None = None) -> float:
    """The label-free score: the weighted mean of :func:`score_components` (:data:`SCORE_WEIGHTS`
    by default)."""
    comps = score_components(crit)
    w = SCORE_WEIGHTS if weights is None else weights
    total = sum(w.values())
    return sum(w[k] * comps[k] for k in w) / total if total > 0 else 0.0


__all__ = ["SCORE_CRITERIA", "SCORE_WEIGHTS", "geometric_score", "score_components"]
