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

One recorded criterion enters only the ``theory`` score (:data:`THEORY_WEIGHTS`, the default),
with the sign measured on CIFAR-10 (docs/results.md, "Which criteria earn a weight"):

    fisher_erank     log(1 + erank(F_T)) / log(1 + d)    the tangent-Fisher effective rank

Global orbit compression is recorded as ``compression`` (and mapped by :func:`low_compression`,
lower is better) but not scored: its sign with the backbone's accuracy is not stable across
objectives. :data:`THEORY_WEIGHTS` (``--score theory``, the default) and :data:`SCORE_WEIGHTS`
(``--score geometry``: RankMe alone) say which criteria enter and the measurements they come
from; every criterion is recorded in every trial either way.
"""
from __future__ import annotations

import math

#: The label-free criteria of ``--score geometry``'s family, in the order of ``--multi``'s objectives.
SCORE_CRITERIA: tuple[str, ...] = ("rankme", "uniformity", "invariance", "fisher", "conditioning")
#: Weights of ``--score geometry``. Chosen by ``benchmarks/search_weights.py`` (which criteria
#: enter, equal weights: the best of the 31 subsets by Spearman ρ with backbone kNN accuracy) on
#: a shapes search that the default command does not run: ``geohead search --objective barlow
#: --seed 1 --sampler random --steps 117 --set optim.epochs=7.6923 --set
#: optim.warmup_epochs=0.76923 --timeout 900`` (23 random heads, each measured at 117 steps of a
#: 300-step schedule, i.e. at the default's first rung). ρ there: rankme 0.78 (0.76 with depth
#: held fixed), uniformity 0.30, invariance 0.04, fisher −0.07, conditioning 0.05; all five
#: with equal weights 0.57; RankMe alone is the choice (RankMe + uniformity 0.66). The theory's
#: criteria carry no signal for the backbone's kNN accuracy there; they stay recorded (and are
#: ``--multi``'s objectives). Checked on CIFAR-10 (docs/search.md, "What it has delivered").
SCORE_WEIGHTS: dict[str, float] = {"rankme": 1.0, "uniformity": 0.0, "invariance": 0.0, "fisher": 0.0, "conditioning": 0.0}


#: Weights of ``--score theory``, the default: RankMe, H_eff conditioning and the tangent-Fisher
#: effective rank, equal weights. Chosen on 20-epoch CIFAR-10 runs of Barlow Twins, SimCLR and BYOL
#: (``benchmarks/criteria_transfer.py``: the best equal-weight subset by mean Spearman ρ with the
#: backbone's kNN accuracy over each search's re-trained top 6) together with low orbit
#: compression, and checked on SimSiam, VICReg and DINO against RankMe alone. Compression was
#: then dropped: over the theory searches' re-trained heads its ρ with kNN accuracy is negative on
#: three objectives and positive on three, and again 3 / 3 on RankMe's searches' heads; without
#: it the score ranks those heads at ρ ≥ 0.6 on 6 of 6 objectives (5 of 6 with it) and every
#: stored search picks the same head (``benchmarks/score_ablation.py``).
THEORY_WEIGHTS: dict[str, float] = {"rankme": 1.0, "conditioning": 1.0, "fisher_erank": 1.0}
#: The weights of a score name in studies that did not record their weights: a resumed study is
#: checked against these (``theory`` then included low orbit compression); names not here had
#: the weights they have now.
UNRECORDED_WEIGHTS: dict[str, dict[str, float]] = {
    "theory": {"rankme": 1.0, "conditioning": 1.0, "low_compression": 1.0, "fisher_erank": 1.0}}
#: Human-readable names of the score's criteria (plot titles; the keys are those of the weights).
CRITERION_NAMES: dict[str, str] = {
    "rankme": "backbone RankMe (effective dimension)",
    "uniformity": "uniformity on the sphere",
    "invariance": "local invariance",
    "fisher": "tangent-Fisher rank loss",
    "conditioning": "H_eff conditioning",
    "low_compression": "low orbit compression",
    "fisher_erank": "tangent-Fisher effective rank",
}
#: The label-free scores by name (``SearchConfig.score``; ``knn`` is not label-free).
LABEL_FREE_SCORES: dict[str, dict[str, float]] = {"geometry": SCORE_WEIGHTS, "theory": THEORY_WEIGHTS}
#: ``geohead search``'s score when none is given (and the label-free score a ``knn`` search records).
DEFAULT_SCORE = "theory"


def low_compression(compression: float) -> float:
    """1 / (1 + compression) in [0, 1]: the orbit compression's measured sign (lower is better)."""
    return 1.0 / (1.0 + max(0.0, compression)) if math.isfinite(compression) else 0.0


def fisher_erank(erank: float, dim: float) -> float:
    """log(1 + erank) / log(1 + d) in [0, 1]: the tangent-Fisher effective rank of d dimensions."""
    return _unit(math.log1p(max(0.0, erank)) / math.log1p(dim)) if math.isfinite(erank) and dim > 0 else 0.0


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x)) if math.isfinite(x) else 0.0


def score_components(crit: dict[str, float]) -> dict[str, float]:
    """The criteria of ``SCORE_CRITERIA``, each mapped to [0, 1] (larger = better; see the module
    docstring). Undefined inputs count as 0."""
    rm = crit.get("rankme_backbone", float("nan"))
    d = crit.get("dim_backbone", float("nan"))
    li = crit.get("local_invariance", float("nan"))
    lost, r = crit.get("fisher_soft_rank_loss", float("nan")), crit.get("fisher_tangent_rank", float("nan"))
    return {
        "rankme": _unit(math.log(rm) / math.log(d)) if rm > 0 and d > 1 else 0.0,
        # std_ratio_backbone (std of normalised features · √d); older studies recorded it as
        # "std_backbone", which is the std itself everywhere else (docs/monitors.md)
        "uniformity": _unit(crit.get("std_ratio_backbone", crit.get("std_backbone", float("nan")))),
        "invariance": _unit(1.0 / (1.0 + li)) if li >= 0 else 0.0,
        "fisher": _unit(lost / r) if r > 0 else 0.0,  # Σ_families (r − erank) / Σ r
        # older studies recorded heff_spread as "heff_isotropy" (the same number): they still score
        "conditioning": _unit(crit.get("heff_spread", crit.get("heff_isotropy", float("nan")))),
    }


def geometric_score(crit: dict[str, float], weights: dict[str, float] | None = None) -> float:
    """The label-free score: the weighted mean of :func:`score_components` and, where ``weights``
    name them, ``low_compression`` / ``fisher_erank`` (:data:`SCORE_WEIGHTS` by default)."""
    comps = score_components(crit)
    comps["low_compression"] = low_compression(crit.get("compression", float("nan")))
    comps["fisher_erank"] = fisher_erank(crit.get("fisher_effective_rank", float("nan")), crit.get("dim_backbone", float("nan")))
    w = SCORE_WEIGHTS if weights is None else weights
    total = sum(w.values())
    return sum(w[k] * comps[k] for k in w) / total if total > 0 else 0.0


__all__ = ["CRITERION_NAMES", "DEFAULT_SCORE", "LABEL_FREE_SCORES", "SCORE_CRITERIA", "SCORE_WEIGHTS", "THEORY_WEIGHTS", "UNRECORDED_WEIGHTS", "fisher_erank", "geometric_score",
           "low_compression", "score_components"]
