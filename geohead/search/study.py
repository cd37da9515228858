"""The Optuna study of a search: creation (or resume) with its settings checked, sampler,
pruner, and the heads it has already measured.

The pruner is Optuna's successive halving over training steps (``SuccessiveHalvingPruner``,
asynchronous): at each rung ``min_steps·r^k`` below ``max_steps`` a trial reports its value (the
label-free score, or kNN accuracy with ``--score knn``) and goes on only when it is among the best
1/r of the values reported at that rung so far; the survivors train ``max_steps``. Values are
reported at epoch ends (the first one at or after the rung's step, and never after the first epoch
alone), so every trial is judged at the same step. The sampler learns from the screen's verdicts
through ``constraints_func`` (a trial's ``constraint`` attribute, > 0 = infeasible).

No trial is spent twice on one head. Every trial trains under the common seed, so measuring a
head again gives the same numbers. A trial whose sampler draws a head that an earlier trial
measured (complete, pruned, failed without a retry) or is measuring now (another worker) is a
*duplicate*: it is not trained, it is recorded as PRUNED with ``duplicate_of`` (no intermediate
value, so TPE ranks it among the worst trials and draws less near it), it does not count towards
``--trials``, and an unmeasured neighbour of the head (one dimension changed; or any unmeasured
head) is enqueued as the next trial, so a sampler that keeps proposing the same head still moves
on. The search ends when every head of the space is measured (or the target or the timeout is
reached).
"""
from __future__ import annotations

import json
import logging
import random
from typing import Any

from geohead.data.loaders import fold_seed
from geohead.heads import HeadSpec
from geohead.search.config import SearchConfig, SearchError
from geohead.search.score import LABEL_FREE_SCORES, SCORE_CRITERIA, UNRECORDED_WEIGHTS
from geohead.search.space import SearchSpace


def quiet_optuna() -> None:
    """Silence Optuna's "experimental feature" warnings (heartbeats, retries, multivariate TPE) and
    its records, traceback and all, of a failed trial (the search prints its own line)."""
    import warnings

    import optuna

    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)
    logger = logging.getLogger("optuna.study._optimize")  # where Optuna logs a failed trial, traceback and all
    if not any(isinstance(f, _NoFailedTrialRecords) for f in logger.filters):
        logger.addFilter(_NoFailedTrialRecords())


class _NoFailedTrialRecords(logging.Filter):
    """Drops Optuna's two "Trial N failed with ..." records (the first with a traceback) of a
    failed trial: a trial stopped by Ctrl-C, or one that diverged or erred, which the search
    reports in its own line with the reason (``[k/N] trial N FAIL (...)``); an error the search
    does not catch is raised to the caller, not logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        return not (msg.startswith("Trial ") and " failed with " in msg)


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


def _with_weights(stored: dict[str, Any] | None, ident: dict[str, Any]) -> dict[str, Any] | None:
    """A stored identity from before studies recorded their score's weights, completed with the
    weights its score name had then (:data:`~geohead.search.score.UNRECORDED_WEIGHTS`)."""
    if stored is None or "score_weights" in stored or "score_weights" not in ident:
        return stored
    name = stored.get("score")
    weights = UNRECORDED_WEIGHTS.get(name, LABEL_FREE_SCORES.get(name))
    return {**stored, "score_weights": dict(weights) if weights is not None else None}


def create_study(cfg: SearchConfig, storage: Any) -> Any:
    """Create the study, or load it when it exists with the same settings (resume)."""
    import optuna

    directions = ["maximize"] * (len(SCORE_CRITERIA) if cfg.multi else 1)
    study = optuna.create_study(study_name=cfg.study_name, storage=storage, directions=directions, load_if_exists=True)
    ident = cfg.identity()
    stored = _with_weights(study.user_attrs.get("search_config"), ident)
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
    for t in study.get_trials(deepcopy=False):  # the outputs read these after the whole search: checked before it
        problem = _trial_problem(t)
        if problem:
            raise SearchError(f"study {cfg.study_name!r}: trial {t.number} {problem}: it was not written by geohead "
                              "search; start a new study (another --out, or --study NAME)")
    return study


def _trial_problem(trial: Any) -> str | None:
    """Why a stored trial's attributes are not what geohead search writes (None when they are):
    its head a spec, its rungs {step: criteria}, retry_of and retry_history trial numbers."""
    attrs = trial.user_attrs
    if "head" in attrs:
        try:
            HeadSpec.from_dict(attrs["head"])
        except ValueError as exc:
            return f"holds a head that is not a head spec ({str(exc)[:80]})"
    rungs = attrs.get("rungs", {})
    if not isinstance(rungs, dict) or not all(_number(k) and isinstance(v, dict) for k, v in rungs.items()):
        return "holds rungs that are not {step: criteria}"
    history = trial.system_attrs.get("retry_history", [])
    if any(k in attrs and not _number(attrs[k]) for k in ("retry_of", "trial")) or not isinstance(history, list) \
            or not all(_number(n) for n in history):
        return "names a retried trial that is not a trial number"
    return None


def _number(x: Any) -> bool:
    """A trial number or a step as geohead stores it: an int, or its digits as a JSON key."""
    return (isinstance(x, int) and not isinstance(x, bool)) or (isinstance(x, str) and x.isdigit() and len(x) < 20)


def load_worker_study(cfg: SearchConfig, storage: Any, worker: int) -> Any:
    """The study with worker ``worker``'s sampler and the pruner. The sampler's seed mixes the
    common seed, the worker and the trials already stored, so neither a parallel worker nor a
    resumed run repeats another's draws."""
    import optuna

    existing = len(optuna.load_study(study_name=cfg.study_name, storage=storage).trials)
    seed = fold_seed(cfg.seed * 1_000_003 + worker * 7_919 + existing, bits=32)  # Optuna's samplers take < 2^32
    return optuna.load_study(study_name=cfg.study_name, storage=storage, sampler=make_sampler(cfg, seed),
                             pruner=make_pruner(cfg))


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


__all__ = ["create_study", "head_key", "load_worker_study", "make_pruner", "make_sampler", "measured_heads", "quiet_optuna",
           "trial_constraint", "unmeasured_params"]
