"""``geohead search``: Optuna designs a projection head from the theory's label-free criteria.

For the user's objective, backbone and data, each trial samples a head (depth, widths scaled to
the backbone's d, activation, norms, whitening init) that the study has not measured yet, screens
it at init in seconds (escape curvature at collapse, H_eff conditioning, Jacobian rank on
augmentation tangents), trains it with the real pipeline under successive halving (the best 1/r
at each rung go on, up to ``max_steps``), and scores it by label-free criteria; where the data
has labels, backbone kNN accuracy is recorded as the ground truth, and the Spearman correlation
between the label-free score and kNN accuracy across trials is the evidence that the geometry
predicts quality.

Modules: :mod:`~geohead.search.config` (settings and their checks), :mod:`~geohead.search.space`
(the space, ``--fix``/``--range``), :mod:`~geohead.search.criteria` (screen, trained criteria),
:mod:`~geohead.search.score` (the label-free score and its weights),
:mod:`~geohead.search.escape` (the escape criterion where Thm 4.1's premise holds),
:mod:`~geohead.search.inputs` (what a worker's trials share, prepared once),
:mod:`~geohead.search.trial` (one trial), :mod:`~geohead.search.reference` (the published head
every study measures), :mod:`~geohead.search.verdict` (the pick against it at fresh seeds),
:mod:`~geohead.search.results` (trials.csv, rungs.csv, statistics), :mod:`~geohead.search.plots`
(PNGs), :mod:`~geohead.search.outputs` (best_head.json, search.json, the table). The
orchestration takes three: :mod:`~geohead.search.storage` (storages, their checks, heartbeats,
retries), :mod:`~geohead.search.study` (study, sampler, successive halving, heads already
measured) and :mod:`~geohead.search.runner` (``run_search``, worker processes, the progress bar).

``from geohead.search import run_search, SearchConfig, write_search_plots``; optuna, scipy and
matplotlib load only when a search runs or plots are drawn.
"""
from __future__ import annotations

from geohead.search.config import SearchConfig, SearchError
from geohead.search.criteria import TrialDiverged
from geohead.search.plots import PLOTS, write_search_plots
from geohead.search.runner import SearchResult, run_search
from geohead.search.score import SCORE_CRITERIA, SCORE_WEIGHTS, geometric_score, score_components
from geohead.search.space import DIMENSIONS, SearchSpace, SpaceError, parse_constraints

__all__ = [
    "DIMENSIONS", "PLOTS", "SCORE_CRITERIA", "SCORE_WEIGHTS", "SearchConfig", "SearchError", "SearchResult", "SearchSpace",
    "SpaceError", "TrialDiverged", "geometric_score", "parse_constraints", "run_search", "score_components",
    "write_search_plots",
]
