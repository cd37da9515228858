"""The search's verdict: does its pick train a better backbone than the published head, beyond the noise?

Every trial trains under the study's seed, and the pick is the best of many heads at that seed,
so its margin there is biased upwards (the winner's curse). The verdict therefore re-trains the
pick and the reference (:mod:`geohead.search.reference`) at ``confirm_seeds`` fresh seeds (the
study's seed + 1, + 2, ...; ``max_steps`` each, no pruning) and compares them there. Both heads
train at a seed from the same backbone initialisation, data order and views, so the comparison
is paired. For a measure x (the trial's value, i.e. the label-free score; and, where the search
has labels, the backbone's kNN accuracy):

* the difference at seed s: d_s = x(pick, s) - x(reference, s);
* margin m = the mean of d_s over the fresh seeds;
* σ_d = the spread (sample standard deviation) of d_s over every seed measured, the study's
  included (its upward bias makes σ_d larger and the verdict more cautious);
* the noise of m: σ_d / sqrt(n) for n fresh seeds; m is *beyond the noise* when m > 2·noise.

The pick is recommended when its kNN margin is beyond the noise, or when its score margin is
and its kNN margin is not negative (without labels: when its score margin is beyond the noise).
The backbone is what the user keeps, so its kNN decides where it is measured, and it vetoes a
score that prefers the pick while the backbone it trains is worse; a short search's kNN is
noisy, so a clear score margin counts where kNN does not contradict it. Otherwise the published
head is recommended, with the reason. When the pick *is* the published head, nothing is
re-trained. Confirmation runs are kept in ``OUT/confirm/<label>_s<seed>/result.json``, so a rerun
of the search reuses them, and a rerun with a larger ``confirm_seeds`` trains only the new seeds.

At the user's schedule (``confirm_epochs``; ``OUT/confirm/<label>_s<seed>_<steps>steps``) the
runs train a schedule of their own, so the study seed's values, measured at the trials' schedule,
are not paired with them: m and σ_d come from the fresh seeds alone (two or more). The scale ladder
(docs/search.md) is why: Barlow Twins' pick beat the published head by +1.8 linear points at 20
epochs and fell 0.8 below it at 300 (seed 0), so a verdict at the trials' schedule cannot speak
for a long one. The same holds for width: on the user's backbone (``confirm_backbone``;
``OUT/confirm/<label>_s<seed>_<steps>steps_<backbone>``, both heads rescaled to its d by the
caller's ``measure``) the runs are compared at the fresh seeds alone; on the ladder Barlow Twins'
pick led on the 128-d proxy and fell behind on the 512-d ResNet-18 (the margins, over the seeds
measured so far: ``geohead/search/ladder.json``, width axis).

Measured on six CIFAR-10 searches with 20-epoch truths (benchmarks/verdict_seeds.py; docs/results.md,
"The verdict's noise, measured"): the seed moves both heads together (DINO: the published head's
score moved by 0.019 between seeds 0 and 1, the difference by 0.0005), so the first model's noise
(one head's spread) hid margins; VICReg's theory score preferred a head at every seed whose
backbone was worse (kNN -0.5 to -2.5 points, -2 points at 20 epochs); and with one fresh seed the
kNN margin alone missed DINO's better pick (+2.8 points at 20 epochs). This rule was chosen on
those searches (right in 15 of 15 decisions there); on four searches it was not chosen on it was
right in 6 of 8, missing two better picks at one fresh seed that it kept at three.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any, Callable

from geohead.heads import HeadSpec
from geohead.search.criteria import TrialDiverged
from geohead.search.results import num

#: A margin must exceed this many noise units to count.
NOISE_UNITS = 2.0


@dataclasses.dataclass(frozen=True)
class Margin:
    """One measure's paired margin (see the module docstring): m, its noise σ_d/sqrt(n), and σ_d."""

    margin: float
    noise: float
    spread: float

    @property
    def beyond_noise(self) -> bool:
        return self.margin > NOISE_UNITS * self.noise


@dataclasses.dataclass(frozen=True)
class Decision:
    """The verdict's arithmetic: the score's and (with labels) the kNN's margins, whether the
    pick is recommended, and on what ``basis``: ``kNN`` or ``score`` (the pick), ``kNN lower``
    (the score's margin is beyond the noise, the kNN margin negative) or ``noise`` (neither
    margin beyond the noise)."""

    score: Margin
    knn: Margin | None
    pick: bool
    basis: str


def decide(values: dict[str, dict[int, float]], study_seed: int,
           knn: dict[str, dict[int, float | None]] | None = None) -> Decision:
    """The decision from ``values`` and ``knn`` (label ``pick``/``published`` -> {seed: x}); kNN
    counts when it is known for both heads at every seed of ``values``."""
    seeds = sorted(s for s in values["pick"] if s in values["published"])
    fresh = [s for s in seeds if s != study_seed]
    score = _paired(values, seeds, fresh)
    has_knn = knn is not None and all(knn.get(k, {}).get(s) is not None for k in ("pick", "published") for s in seeds)
    k = _paired(knn, seeds, fresh) if has_knn else None
    if k is not None and k.beyond_noise:
        return Decision(score, k, True, "kNN")
    if score.beyond_noise:
        return Decision(score, k, True, "score") if k is None or k.margin >= 0 else Decision(score, k, False, "kNN lower")
    return Decision(score, k, False, "noise")


