"""The Optuna study of a search: creation (or resume) with its settings checked, sampler, pruner.

The pruner is Optuna's successive halving over training steps (``SuccessiveHalvingPruner``,
asynchronous): at each rung ``min_steps·r^k`` below ``max_steps`` a trial reports its value (the
label-free score, or kNN accuracy with ``--score knn``) and goes on only when it is among the best
1/r of the values reported at that rung so far; the survivors train ``max_steps``. Values are
reported at epoch ends (the first one at or after the rung's step, and never after the first epoch
alone), so every trial is judged at the same step. The sampler learns from the screen's verdicts
through ``constraints_func`` (a trial's ``constraint`` attribute, > 0 = infeasible).
"""
from __future__ import annotations

from typing import Any

from geohead.search.config import SearchConfig, SearchError
from geohead.search.score import SCORE_CRITERIA


def quiet_optuna() -> None:
    """Silence Optuna's "experimental feature" warnings (heartbeats, retries, multivariate TPE)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def trial_constraint(trial: Any) -> tuple[float]:
    """A finished trial's constraint for the samplers (> 0: infeasible): its ``constraint`` user
    attribute (the screen's escape verdict), 0 without one."""
    return (float(trial.user_attrs.get("constraint", 0.0)),)


def make_sampler(cfg: SearchConfig, seed: int) -> Any:
    """``cfg``'s sampler: random, NSGA-II (population ~ trials / 3) or multivariate TPE (constant
    liar with several workers); TPE and NSGA-II learn the screen's constraint."""
    import optuna

    name = cfg.sampler_name
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # multivariate/group/constraints are "experimental" in Optuna
        if name == "nsga2":
            return optuna.samplers.NSGAIISampler(seed=seed, population_size=max(4, min(16, cfg.trials // 3)),
                                                 constraints_func=trial_constraint)
        return optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(3, cfg.trials // 4)),
                                          multivariate=True, group=True, constant_liar=cfg.workers > 1,
                                          constraints_func=trial_constraint)


def make_pruner(cfg: SearchConfig) -> Any:
    """Successive halving from ``min_steps`` by ``reduction_factor`` (see the module docstring), or
    none for multi-objective studies, ``--no-prune`` and a fixed budget (min = max steps)."""
    import optuna

    if cfg.multi or not cfg.prune or not cfg.rungs or cfg.min_steps >= cfg.max_steps:
        return optuna.pruners.NopPruner()
    return optuna.pruners.SuccessiveHalvingPruner(min_resource=int(cfg.min_steps),
                                                  reduction_factor=int(cfg.reduction_factor),
                                                  min_early_stopping_rate=0)


def create_study(cfg: SearchConfig, storage: Any) -> Any:
    """Create the study, or load it when it exists with the same settings (resume)."""
    import optuna

    directions = ["maximize"] * (len(SCORE_CRITERIA) if cfg.multi else 1)
    study = optuna.create_study(study_name=cfg.study_name, storage=storage, directions=directions, load_if_exists=True)
    ident = cfg.identity()
    stored = study.user_attrs.get("search_config")
    if stored is None or (stored != ident and not study.get_trials(deepcopy=False)):
        # a new study, or one that holds no trial yet (a start that failed): take these settings
        study.set_user_attr("search_config", ident)
        study.set_user_attr("score", "multi" if cfg.multi else cfg.score)
        study.set_user_attr("criteria", list(SCORE_CRITERIA))
    elif stored != ident:
        diff = {k: (stored.get(k), ident.get(k)) for k in ident if stored.get(k) != ident.get(k)}
        first = ", ".join(f"{k}: stored {a!r} vs now {b!r}" for k, (a, b) in list(diff.items())[:3])
        raise SearchError(f"study {cfg.study_name!r} in this storage was made with other settings ({first}); "
                          "rerun with the same settings to resume, or pass --study NAME (or another --out) for a new study")
    if [d.name.lower() for d in study.directions] != directions:
        raise SearchError(f"study {cfg.study_name!r} has {len(study.directions)} objective(s); choose another --study")
    return study


def load_worker_study(cfg: SearchConfig, storage: Any, worker: int) -> Any:
    """The study with worker ``worker``'s sampler and the pruner. The sampler's seed mixes the
    common seed, the worker and the trials already stored, so neither a parallel worker nor a
    resumed run repeats another's draws."""
    import optuna

    existing = len(optuna.load_study(study_name=cfg.study_name, storage=storage).trials)
    seed = cfg.seed * 1_000_003 + worker * 7_919 + existing
    return optuna.load_study(study_name=cfg.study_name, storage=storage, sampler=make_sampler(cfg, seed),
                             pruner=make_pruner(cfg))


__all__ = ["create_study", "load_worker_study", "make_pruner", "make_sampler", "quiet_optuna", "trial_constraint"]
