"""Parameter importances of a search, the numbers optuna-dashboard shows.

optuna-dashboard (0.21) computes them with
``optuna.importance.get_param_importances(study, evaluator=PedAnovaImportanceEvaluator(),
target=...)``, the target negated for a maximised objective (PED-ANOVA ranks low values best):
how much each parameter's distribution among the best 10 % of the completed trials differs from
its distribution among all of them (conditional parameters, the hidden dimensions a depth-1 head
lacks, included), normalised to sum 1. :func:`param_importances` is that call. PED-ANOVA draws
nothing at random (Parzen estimators on a fixed grid): the same trials give the same numbers,
so the plot is reproducible without a seed.

The plots are drawn from trials.csv alone (``geohead report`` rebuilds them): :func:`rows_study`
makes an in-memory study of its completed rows, with the distributions the search recorded in
search.json (:func:`study_distributions`); with those, the importances equal the dashboard's on
the search's own study. Without them (an older search.json) each dimension's distribution is
made from the values the trials took (:func:`observed_distributions`), which differs from the
dashboard's only where a candidate was never drawn.
"""
from __future__ import annotations

import dataclasses
import math
import warnings
from typing import Any, Mapping

from geohead.search.space import DIMENSIONS

#: Fewer completed trials than this: no importance (the best 10 % would be one trial).
MIN_TRIALS = 3


@dataclasses.dataclass(frozen=True)
class Importances:
    """Importances by parameter (best first, summing to 1), or ``{}`` with ``note`` saying why not;
    ``n``: the completed trials they come from."""

    values: dict[str, float]
    n: int
    note: str = ""


def dashboard_evaluator() -> Any:
    """The evaluator optuna-dashboard uses: PED-ANOVA with its default quantiles."""
    from optuna.importance import PedAnovaImportanceEvaluator

    return PedAnovaImportanceEvaluator()


def param_importances(study: Any, index: int = 0) -> Importances:
    """The importances of ``study``'s objective ``index`` as optuna-dashboard computes them, or a
    note when they mean nothing: too few completed trials, no parameter that took two values, the
    same objective value in every trial."""
    import optuna
    from optuna.importance import get_param_importances
    from optuna.trial import TrialState

    done = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None and math.isfinite(t.values[index])]
    n = len(done)
    if n < MIN_TRIALS:
        return Importances({}, n, f"{n} completed trial(s): importances need at least {MIN_TRIALS}")
    names = {p for t in done for p in t.params}
    if not any(len({repr(t.params.get(p)) for t in done}) > 1 for p in names):  # absent counts as a value
        return Importances({}, n, "every parameter took one value: nothing to attribute the spread to")
    if len({t.values[index] for t in done}) < 2:
        return Importances({}, n, "every completed trial has the same value: no parameter explains anything")
    sign = -1.0 if study.directions[index] == optuna.study.StudyDirection.MAXIMIZE else 1.0
    with warnings.catch_warnings():
        # PED-ANOVA warns that it ranks low targets best (the sign above handles it) and about
        # regimes of a conditional parameter holding one trial (a depth-1 head)
        warnings.simplefilter("ignore")
        values = get_param_importances(study, evaluator=dashboard_evaluator(),
                                       target=lambda t: sign * t.values[index])
    return Importances(dict(values), n)


def study_distributions(study: Any) -> dict[str, str]:
    """Each parameter's distribution in ``study`` as Optuna's JSON (for search.json; the first
    trial that suggested it wins)."""
    from optuna.distributions import distribution_to_json

    out: dict[str, str] = {}
    for t in study.get_trials(deepcopy=False):
        for name, dist in t.distributions.items():
            out.setdefault(name, distribution_to_json(dist))
    return out


def observed_distributions(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """A distribution per head dimension that took two values or more in the ``rows`` ("n/a" and
    empty cells are absent parameters): depth an integer range, the others categorical in sorted
    order."""
    from optuna.distributions import CategoricalDistribution, IntDistribution

    out: dict[str, Any] = {}
    for dim in DIMENSIONS:
        values = {r.get(dim) for r in rows} - {None, "n/a"}
        if len(values) < 2:  # one value: not a parameter, as a dimension with one candidate is not in the search
            continue
        if dim == "depth" and all(isinstance(v, int) for v in values):
            out[dim] = IntDistribution(min(values), max(values))
        else:
            out[dim] = CategoricalDistribution(sorted(values, key=lambda v: (isinstance(v, str), v)))
    return out


def rows_study(rows: list[dict[str, Any]], target: str, distributions: Mapping[str, Any] | None = None) -> Any:
    """An in-memory study (maximise ``target``) of the ``rows`` (trials.csv, completed trials)
    whose ``target`` is a finite number: their head dimensions as parameters, with
    ``distributions`` (name -> distribution or its JSON; default :func:`observed_distributions`).
    Raises ``ValueError`` when a row's value lies outside its distribution."""
    import optuna
    from optuna.distributions import json_to_distribution

    from geohead.search.results import num

    if distributions is None:
        distributions = observed_distributions(rows)
    dists = {k: json_to_distribution(v) if isinstance(v, str) else v for k, v in distributions.items()}
    level = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no "A new study created in memory" line
    try:
        study = optuna.create_study(direction="maximize", storage=optuna.storages.InMemoryStorage())
    finally:
        optuna.logging.set_verbosity(level)
    for r in rows:
        y = num(r.get(target))
        if r.get("state") != "COMPLETE" or y is None:
            continue
        params = {k: r[k] for k in dists if r.get(k) not in (None, "n/a")}
        study.add_trial(optuna.trial.create_trial(params=params, distributions={k: dists[k] for k in params}, value=y))
    return study


def row_importances(rows: list[dict[str, Any]], target: str,
                    distributions: Mapping[str, Any] | None = None) -> Importances:
    """:func:`param_importances` of ``target`` over the completed ``rows`` (trials.csv);
    distributions that do not fit the rows (a resumed search whose space changed) fall back to
    the observed ones."""
    try:
        study = rows_study(rows, target, distributions)
    except (ValueError, KeyError, TypeError):  # also a malformed search.json entry
        study = rows_study(rows, target, None)
    return param_importances(study)


__all__ = ["MIN_TRIALS", "Importances", "dashboard_evaluator", "observed_distributions", "param_importances",
           "row_importances", "rows_study", "study_distributions"]
