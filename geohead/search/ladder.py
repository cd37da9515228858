"""What the scale ladder measured: does a pick decided on the cheap proxy keep its margin over the
published head when the backbone is wider, the data larger or the training longer?

``ladder.json`` (beside this module, written by ``benchmarks/search_scale.py``) holds, per
objective, the pick's margin over the published head on the proxy (backbone linear-probe
points, mean over seeds; ``knn_margin`` the same for the kNN probe) and at the far end of each
axis measured (``width``, ``data``, ``budget``). A margin **holds** when it is at least half the
proxy's, **shrinks** when it is positive but below that, and **turns** when the published head is
as good or better there. An axis's finding is the worse of its two probes' (the linear probe
leads; an axis where only kNN turns is still one to re-check). The search prints this with its
verdict, and ``geohead train --head`` names the finding for each axis on which the run is bigger
than the proxy: the axes to re-check first. The finding reads the mean over the seeds; each
seed's linear margin is printed beside it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

LADDER = Path(__file__).with_name("ladder.json")
AXES = ("width", "data", "budget")
FINDINGS = ("holds", "shrinks", "turns")  # best to worst


def load_ladder(path: Path = LADDER) -> dict[str, Any]:
    """The ladder's record (``{"objectives": {}}`` when the file is absent)."""
    if not path.is_file():
        return {"objectives": {}}
    return json.loads(path.read_text())


def axis_finding(proxy_margin: float, margin: float) -> str:
    """``holds``, ``shrinks`` or ``turns`` (see the module docstring)."""
    if margin <= 0.0:
        return "turns"
    return "holds" if margin >= 0.5 * proxy_margin else "shrinks"


def findings(objective: str, ladder: dict[str, Any] | None = None) -> dict[str, tuple[str, str]]:
    """axis -> (``holds`` / ``shrinks`` / ``turns``, one phrase of what the ladder measured), e.g.
    ``("turns", "data (40,000 images): +1.2 points, proxy +1.5: holds; kNN -0.4, proxy +1.9: turns
    (seeds 0, 1: linear +1.5 / +0.8)")``, for each axis measured for ``objective``; the kNN part
    where it was recorded, and each seed's linear margin (``seed_margins``) where there are two or
    more, so a mean that holds over one seed that is level says so."""
    rec = (ladder or load_ladder())["objectives"].get(objective)
    if not rec:
        return {}
    proxy = rec["proxy"]
    out = {}
    for axis in AXES:
        a = rec["axes"].get(axis)
        if a is None:
            continue
        linear = axis_finding(proxy["margin"], a["margin"])
        phrase = f"{axis} ({a['at']}): {_points(a['margin'])} points, proxy {proxy['margin']:+.1f}: {linear}"
        verdict = linear
        if a.get("knn_margin") is not None and proxy.get("knn_margin") is not None:
            knn = axis_finding(proxy["knn_margin"], a["knn_margin"])
            phrase += f"; kNN {_points(a['knn_margin'])}, proxy {proxy['knn_margin']:+.1f}: {knn}"
            verdict = max(linear, knn, key=FINDINGS.index)
        seeds = ", ".join(str(s) for s in a["seeds"])
        spread = a.get("seed_margins") or []
        by_seed = f": linear {' / '.join(_points(m) for m in spread)}" if len(spread) > 1 else ""
        out[axis] = (verdict, f"{phrase} (seed{'s' if len(a['seeds']) > 1 else ''} {seeds}{by_seed})")
    return out


def _points(margin: float) -> str:
    """A margin in points, one decimal; two near zero, where one would print -0.0 or +0.0."""
    return f"{margin:+.2f}" if abs(margin) < 0.05 else f"{margin:+.1f}"


def recheck(objective: str, ladder: dict[str, Any] | None = None, verdict_epochs: float | None = None,
            verdict_d: int | None = None) -> str:
    """The advice printed with a search's verdict: the ladder's findings for ``objective``, the
    axes where the margin did not hold named first, or what to do where nothing was measured.
    ``verdict_epochs`` / ``verdict_d``: the verdict trained the user's schedule / backbone, so
    budget / width is not left to re-check."""
    found = findings(objective, ladder)
    done = {}
    if verdict_epochs is not None:
        done["budget"] = f"{verdict_epochs:g} epochs, your budget"
    if verdict_d is not None:
        done["width"] = f"on d={verdict_d}, your backbone"
    checked = f"the verdict trained {', '.join(done.values())}" if done else ""
    if not found:
        return (f"{checked}; " if checked else "") + ("the scale ladder has not measured this objective: before training "
                                                       "wider, longer or on more data, compare the pick with the "
                                                       "published head in a short run at your size")
    worst = [axis for axis, (verdict, _) in found.items() if verdict != "holds" and axis not in done]
    lead = f"re-check {' and '.join(worst)} first" if worst else f"the margin held on every {'other ' if done else ''}axis measured"
    flags = {"width": "--confirm-backbone trains the verdict on your backbone",
             "budget": "--confirm-epochs trains the verdict at your budget"}
    said = ([checked] if checked else []) + [flags[a] for a in worst if a in flags]
    if said:
        lead += f" ({'; '.join(said)})"
    return f"{lead}; on the scale ladder (CIFAR-10, docs/search.md): " + "; ".join(p for _, p in found.values())


__all__ = ["AXES", "FINDINGS", "LADDER", "axis_finding", "findings", "load_ladder", "recheck"]
