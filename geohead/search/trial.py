"""One trial of the search: sample a head, screen it at init, train it, measure it, score it.

Every trial trains with the *same* seed (backbone initialisation, batch order and views), so
trials differ only by their head: common random numbers, which is what makes criteria and kNN
accuracy comparable across ~30 short trials. The seed is recorded with every trial.

A trial:

1. samples a head from the :class:`~geohead.search.space.SearchSpace` (TPE by default,
   NSGA-II with ``multi``, or random); the reference trial measures the method's published head
   instead (:mod:`geohead.search.reference`) and is never pruned;
2. screens it at init (:func:`~geohead.search.criteria.screen`): where Thm 4.1's premise holds
   for the objective (:mod:`geohead.search.escape`), a head that cannot escape collapse is
   PRUNED before any training; the other screen criteria are recorded, not acted on;
3. trains backbone + head with :func:`geohead.training.loop.train` on one schedule of ``max_steps``
   steps; at each successive-halving rung (:mod:`geohead.search.study`) it measures the trained
   criteria, reports its value and stops when it is not among the best 1/r there (single-objective
   studies: Optuna does not prune multi-objective ones, whose trials train ``max_steps``);
4. measures the trained criteria (:func:`~geohead.search.criteria.trained_criteria`) and returns
   the label-free score (default), kNN accuracy (``score="knn"``), or the normalised criteria of
   :data:`~geohead.search.score.SCORE_CRITERIA` (``multi``).

A NaN/inf loss or criterion, or any other error inside a trial, makes the trial FAIL (reason in
its ``fail_reason`` attribute) and the study goes on. A trial that draws a head the study has
measured is not trained (:mod:`geohead.search.study`): under the common seed the result would be
identical. :meth:`TrialRunner.measure_head` trains a head at another seed outside the study (the
verdict's confirmation runs, :mod:`geohead.search.verdict`).
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import os
import socket
import time
import traceback
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator


from geohead.heads import HeadSpec, WhiteningRankWarning
from geohead.search.config import SearchConfig, schedule
from geohead.search.criteria import TrialDiverged, screen, trained_criteria
from geohead.search.escape import screen_verdict
from geohead.search.score import DEFAULT_SCORE, LABEL_FREE_SCORES, SCORE_CRITERIA, geometric_score, score_components
from geohead.search.inputs import TrialInputs
from geohead.search.reference import in_space, is_reference, published_spec
from geohead.search.storage import INTERRUPTED_ATTR
from geohead.search.study import head_key, measured_heads, unmeasured_params
from geohead.training.checkpoint import LAST



class TrialError(RuntimeError):
    """A trial raised an unexpected error: Optuna records it as FAIL and the study goes on."""


class TrialRunner:
    """Runs trials on one worker's prepared :class:`~geohead.search.inputs.TrialInputs`;
    :meth:`objective` is Optuna's objective."""

    def __init__(self, cfg: SearchConfig, inputs: TrialInputs, echo: Callable[[str], None]) -> None:
        self.cfg = cfg
        self.inputs = inputs
        self.echo = echo
        self.worker_id = f"{socket.gethostname()}:{os.getpid()}"
        #: the search's --timeout as a time.time(): a trial still training then stops at its next
        #: epoch end, recorded as pruned (run_worker sets it)
        self.deadline: float | None = None

    def trial_dir(self, number: int) -> Path:
        """The run folder of trial ``number``."""
        return self.cfg.out_dir / "trials" / f"{number:04d}"

    def objective(self, trial: Any) -> float | tuple[float, ...]:
        """Optuna's objective: one trial (see the module docstring). Any error inside a trial
        (numerical or not) makes it FAIL with the reason recorded; the study goes on."""
        import optuna

        try:
            return self._objective(trial)
        except (optuna.TrialPruned, TrialDiverged):
            raise
        except KeyboardInterrupt:  # not measured: the next run retries it (storage.requeue_interrupted)
            trial.set_user_attr(INTERRUPTED_ATTR, True)
            raise
        except Exception as exc:  # noqa: BLE001 - one bad trial must not end a long study
            reason = f"{type(exc).__name__}: {exc}"
            trial.set_user_attr("fail_reason", reason[:500])
            self.echo(f"trial {trial.number} failed with an error:\n{traceback.format_exc(limit=-6)}")
            raise TrialError(reason) from exc

    def _objective(self, trial: Any) -> float | tuple[float, ...]:
        spec, retry_of = self._start(trial)
        seen = measured_heads(trial.study, exclude=trial.number)
        if head_key(spec) in seen:  # the same head under the same seed: nothing to learn by training it
            self._duplicate(trial, spec, seen)
        self.echo(f"trial {trial.number}: {spec.describe()}" + (f" (retry of trial {retry_of})" if retry_of is not None else ""))
        self._screen(trial, spec)
        try:
            return self._train_and_measure(trial, spec)
        finally:
            if not self.cfg.keep_checkpoints:
                (self.trial_dir(trial.number) / LAST).unlink(missing_ok=True)

    def _start(self, trial: Any) -> tuple[HeadSpec, int | None]:
        """The trial's head and the trial it retries (or None), recorded as user attributes with
        the common seed and this worker."""
        # a retry (of a trial whose worker died) is enqueued with the dead trial's params and user
        # attributes, so "trial" holds the original number there
        first = trial.user_attrs.get("retry_of", trial.user_attrs.get("trial"))
        retry_of = int(first) if first is not None and int(first) != trial.number else None
        spec = self._head(trial)
        trial.set_user_attr("trial", trial.number)
        if retry_of is not None:
            trial.set_user_attr("retry_of", retry_of)
        trial.set_user_attr("head", spec.to_dict())
        trial.set_user_attr("seed", self.cfg.seed)
        trial.set_user_attr("worker", self.worker_id)
        return spec, retry_of

    def _head(self, trial: Any) -> HeadSpec:
        """The trial's head: the sampler's draw, or the published head for the reference trial
        (:mod:`geohead.search.reference`; drawn through the space when the space holds it, so the
        sampler learns from it)."""
        space, base = self.inputs.space, self.inputs.base_spec
        if not is_reference(trial):
            spec = space.suggest(trial, base)
            if not space.contains(spec):  # a queued trial of a resumed study: Optuna returns its values unchecked
                raise TrialError(f"the trial's parameters name {spec.describe()}, outside the search space; "
                                 "it was queued by another program")
            return spec
        spec = published_spec(self.cfg.objective, base, space)
        if in_space(space, spec):
            drawn = space.suggest(trial, base)
            if drawn != spec:
                raise TrialError(f"the reference trial drew {drawn.describe()}, not {spec.describe()}")
        return spec

    def _screen(self, trial: Any, spec: HeadSpec) -> None:
        """Screen ``spec`` at init and record the criteria and the escape constraint; prune it
        (single-objective studies with pruning and the escape constraint on) when Thm 4.1's
        premise holds and it cannot escape collapse (:mod:`geohead.search.escape`)."""
        import optuna

        try:
            crit = screen(spec, self.inputs.screen_inputs)
        except TrialDiverged as exc:
            raise _fail(trial, str(exc)) from None
        for k, v in crit.items():
            trial.set_user_attr(k, v)
        verdict = screen_verdict(crit, self.inputs.premise, self.cfg.escape)
        trial.set_user_attr("constraint", 1.0 if verdict else 0.0)
        if verdict and self.cfg.prune and not self.cfg.multi and not is_reference(trial):
            trial.set_user_attr("pruned_by", verdict)
            raise optuna.TrialPruned(verdict)

    def _duplicate(self, trial: Any, spec: HeadSpec, seen: dict[str, int]) -> None:
        """End a trial that drew a measured head: PRUNED with ``duplicate_of`` (not counted, not
        trained) after enqueueing an unmeasured neighbour as the next trial."""
        import optuna

        first = seen[head_key(spec)]
        trial.set_user_attr("duplicate_of", first)
        trial.set_user_attr("pruned_by", f"repeats the head of trial {first} (not trained, not counted)")
        space, base = self.inputs.space, self.inputs.base_spec
        nxt = unmeasured_params(space, base, space.params_of(spec), set(seen), self.cfg.seed * 7_919 + trial.number)
        if nxt is not None and not any(t.state.name == "WAITING" for t in trial.study.get_trials(deepcopy=False)):
            trial.study.enqueue_trial(nxt, user_attrs={"steered_from": trial.number})
        raise optuna.TrialPruned(f"repeats trial {first}")

    def _train_and_measure(self, trial: Any, spec: HeadSpec) -> float | tuple[float, ...]:
        """Train ``spec`` with the backbone (successive-halving rungs in a single-objective study),
        record the trained criteria and return the trial's objective value(s)."""
        from geohead.training.loop import TrainingDiverged, train

        tcfg = self._train_config(self.trial_dir(trial.number), spec)
        rungs = None if self.cfg.multi else self._rung_callback(trial)
        callback = self._deadline_callback(trial, rungs)
        t0 = time.perf_counter()
        try:
            with _quiet_whitening():
                result = train(tcfg, overwrite=True, callback=callback, data=self.inputs.data)
        except TrainingDiverged as exc:
            raise _fail(trial, f"diverged: {exc}") from None
        finally:
            trial.set_user_attr("train_seconds", time.perf_counter() - t0)
        trial.set_user_attr("steps_trained", result.steps)
        crit, comps = self._measure(trial, result.model, result.teacher, result.objective)
        return self._value(crit, comps)

    def _value(self, crit: dict[str, float], comps: dict[str, float]) -> float | tuple[float, ...]:
        """The objective value(s) of measured criteria: the score, kNN accuracy, or the parts."""
        if self.cfg.multi:
            return tuple(comps[k] for k in SCORE_CRITERIA)
        return crit["knn_backbone"] if self.cfg.score == "knn" else crit["score"]

    def _deadline_callback(self, trial: Any, then: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
        """``then`` (the rung callback, or None), preceded at every epoch end by the search's hard
        timeout: past :attr:`deadline` the trial stops there and is recorded as pruned."""
        import optuna

        if self.deadline is None:
            return then
        deadline = self.deadline

        def on_epoch(info: Any) -> None:
            if time.time() >= deadline:
                trial.set_user_attr("steps_trained", info.step)
                trial.set_user_attr("pruned_by", f"the search's --timeout passed: stopped at step {info.step}")
                raise optuna.TrialPruned()
            if then is not None:
                then(info)

        return on_epoch

    def _rung_callback(self, trial: Any) -> Callable[[Any], None]:
        """The per-epoch callback of a single-objective trial: at the first epoch end at or after
        each rung (never the first epoch's), the trained criteria and the value, reported to the
        pruner, which may stop the trial there."""
        import optuna

        pending = [r for r in self.cfg.rungs]
        r = self.cfg.reduction_factor

        def on_epoch(info: Any) -> None:
            if info.epoch < 2 or not pending or info.step < pending[0] or info.step >= self.cfg.max_steps:
                return
            while pending and pending[0] <= info.step:
                pending.pop(0)
            crit, comps = self._measure(trial, info.model, info.teacher, info.objective)
            value = self._value(crit, comps)
            rungs = dict(trial.user_attrs.get("rungs", {}))
            rungs[str(info.step)] = {**crit, **{f"score_{k}": v for k, v in comps.items()}}
            trial.set_user_attr("rungs", rungs)
            trial.set_user_attr("steps_trained", info.step)
            trial.report(value, info.step)
            if self.cfg.prune and not is_reference(trial) and trial.should_prune():
                what = "kNN" if self.cfg.score == "knn" else "score"
                trial.set_user_attr("pruned_by", f"successive halving at step {info.step}: {what} {value:.4f} not "
                                                 f"in the best 1/{r} of the trials at this rung")
                raise optuna.TrialPruned()

        return on_epoch

    def measure_head(self, spec: HeadSpec, seed: int, out: Path, steps: int | None = None,
                     backbone: dict[str, Any] | None = None) -> dict[str, float]:
        """Train ``spec`` for ``max_steps`` (no rungs; or ``steps``, a schedule of its own; on
        ``backbone``, a training config's backbone section, instead of the search's, with ``spec``
        already at its d) with every seeded choice (backbone init, batches, views) drawn from
        ``seed`` in ``out``, and return its trained criteria with the score, the score's components
        (``score_*``) and the objective ``value`` a trial would return (the score, or kNN accuracy
        with ``score="knn"``; the score with ``multi``). A run of its own schedule checkpoints ten
        times, resumes from ``out`` and shows its progress (with ``progress``): it may be the user's
        full schedule."""
        from geohead.training.loop import TrainingDiverged, train

        cfg = self._train_config(out, spec, seed, steps, backbone)
        try:
            with _quiet_whitening():
                result = train(cfg, overwrite=steps is None or not _same_run(out, cfg))
        except TrainingDiverged as exc:
            raise TrialDiverged(f"diverged: {exc}") from None
        finally:
            if not self.cfg.keep_checkpoints and (steps is None or (out / "summary.json").is_file()):
                (out / LAST).unlink(missing_ok=True)
        crit, comps = self.criteria(result.model, result.teacher, result.objective)
        value = crit["knn_backbone"] if self.cfg.score == "knn" else crit["score"]
        return {**crit, **{f"score_{k}": v for k, v in comps.items()}, "value": value, "steps_trained": result.steps}

    def _train_config(self, out: Path, spec: HeadSpec, seed: int | None = None, steps: int | None = None,
                      backbone: dict[str, Any] | None = None) -> Any:
        """A trial's ``TrainConfig``: the shared base with this head, in ``out`` (and ``seed``
        instead of the common one, ``steps`` instead of ``max_steps``, ``backbone`` instead of the
        search's backbone section, when given)."""
        from geohead.training.config import config_from_dict

        d = copy.deepcopy(self.inputs.base)
        d["out"] = str(out)
        if seed is not None:
            d["seed"] = seed
        if backbone is not None:
            d["backbone"] = copy.deepcopy(backbone)
        if steps is not None:
            d["optim"].update(schedule(steps, len(self.inputs.data), self.cfg.batch_size))
            d["track"].update(log_every=max(1, steps // 10), ckpt_every=max(1, steps // 10), progress=self.cfg.progress)
        d.setdefault("head", {})["spec"] = {k: v for k, v in dataclasses.asdict(spec).items() if k != "in_dim"}
        return config_from_dict(d)

    def _measure(self, trial: Any, model: Any, teacher: Any, objective: Any) -> tuple[dict[str, float], dict[str, float]]:
        """The trained criteria (with the score) and the score's components of the trained
        ``model`` (and EMA ``teacher``), recorded as user attributes."""
        try:
            crit, comps = self.criteria(model, teacher, objective)
        except TrialDiverged as exc:
            raise _fail(trial, str(exc)) from None
        for k, v in {**crit, **{f"score_{k}": v for k, v in comps.items()}}.items():
            trial.set_user_attr(k, v)
        return crit, comps


    def criteria(self, model: Any, teacher: Any, objective: Any) -> tuple[dict[str, float], dict[str, float]]:
        """The trained criteria of ``model`` (and EMA ``teacher``) with the score, and the
        score's components, on the search's probe images, orbits and views (what a trial and the
        verdict record); raises :class:`TrialDiverged` for non-finite ones."""
        crit = trained_criteria(
            model.backbone, model.head, objective, self.inputs.eval_inputs,
            predictor=model.predictor if objective.needs_predictor else None,
            teacher_head=teacher.head if teacher is not None else None, device=self.inputs.device)
        comps = score_components(crit)
        crit["score"] = geometric_score(crit, LABEL_FREE_SCORES.get(self.cfg.score, LABEL_FREE_SCORES[DEFAULT_SCORE]))
        return crit, comps


def _fail(trial: Any, reason: str) -> TrialDiverged:
    """The error that makes ``trial`` FAIL for ``reason`` (recorded as its ``fail_reason``)."""
    trial.set_user_attr("fail_reason", reason[:500])
    return TrialDiverged(reason)


def trial_line(t: Any) -> str:
    """One line about a finished trial."""
    ua = t.user_attrs
    head = ua.get("head")
    desc = HeadSpec.from_dict(head).describe() if head else "?"
    state = t.state.name
    dur = t.duration.total_seconds() if t.duration is not None else float("nan")
    if "duplicate_of" in ua:
        return f"trial {t.number} repeats trial {ua['duplicate_of']}'s head: not trained, not counted | {desc}"
    if state == "COMPLETE":
        knn = ua.get("knn_backbone")
        knn_s = f" kNN {knn:.3f}" if knn is not None else ""
        return (f"trial {t.number} COMPLETE score {ua.get('score', float('nan')):.4f}{knn_s} | {desc} | "
                f"screen {ua.get('screen_seconds', 0):.1f}s train {ua.get('train_seconds', 0):.1f}s "
                f"eval {ua.get('eval_seconds', 0):.1f}s total {dur:.1f}s")
    if state == "PRUNED":
        return f"trial {t.number} PRUNED ({ua.get('pruned_by', 'pruner')}) | {desc} | {dur:.1f}s"
    return f"trial {t.number} {state} ({ua.get('fail_reason', 'error')}) | {desc} | {dur:.1f}s"


@contextlib.contextmanager
def _quiet_whitening() -> Iterator[None]:
    """A trial's whitened head on rank-deficient features is a property of the candidate (its
    criteria record it), not news for the user once per trial: the warning is silenced there."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WhiteningRankWarning)
        yield


def _same_run(out: Path, cfg: Any) -> bool:
    """Whether ``out`` holds a checkpointed run of ``cfg`` to resume (its config.json equals it)."""
    import json

    from geohead.io import MAX_SMALL_FILE, path_in, read_json

    try:  # an unreadable config, or one linking out of the folder, is not this run's: the trial trains afresh
        saved = path_in(out, "config.json", "run file")
        if not ((out / LAST).is_file() and saved.is_file()):
            return False
        return read_json(saved, "config", "remove it", limit=MAX_SMALL_FILE) == json.loads(cfg.to_json())
    except ValueError:
        return False


__all__ = ["TrialError", "TrialRunner", "trial_line"]
