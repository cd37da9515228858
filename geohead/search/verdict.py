"""The search's verdict: is its pick better than the published head beyond the noise?

Every trial trains under the study's seed, and the pick is the best of many heads at that seed,
so its margin there is biased upwards (the winner's curse). The verdict therefore re-trains the
pick and the reference (:mod:`geohead.search.reference`) at ``confirm_seeds`` fresh seeds (the
study's seed + 1, + 2, ...; ``max_steps`` each, no pruning) and compares them there:

* margin m = mean over the fresh seeds of value(pick) - value(reference) (the value a trial
  returns: the label-free score, or kNN accuracy with ``--score knn``);
* the seed spread σ of one head's value, pooled over the two heads and every seed measured
  (the study's included: its upward bias makes σ larger, the verdict more cautious);
* the noise of m: σ·sqrt(2 / n) for n fresh seeds (two independent means of n seeds each).

The pick is recommended when m > 2·noise; otherwise the published head is, and the verdict says
why. When the pick *is* the published head, nothing is re-trained. Confirmation runs are kept in
``OUT/confirm/<label>_s<seed>/result.json``, so a rerun of the search reuses them.
"""
from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any, Callable

from geohead.heads import HeadSpec

#: The margin must exceed this many noise units for the pick to be recommended.
NOISE_UNITS = 2.0


@dataclasses.dataclass
class Verdict:
    """The outcome: which head to use and why.

    Attributes:
        recommended: ``pick``, ``published`` (the reference), or ``pick_unchecked`` (no
            reference measured, or ``confirm_seeds`` = 0).
        reason: one sentence a user reads.
        pick, reference: trial numbers (None when absent).
        values: label -> {seed: value}; knn: label -> {seed: backbone kNN} where labels exist.
        margin, noise, spread: m, the noise of m and σ (see the module docstring); None when unmeasured.
        knn_margin: the same margin in backbone kNN accuracy (fresh seeds), when measured.
    """

    recommended: str
    reason: str
    pick: int | None
    reference: int | None
    values: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    knn: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    margin: float | None = None
    noise: float | None = None
    spread: float | None = None
    knn_margin: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["values"] = {k: {str(s): v for s, v in by.items()} for k, by in self.values.items()}
        d["knn"] = {k: {str(s): v for s, v in by.items()} for k, by in self.knn.items()}
        return d


def decide(values: dict[str, dict[int, float]], study_seed: int) -> tuple[float, float, float]:
    """(m, noise, σ) of ``values`` (label ``pick``/``published`` -> {seed: value}); the study's
    seed enters σ only (see the module docstring)."""
    fresh = sorted(s for s in values["pick"] if s != study_seed and s in values["published"])
    m = sum(values["pick"][s] - values["published"][s] for s in fresh) / len(fresh)
    ss, df = 0.0, 0
    for by_seed in values.values():
        xs = list(by_seed.values())
        if len(xs) > 1:
            mu = sum(xs) / len(xs)
            ss += sum((x - mu) ** 2 for x in xs)
            df += len(xs) - 1
    sigma = math.sqrt(ss / df) if df else 0.0
    return m, sigma * math.sqrt(2.0 / len(fresh)), sigma


def run_verdict(pick: Any, reference: Any, n_seeds: int, study_seed: int, out: Path,
                measure: Callable[[HeadSpec, int, Path], dict[str, float]],
                echo: Callable[[str], None]) -> Verdict:
    """The verdict on the pick (a FrozenTrial) against the reference trial (or None), with
    ``measure(spec, seed, folder)`` (:meth:`TrialRunner.measure_head`) for the fresh seeds."""
    if pick is None:
        return Verdict("pick_unchecked", "no trial completed the full budget: there is no pick", None, None)
    number = pick.number
    if reference is None:
        return Verdict("pick_unchecked", "the published head was not measured (its trial failed or has not run): "
                       "the pick is unchecked", number, None)
    if reference.number == number:
        return Verdict("published", "the published head is the best head the search measured", number, number)
    values = {"pick": {study_seed: _value(pick)}, "published": {study_seed: _value(reference)}}
    knn = {"pick": {study_seed: pick.user_attrs.get("knn_backbone")},
           "published": {study_seed: reference.user_attrs.get("knn_backbone")}}
    if n_seeds < 1:
        return Verdict("pick_unchecked", "--confirm-seeds 0: the pick was not re-trained at a fresh seed, so its margin "
                       "over the published head is unchecked", number, reference.number, values, knn)
    for label, trial in (("pick", pick), ("published", reference)):
        spec = HeadSpec.from_dict(trial.user_attrs["head"])
        for seed in range(study_seed + 1, study_seed + 1 + n_seeds):
            rec = _confirmed(spec, seed, out / f"{label}_s{seed}", measure, echo, label)
            values[label][seed], knn[label][seed] = rec["value"], rec.get("knn_backbone")
    m, noise, sigma = decide(values, study_seed)
    fresh = sorted(s for s in values["pick"] if s != study_seed)
    knn_m = None
    if all(knn[k].get(s) is not None for k in knn for s in fresh):
        knn_m = sum(knn["pick"][s] - knn["published"][s] for s in fresh) / len(fresh)
    seeds = f"{len(fresh)} fresh seed{'s' if len(fresh) > 1 else ''}"
    if m > NOISE_UNITS * noise:
        reason = (f"the pick beats the published head by {m:+.4f} at {seeds}, beyond the noise "
                  f"({NOISE_UNITS:g} x {noise:.4f}; seed spread of one head {sigma:.4f})")
        return Verdict("pick", reason, number, reference.number, values, knn, m, noise, sigma, knn_m)
    reason = (f"the pick's margin over the published head at {seeds} ({m:+.4f}) is within the noise "
              f"({NOISE_UNITS:g} x {noise:.4f}; seed spread of one head {sigma:.4f}): use the published head")
    return Verdict("published", reason, number, reference.number, values, knn, m, noise, sigma, knn_m)


def _value(trial: Any) -> float:
    """A trial's value as the verdict compares it (multi-objective trials: their score)."""
    return float(trial.values[0]) if len(trial.values) == 1 else float(trial.user_attrs["score"])


def _confirmed(spec: HeadSpec, seed: int, folder: Path, measure: Callable[[HeadSpec, int, Path], dict[str, float]],
               echo: Callable[[str], None], label: str) -> dict[str, float]:
    """``measure(spec, seed, folder)``, or the stored result of an earlier run of the same head."""
    from geohead.io import atomic_write_text

    path = folder / "result.json"
    if path.is_file():
        stored = json.loads(path.read_text())
        if stored.get("head") == spec.to_dict():
            return stored
    echo(f"verdict: training the {label} head at seed {seed}: {spec.describe()}")
    rec = {**measure(spec, seed, folder), "head": spec.to_dict(), "seed": seed}
    atomic_write_text(path, json.dumps(rec, indent=2) + "\n")
    return rec


__all__ = ["NOISE_UNITS", "Verdict", "decide", "run_verdict"]
