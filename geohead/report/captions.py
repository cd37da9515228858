"""The captions under the report's run figures: what to look for, then what this run shows.

Each ``*_caption`` function reads the records its figure was drawn from and returns one
sentence or two; "" when there is nothing to say.
"""
from __future__ import annotations

import math
from typing import Any

#: A loss whose first and last values differ by less than this share of their size is flat.
FLAT_LOSS = 0.02
#: Backbone and head accuracies closer than this (absolute) are level.
LEVEL_ACC = 0.01


def _numbers(records: list[dict], key: str) -> list[tuple[Any, float]]:
    """(step, value) of the records holding a number under ``key`` (NaN/inf kept)."""
    return [(r.get("step"), float(r[key])) for r in records
            if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)]


def _ends(values: list[float]) -> tuple[float, float]:
    """Means of the first and the last tenth of ``values`` (one value each at least): the ends
    of a noisy curve."""
    k = max(1, len(values) // 10)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def loss_caption(losses: list[dict]) -> str:
    """What the loss curve says: diverged, too short to read, flat from the start, rising or falling."""
    pts = _numbers(losses, "loss")
    if not pts:
        return ""
    look = "Look for a loss that falls, then flattens. "
    bad = next(((s, v) for s, v in pts if not math.isfinite(v)), None)
    if bad is not None:
        return look + f"Here the loss is {bad[1]} at step {bad[0]}: training diverged (lower the lr, clip gradients)."
    if len(pts) < 3:
        return look + f"Here only {len(pts)} loss value(s): too few to read a trend."
    first, last = _ends([v for _, v in pts])
    scale = max(abs(first), abs(last), 1e-12)
    change = f"{first:.4g} → {last:.4g}"
    if abs(last - first) <= FLAT_LOSS * scale:
        return look + (f"Here the loss is flat from the start ({change}): the lr is too small, or the representation "
                       "collapsed (check RankMe and the std in the monitors).")
    if last > first:
        return look + f"Here the loss rises ({change}): the lr is too large, or training is diverging."
    return look + (f"Here it falls ({change}); where it flattens, more steps buy little; spikes mean the lr is too "
                   "large.")


def monitors_caption(monitors: list[dict]) -> str:
    """What the collapse monitors say: the last record's std of normalised outputs of the head and
    the backbone against their healthy 1/√dim, and a collapse where ``geohead diagnose`` warns of one
    (:func:`geohead.diagnose.verdict.collapse_warning`: the std ratio or RankMe too low; RankMe
    against min(batch, width) where the record holds its batch, else the std alone)."""
    from geohead.diagnose.verdict import collapse_warning, finite_number

    look = ("Look for RankMe falling towards 1 or the std falling far below its healthy 1/√dim line: collapse "
            "(the head usually goes first).")
    last = next((r for r in reversed(monitors) if isinstance(r, dict)), {})
    ratios, warned = {}, []
    for space in ("head", "backbone"):
        raw = last.get(f"std_{space}")
        if isinstance(raw, float) and math.isnan(raw):
            return look + f" Here the {space}'s last std is NaN: training diverged (lower the lr, clip gradients)."
        std, healthy = finite_number(raw), finite_number(last.get(f"std_healthy_{space}"))
        if std is None or healthy is None or not 2 ** -10 <= healthy <= 1:  # 1/√width, a width of 1 to 2^20
            continue
        ratios[space] = std / healthy
        batch = finite_number(last.get("batch"))
        state = {"normalized_std": std, "healthy_std": healthy, "dim": round(healthy ** -2), "n": batch,
                 "rankme": finite_number(last.get(f"rankme_{space}")) if batch else None}
        if collapse_warning(state):
            warned.append(space)
    if not ratios:
        return look
    shown = ", ".join(f"the {space}'s {r:.2f}" for space, r in ratios.items())
    if warned:
        verb = "is" if len(warned) == 1 else "are"
        return look + f" Here the last std is {shown} of healthy: the {' and the '.join(warned)} {verb} collapsing."
    return look + f" Here the last std is {shown} of healthy: no collapse."


def _class_target(targets: dict[str, Any]) -> str:
    """The probe target to judge the run on: ``class`` when there is one, else the first."""
    return "class" if "class" in targets else next(iter(targets))


def probes_caption(probes: dict[str, Any]) -> str:
    """What the end-of-training probes say about backbone vs head (the guillotine gap) on the class."""
    targets = (probes or {}).get("targets") or {}
    if not targets:
        return ""
    target = _class_target(targets)
    t = targets[target]
    kind = next((p for p in (probes.get("probes") or ["knn"]) if p in t.get("backbone", {}) and p in t.get("head", {})), None)
    if kind is None:
        return ""
    from geohead.diagnose.verdict import accuracy, finite_number, gap_reading

    b, h, chance = accuracy(t["backbone"][kind]), accuracy(t["head"][kind]), finite_number(t.get("chance")) or 0.0
    if b is None or h is None:
        return ""
    look = "Look for the backbone above the head on the class: the guillotine gap, expected. "
    acc = f"({kind} on {target}: backbone {b:.3f}, head {h:.3f}, chance {chance:.3f})"
    n_test = finite_number(((probes.get("split") or {}) if isinstance(probes.get("split"), dict) else {}).get("n_test"))
    reading, noise = gap_reading(b, h, chance, int(n_test) if n_test and n_test >= 1 else None)
    if reading == "near chance":
        return look + f"Here both are near chance {acc}: the run learned little (collapsed, or too short)."
    if reading == "within noise" or (noise is None and abs(b - h) <= LEVEL_ACC):
        within = f" within the probe's sampling noise (about ±{noise:.3f} on {int(n_test)} test images)" if noise else ""
        return look + (f"Here backbone and head are level{within} {acc}: no guillotine gap (a short run, or a head "
                       "that keeps everything).")
    if reading == "backbone":
        return look + f"Here backbone above head {acc}: the guillotine gap, expected; use the backbone's features."
    return look + (f"Here the head is above the backbone {acc}: unusual; check the probe sets are not tiny and "
                   "that the head is not bypassing the backbone.")


__all__ = ["loss_caption", "monitors_caption", "probes_caption"]