def _paired(x: Any, seeds: list[int], fresh: list[int]) -> Margin:
    """The Margin of the per-seed differences x["pick"][s] - x["published"][s]."""
    diff = {s: x["pick"][s] - x["published"][s] for s in seeds}
    m = sum(diff[s] for s in fresh) / len(fresh)
    mu = sum(diff.values()) / len(diff)
    sigma = math.sqrt(sum((d - mu) ** 2 for d in diff.values()) / (len(diff) - 1)) if len(diff) > 1 else 0.0
    return Margin(m, sigma / math.sqrt(len(fresh)), sigma)


@dataclasses.dataclass
class Verdict:
    """The outcome: which head to use and why.

    Attributes:
        recommended: ``pick``, ``published`` (the reference), or ``pick_unchecked`` (no
            reference measured, or ``confirm_seeds`` = 0).
        reason: one sentence a user reads.
        pick, reference: trial numbers (None when absent).
        values: label -> {seed: value}; knn: label -> {seed: backbone kNN} (None without labels).
        basis: :attr:`Decision.basis`; None when nothing was compared.
        score_margin, knn_margin: the two measures' :class:`Margin` (None when unmeasured).
        steps: the confirmation runs' schedule when it is their own (``confirm_epochs``, or
            ``max_steps`` on a backbone of their own), else None.
        backbone: the backbone the confirmation runs trained when it is their own (``confirm_backbone``).
    """

    recommended: str
    reason: str
    pick: int | None
    reference: int | None
    values: dict[str, dict[int, float]] = dataclasses.field(default_factory=dict)
    knn: dict[str, dict[int, float | None]] = dataclasses.field(default_factory=dict)
    basis: str | None = None
    score_margin: Margin | None = None
    knn_margin: Margin | None = None
    steps: int | None = None
    backbone: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["values"] = {k: {str(s): v for s, v in by.items()} for k, by in self.values.items()}
        d["knn"] = {k: {str(s): v for s, v in by.items()} for k, by in self.knn.items()}
        return d


def run_verdict(pick: Any, reference: Any, n_seeds: int, study_seed: int, out: Path,
                measure: Callable[..., dict[str, float]], echo: Callable[[str], None],
                steps: int | None = None, schedule: str = "", backbone: str | None = None,
                heads: int | None = None) -> Verdict:
    """The verdict on the pick (a FrozenTrial) against the reference trial (or None), with
    ``measure(spec, seed, folder)`` (:meth:`TrialRunner.measure_head`) for the fresh seeds; with
    ``steps``, the runs train that schedule (``measure(..., steps=steps)``; ``schedule`` says it in
    words, e.g. "300 epochs") and are compared at the fresh seeds alone. ``backbone`` (with
    ``steps``) names the backbone ``measure`` trains on, for the runs' folders and the record;
    ``heads`` (the heads the study holds) goes into the rerun a within-the-noise reason suggests."""
    if pick is None:
        return Verdict("pick_unchecked", "no trial completed the full budget: there is no pick", None, None)
    number = pick.number
    if reference is None:
        return Verdict("pick_unchecked", "the published head was not measured (its trial failed or has not run): "
                       "the pick is unchecked", number, None)
    if reference.number == number:
        return Verdict("published", "the published head is the best head the search measured", number, number)
    values: dict[str, dict[int, float]] = {"pick": {}, "published": {}}
    knn: dict[str, dict[int, float | None]] = {"pick": {}, "published": {}}
    if steps is None:
        values = {"pick": {study_seed: _value(pick)}, "published": {study_seed: _value(reference)}}
        knn = {"pick": {study_seed: pick.user_attrs.get("knn_backbone")},
               "published": {study_seed: reference.user_attrs.get("knn_backbone")}}
    if n_seeds < 1:
        return Verdict("pick_unchecked", "--confirm-seeds 0: the pick was not re-trained at a fresh seed, so its margin "
                       "over the published head is unchecked", number, reference.number, values, knn)
    what = (f" for {schedule or f'{steps:,} steps'}" if steps else "") + (", rescaled to that d" if backbone else "")
    suffix = ("" if steps is None else f"_{steps}steps") + ("" if backbone is None else "_" + _folder_name(backbone))
    specs = {"pick": HeadSpec.from_dict(pick.user_attrs["head"]), "published": HeadSpec.from_dict(reference.user_attrs["head"])}
    for seed in range(study_seed + 1, study_seed + 1 + n_seeds):  # seed by seed: a stopped verdict leaves whole pairs
        for label, spec in specs.items():
            try:
                rec = _confirmed(spec, seed, out / f"{label}_s{seed}{suffix}", measure, echo, label, steps, what)
            except TrialDiverged as exc:  # the search's outputs are still written, with the pick unchecked
                return Verdict("pick_unchecked", f"the {label} head's run at fresh seed {seed}{what} diverged ({exc}), "
                               "so the pick's margin over the published head is unchecked", number, reference.number,
                               values, knn)
            values[label][seed], knn[label][seed] = rec["value"], rec.get("knn_backbone")
    d = decide(values, study_seed, knn)
    return Verdict("pick" if d.pick else "published", _reason(d, n_seeds, schedule, heads), number, reference.number,
                   values, knn, d.basis, d.score, d.knn, steps, backbone)


