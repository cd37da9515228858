"""The search's verdict: does its pick train a better backbone than the published head, beyond the noise?

Every trial trains under the study's seed, and the pick is the best of many heads at that seed,
so its margin there is biased upwards (the winner's curse). The verdict therefore re-trains the
pick and the reference (:mod:`geohead.search.reference`) at ``confirm_seeds`` fresh seeds (the
study's seed + 1, + 2, ...; ``max_steps`` each, no pruning) and compares them there. Both heads
train at a seed on the same backbone initialisation, data order and views, so the comparison is
paired. The measure x is the backbone's kNN accuracy where the search has labels (measured at
every seed: the backbone is what the user keeps), otherwise the trial's value (the label-free
score):

* the difference at seed s: d_s = x(pick, s) - x(reference, s);
* margin m = the mean of d_s over the fresh seeds;
* σ_d = the spread (sample standard deviation) of d_s over every seed measured, the study's
  included (for the score its upward bias makes σ_d larger and the verdict more cautious);
* the noise of m: σ_d / sqrt(n) for n fresh seeds.

The pick is recommended when m > 2·noise; otherwise the published head is, with the reason.
When the pick *is* the published head, nothing is re-trained. Confirmation runs are kept in
``OUT/confirm/<label>_s<seed>/result.json``, so a rerun of the search reuses them, and a rerun
with a larger ``confirm_seeds`` trains only the new seeds.

Why paired, and why kNN where it exists (benchmarks/verdict_seeds.py; docs/search.md, "The
verdict's noise, measured"): the seed moves both heads together (DINO on CIFAR-10: the published
head's score moved by 0.019 between seeds 0 and 1, the difference by 0.0005), so the spread of one
head, the first noise model, hid margins; and a score can prefer the pick at every seed while the
backbone it trains is worse (VICReg under ``--score theory``: score +0.06 at four seeds, kNN
-0.5 to -2.5 points, 20-epoch linear probe -2 points).
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
        measure: ``kNN`` or ``score``: what m compares (see the module docstring).
        margin, noise, difference_spread: m, the noise of m and σ_d (see the module docstring);
            None when unmeasured.
        score_margin, knn_margin: the mean difference in value and in backbone kNN accuracy at the
            fresh seeds (``knn_margin`` None without labels).
    """

    recommended: str
    reason: str
    pick: int | None
    reference: int | None
    values: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    knn: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    measure: str | None = None
    margin: float | None = None
    noise: float | None = None
    difference_spread: float | None = None
    score_margin: float | None = None
    knn_margin: float | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["values"] = {k: {str(s): v for s, v in by.items()} for k, by in self.values.items()}
        d["knn"] = {k: {str(s): v for s, v in by.items()} for k, by in self.knn.items()}
        return d


@dataclasses.dataclass(frozen=True)
class Decision:
    """The verdict's arithmetic (see the module docstring): the measure, m, its noise, σ_d, the
    score's and kNN's margins at the fresh seeds, and whether the pick is recommended."""

    measure: str
    margin: float
    noise: float
    difference_spread: float
    score_margin: float
    knn_margin: float | None
    pick: bool


def decide(values: dict[str, dict[int, float]], study_seed: int,
           knn: dict[str, dict[int, float | None]] | None = None) -> Decision:
    """The decision from ``values`` and ``knn`` (label ``pick``/``published`` -> {seed: x});
    kNN is the measure when it is known for both heads at every seed of ``values``."""
    seeds = sorted(s for s in values["pick"] if s in values["published"])
    fresh = [s for s in seeds if s != study_seed]
    has_knn = knn is not None and all(knn.get(k, {}).get(s) is not None for k in ("pick", "published") for s in seeds)
    score_m = _paired(values, seeds, fresh)[0]
    knn_m = _paired(knn, seeds, fresh)[0] if has_knn else None
    m, noise, sigma = _paired(knn if has_knn else values, seeds, fresh)
    return Decision("kNN" if has_knn else "score", m, noise, sigma, score_m, knn_m, m > NOISE_UNITS * noise)


def _paired(x: Any, seeds: list[int], fresh: list[int]) -> tuple[float, float, float]:
    """(m, noise, σ_d) of the per-seed differences x["pick"][s] - x["published"][s]."""
    diff = {s: x["pick"][s] - x["published"][s] for s in seeds}
    m = sum(diff[s] for s in fresh) / len(fresh)
    mu = sum(diff.values()) / len(diff)
    sigma = math.sqrt(sum((d - mu) ** 2 for d in diff.values()) / (len(diff) - 1)) if len(diff) > 1 else 0.0
    return m, sigma / math.sqrt(len(fresh)), sigma


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
    d = decide(values, study_seed, knn)
    return Verdict("pick" if d.pick else "published", _reason(d, len(values["pick"]) - 1), number, reference.number,
                   values, knn, d.measure, d.margin, d.noise, d.difference_spread, d.score_margin, d.knn_margin)


def _reason(d: Decision, n_fresh: int) -> str:
    """The sentence a user reads: the margin in the measure's units, against its noise."""
    seeds = f"{n_fresh} fresh seed{'s' if n_fresh > 1 else ''}"
    if d.measure == "kNN":
        margin = f"{100 * d.margin:+.2f} points of backbone kNN"
        noise = f"{NOISE_UNITS:g} x {100 * d.noise:.2f}; spread of the per-seed difference {100 * d.difference_spread:.2f}"
    else:
        margin = f"{d.margin:+.4f} in score"
        noise = f"{NOISE_UNITS:g} x {d.noise:.4f}; spread of the per-seed difference {d.difference_spread:.4f}"
    if d.pick:
        return f"the pick beats the published head by {margin} at {seeds}, beyond the noise ({noise})"
    more = "; --confirm-seeds 3 measures it more closely" if n_fresh < 3 and d.margin > 0 else ""
    return (f"the pick's margin over the published head at {seeds} ({margin}) is within the noise ({noise}): "
            f"use the published head{more}")


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


__all__ = ["NOISE_UNITS", "Decision", "Verdict", "decide", "run_verdict"]
