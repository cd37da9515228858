"""The one-paragraph verdict a diagnosis report opens with: collapse, orbits, the guillotine gap.

* collapse, per space (backbone features, head embeddings), from the collapse monitors
  (docs/monitors.md): collapsed when the std of the L2-normalised rows is below
  :data:`STD_RATIO_COLLAPSED` of the healthy 1/√width, or RankMe below
  :data:`RANKME_FRACTION_COLLAPSED` of min(N, width);
* whether the head compresses (> 1) or expands (< 1) augmentation orbits (``orbit_summary``);
* the guillotine gap: the backbone's kNN class accuracy minus the head's, read only where the
  accuracies are above chance and the gap beyond twice the probe's binomial sampling noise.
"""
from __future__ import annotations

import math
from typing import Any

#: std · √width below this is a collapse warning (1 when isotropic, 0 at complete collapse).
STD_RATIO_COLLAPSED = 0.1
#: RankMe below this fraction of min(N, width) is a collapse warning (1 direction of 512 is 0.002).
RANKME_FRACTION_COLLAPSED = 0.02
#: A probe accuracy below chance + this share of the way from chance to 1 is near chance: the gap says nothing.
NEAR_CHANCE = 0.1


def finite_number(x: Any) -> float | None:
    """``x`` as a float when it is a finite number (not a bool), else None (a report may hold anything)."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None


def collapse_warning(monitors: dict[str, Any]) -> str | None:
    """Why one space's monitors (``collapse_monitors(...).to_dict()``) look collapsed, or None."""
    std, healthy, rankme = finite_number(monitors.get("normalized_std")), finite_number(monitors.get("healthy_std")), finite_number(monitors.get("rankme"))
    dim, n = monitors.get("dim") or 0, monitors.get("n") or monitors.get("dim") or 0
    reasons = []
    if std is not None and healthy:
        if std / healthy < STD_RATIO_COLLAPSED:
            reasons.append(f"feature std {std:.2g} against a healthy {healthy:.2g} (ratio {std / healthy:.2g} < "
                           f"{STD_RATIO_COLLAPSED})")
    if rankme is not None and dim and rankme < RANKME_FRACTION_COLLAPSED * min(n, dim):
        reasons.append(f"RankMe {rankme:.3g} of at most {min(n, dim)}")
    return ", ".join(reasons) or None


def _collapse_sentence(collapse: dict[str, Any]) -> str:
    warned = {sp: w for sp, m in collapse.items() if (w := collapse_warning(m))}
    if not warned:
        parts = [f"{sp} RankMe {finite_number(m.get('rankme')) or 0:.3g}/{m.get('dim')}, std {finite_number(m.get('normalized_std')) or 0:.2g} "
                 f"(healthy {finite_number(m.get('healthy_std')) or 0:.2g})" for sp, m in collapse.items()]
        return "No collapse warning (" + "; ".join(parts) + ")."
    return " ".join(f"WARNING: the {sp} looks collapsed: {w}." for sp, w in warned.items())


def orbit_summary(orbits: dict[str, Any]) -> dict[str, Any]:
    """Geometric mean of the width-corrected compression (``compression``: backbone over head,
    > 1 = the head shrinks orbits more) over the families, and the verdict."""
    vals = [o["compression"] for o in orbits.values() if isinstance(o.get("compression"), (int, float))
            and math.isfinite(o["compression"]) and o["compression"] > 0]
    if not vals:
        return {"geometric_mean": None, "head": None, "families": 0}
    g = math.exp(sum(math.log(v) for v in vals) / len(vals))
    return {"geometric_mean": g, "head": "compresses" if g > 1 else "expands", "families": len(vals),
            "compressing_families": sorted(k for k, o in orbits.items() if (o.get("compression") or 0) > 1)}


def _orbit_sentence(summary: dict[str, Any]) -> str:
    g = finite_number(summary.get("geometric_mean"))
    if summary.get("note"):
        return f"Orbits: {summary['note']}."
    if summary.get("head") is None or g is None:
        return "Orbits: no finite orbit compression measured."
    what = "shrinks augmentation orbits more than the backbone" if g > 1 else "spreads augmentation orbits more than the backbone"
    return (f"The head {summary['head']} ({what}: geometric mean {g:.3g} over {summary.get('families')} families, "
            f"> 1 compresses).")


def _gap_sentence(probes: dict[str, Any] | None, n_test: int | None) -> str:
    cls = ((probes or {}).get("targets") or {}).get("class")
    if not cls:
        return "No guillotine probes."
    b, h = accuracy(cls["backbone"].get("knn")), accuracy(cls["head"].get("knn"))
    if b is None or h is None:
        return "Guillotine probes: no kNN accuracy between 0 and 1."
    gap = f"Guillotine gap (kNN class accuracy): backbone {b:.3f} vs head {h:.3f}, {b - h:+.3f}"
    chance = accuracy(cls.get("chance")) or 0.0
    reading, noise = gap_reading(b, h, chance, n_test)
    if reading == "near chance":
        return gap + f" (both near chance, {chance:.3f}: the features separate the classes little, so the gap says nothing)."
    if reading == "within noise":
        return gap + f" (within the probe's sampling noise, about ±{noise:.3f} on {n_test} test images: no gap to read)."
    keep = "the backbone keeps what the head drops: use the backbone" if reading == "backbone" else "the head loses nothing the probe sees"
    return gap + f" ({keep})."


def accuracy(x: Any) -> float | None:
    """A finite number in [0, 1], else None (a hand-edited or foreign report may hold anything)."""
    v = finite_number(x)
    return v if v is not None and 0.0 <= v <= 1.0 else None


def near_chance(accuracy: float, chance: float) -> bool:
    """Whether a probe's ``accuracy`` is below chance + :data:`NEAR_CHANCE` of the way to 1."""
    return accuracy < chance + NEAR_CHANCE * (1 - chance)


def gap_reading(backbone: float, head: float, chance: float, n_test: int | None) -> tuple[str, float | None]:
    """How to read the backbone's and the head's probe accuracies (each in [0, 1]) on ``n_test``
    test images: ``"near chance"`` (both, :func:`near_chance`), ``"within noise"`` (the gap at most
    twice its binomial sampling noise, √((b(1 − b) + h(1 − h)) / n)), else ``"backbone"`` or
    ``"head"`` (the higher one), with the noise (2σ; None without ``n_test``)."""
    noise = 2 * math.sqrt((backbone * (1 - backbone) + head * (1 - head)) / n_test) if n_test else None
    if near_chance(max(backbone, head), chance):
        return "near chance", noise
    if noise is not None and abs(backbone - head) <= noise:
        return "within noise", noise
    return ("backbone" if backbone > head else "head"), noise


def verdict(report: dict[str, Any]) -> str:
    """The paragraph: collapse warnings, compresses / expands, the guillotine gap."""
    split = (report.get("data") or {}).get("probe_split") or {}
    n_test = split.get("n_test") if isinstance(split.get("n_test"), int) and not isinstance(split.get("n_test"), bool) else None
    return " ".join([_collapse_sentence(report.get("collapse") or {}), _orbit_sentence(report.get("orbit_summary") or {}),
                     _gap_sentence(report.get("probes"), n_test if n_test and n_test > 0 else None)])


__all__ = ["NEAR_CHANCE", "RANKME_FRACTION_COLLAPSED", "STD_RATIO_COLLAPSED", "accuracy", "collapse_warning", "finite_number",
           "gap_reading", "near_chance", "orbit_summary", "verdict"]
