"""The table of ``benchmarks/search_transfer.py``: each objective's summary (found vs published over
the seeds, the Spearman correlations of the search's ranking, first-rung score and recorded criteria
with full-budget kNN over the re-trained heads, the search's verdict and issue 22's goal) and the
markdown table of the runs and summaries that the benchmark prints and writes to ``OUT/table.md``.

``search_transfer`` imports these and keeps them reachable under their old names
(``search_transfer.summarise``, ``.table``, ``.spearman``, ``.CRITERIA``).
"""
from __future__ import annotations

import math
from typing import Any

#: Criteria whose search-time value is correlated with full-budget kNN over the re-trained heads.
CRITERIA = ("score", "score_rankme", "score_uniformity", "score_invariance", "score_fisher", "score_conditioning",
            "rankme_backbone_frac", "std_backbone", "compression", "tangent_invariance", "local_invariance",
            "fisher_effective_rank", "fisher_soft_rank_loss", "heff_stable_rank", "screen_head_escape",
            "screen_heff_stable_rank", "knn_backbone")


def spearman(xs: list[Any], ys: list[Any]) -> dict[str, Any]:
    from geohead.search.results import spearman as sp

    return sp(xs, ys)


def _goal(s: dict[str, Any]) -> str | None:
    """Issue 22's 20-epoch goal: ``met (pick)`` when found >= published + 1 point, ``met
    (verdict)`` when no re-trained top head beats published by 1 point and the verdict recommends
    the published head, else ``not met``; None before both are measured."""
    d, best = s["found_minus_published_linear_points"], s["best_top_minus_published_linear_points"]
    if d is None:
        return None
    if d >= 1.0:
        return "met (pick)"
    v = s.get("verdict") or {}
    if best is not None and best < 1.0 and v.get("recommended") == "published":
        return "met (verdict)"
    return "not met"


def summarise(objective: str, runs: list[dict[str, Any]], seeds: list[int],
              verdict: dict[str, Any] | None = None) -> dict[str, Any]:
    """Found vs published over the seeds, ρ(search ranking / scores / criteria, full kNN) over
    the re-trained top-k heads, the search's verdict and issue 22's goal."""
    def mean(label: str, key: str) -> float | None:
        vals = [r[key] for r in runs if r["label"] == label and r.get(key) is not None]
        return sum(vals) / len(vals) if vals else None

    s: dict[str, Any] = {"objective": objective}
    for label in ("found", "published", "preset_silu", "best_deep"):
        s[label] = {k: mean(label, k) for k in ("knn_backbone", "linear_backbone")}
        s[label]["seeds"] = sorted({r["seed"] for r in runs if r["label"] == label})
    f, p = s["found"]["linear_backbone"], s["published"]["linear_backbone"]
    s["found_minus_published_linear_points"] = None if f is None or p is None else 100 * (f - p)
    paired = sorted(set(s["found"]["seeds"]) & set(s["published"]["seeds"]))
    s["paired_seeds"] = paired
    top = [r for r in runs if r["label"].startswith("top_") or (r["label"] == "found" and r["seed"] == seeds[0])]
    top = list({r["trial"]: r for r in top if r.get("trial") is not None}.values())
    s["top_k_retrained"] = len(top)
    s["verdict"] = verdict
    pub = s["published"]["linear_backbone"]
    s["best_top_minus_published_linear_points"] = (
        None if pub is None or not top else 100 * (max(r["linear_backbone"] for r in top) - pub))
    s["goal_20"] = _goal(s)
    s["rho_rank_vs_full_knn"] = spearman([-r["search_rank"] for r in top], [r["knn_backbone"] for r in top])
    s["rho_rung_score_vs_full_knn"] = spearman([r.get("rung_score") for r in top], [r["knn_backbone"] for r in top])
    s["rho_criteria_vs_full_knn"] = {c: spearman([r["search"].get(c) for r in top], [r["knn_backbone"] for r in top])
                                     for c in CRITERIA if any(r["search"].get(c) is not None for r in top)}
    return s


def table(summaries: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    def f(x: Any, d: int = 3) -> str:
        return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{d}f}"

    lines = ["| objective | head | seed | steps | backbone kNN | linear probe | head kNN | wall s | search rank | description |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        lines.append(f"| {r['objective']} | {r['label']} | {r['seed']} | {r['steps']} | {f(r['knn_backbone'])} | "
                     f"{f(r['linear_backbone'])} | {f(r['knn_head'])} | {r['wall_s']:.0f} | {r.get('search_rank') or '-'} | "
                     f"{r['desc']} |")
    for s in summaries:
        d = s["found_minus_published_linear_points"]
        goal = s.get("goal_20") or ("-" if d is None else ("met" if d >= 1.0 else "NOT met"))
        rho = s["rho_rank_vs_full_knn"]
        lines += ["", f"**{s['objective']}**: found {f(s['found']['linear_backbone'])} vs published "
                      f"{f(s['published']['linear_backbone'])} linear probe (seeds {s['found']['seeds']} / "
                      f"{s['published']['seeds']}): {f(d, 1)} points (goal >= +1: {goal}); search ranking vs full-budget "
                      f"kNN over {s['top_k_retrained']} re-trained heads: rho = {f(rho['rho'], 2)} (p = {f(rho['p'], 3)}; "
                      f"goal >= 0.6: {'-' if rho['rho'] is None else ('met' if rho['rho'] >= 0.6 else 'NOT met')}); "
                      f"first-rung score: rho = {f(s['rho_rung_score_vs_full_knn']['rho'], 2)}"
                      + _verdict_text(s.get("verdict")),
                  "", "| criterion (at search time) | rho vs full-budget kNN | n |", "|---|---|---|"]
        for c, v in s["rho_criteria_vs_full_knn"].items():
            lines.append(f"| {c} | {f(v['rho'], 2)} | {v['n']} |")
    return "\n".join(lines) + "\n"


def _verdict_text(v: dict[str, Any] | None) -> str:
    if not v:
        return "; the search had no verdict"
    return f"; the search's verdict: {v['recommended']} ({v['reason']})"