def _reason(d: Decision, n_fresh: int, schedule: str = "", heads: int | None = None) -> str:
    """The sentence a user reads: the margins against their noise, and what decided (``schedule``:
    the runs' own schedule in words, when they had one). Within the noise with the pick ahead, it
    names the rerun that adds fresh seeds: ``--trials`` at the ``heads`` the study holds, so that
    the rerun trains only the new seeds instead of resuming the search."""
    seeds = f"{n_fresh} fresh seed{'s' if n_fresh > 1 else ''}" + (f" ({schedule} each)" if schedule else "")
    score = f"score {d.score.margin:+.4f} (noise {NOISE_UNITS:g} x {d.score.noise:.4f})"
    knn = "" if d.knn is None else (f"backbone kNN {100 * d.knn.margin:+.2f} points "
                                    f"(noise {NOISE_UNITS:g} x {100 * d.knn.noise:.2f})")
    both = f"{knn}; {score}" if knn else score
    if d.basis == "kNN":
        return f"the pick's backbone beats the published head's at {seeds}, beyond the noise: {both}"
    if d.basis == "score":
        also = f", and its backbone kNN is not lower: {knn}" if knn else ""
        return f"the pick beats the published head at {seeds} beyond the noise: {score}{also}"
    if d.basis == "kNN lower":
        return (f"the pick's score beats the published head at {seeds} beyond the noise, but the backbone it trains "
                f"is worse there: {both}; the score misleads on this run: use the published head")
    ahead = d.score.margin > 0 or (d.knn is not None and d.knn.margin > 0)
    rerun = ("--confirm-seeds 3 measures it more closely" if heads is None else
             f"rerun with --confirm-seeds 3 --trials {heads} to measure it more closely (only the new seeds train)")
    more = f"; {rerun}" if n_fresh < 3 and ahead else ""
    return f"the pick's margins over the published head at {seeds} are within the noise: {both}: use the published head{more}"


def _folder_name(name: str) -> str:
    """``name`` as one folder-name part: characters other than letters, digits, ``_.-`` become
    ``_``, cut to 64; a name changed so ends in a hash of it, so two names never share a folder."""
    part = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:64]
    return part if part == name else f"{part[:55]}_{hashlib.sha1(name.encode()).hexdigest()[:8]}"


def _value(trial: Any) -> float:
    """A trial's value as the verdict compares it (multi-objective trials: their score)."""
    return float(trial.values[0]) if len(trial.values) == 1 else float(trial.user_attrs["score"])


def _confirmed(spec: HeadSpec, seed: int, folder: Path, measure: Callable[..., dict[str, float]],
               echo: Callable[[str], None], label: str, steps: int | None = None, what: str = "") -> dict[str, float]:
    """``measure(spec, seed, folder)`` (with ``steps=steps`` when given), or the stored result of an
    earlier run of the same head; ``what`` says the runs' own schedule and backbone in the progress line."""
    from geohead.io import MAX_SMALL_FILE, atomic_write_text, path_in, read_json

    path = folder / "result.json"
    try:  # an unreadable, oversized or linked-out record is measured again and replaced
        stored = read_json(path_in(folder, "result.json", "verdict result"), "verdict result", "",
                           limit=MAX_SMALL_FILE) if path.is_file() else None
    except ValueError:
        stored = None
    if isinstance(stored, dict) and stored.get("head") == spec.to_dict() and _measured(stored):
        return stored
    echo(f"verdict: training the {label} head at seed {seed}: {spec.describe()}{what}")
    measured = measure(spec, seed, folder) if steps is None else measure(spec, seed, folder, steps=steps)
    rec = {**measured, "head": spec.to_dict(), "seed": seed}
    atomic_write_text(path, json.dumps(rec, indent=2) + "\n")
    return rec


def _measured(rec: dict[str, Any]) -> bool:
    """Whether a stored result holds what the verdict compares: a finite ``value`` and a finite
    ``knn_backbone`` or none (a record edited or written by another program is measured again)."""
    return num(rec.get("value")) is not None and (rec.get("knn_backbone") is None or num(rec["knn_backbone"]) is not None)


__all__ = ["NOISE_UNITS", "Decision", "Margin", "Verdict", "decide", "run_verdict"]
