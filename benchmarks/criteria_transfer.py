"""Which of the theory's criteria predict the full-budget backbone, per objective? (issue 22, item 4)

Reads the transfer benchmark's results (``search_transfer.py``: every head re-trained for 20
epochs at seed 0, with the criteria the search measured for it) and, when given, the budget
benchmark's (``search_budget.py``: 100 epochs):

1. per objective and criterion: Spearman ρ between the search-time value and the full-budget
   backbone kNN accuracy over the re-trained distinct heads (the measured sign is kept: a
   criterion with a negative ρ misleads when maximised);
2. the score's weights chosen on some objectives and checked on the others, as #15 did on
   searches: every subset of the score's components (``SCORE_CRITERIA``) with equal weights is
   scored by its mean ρ over the ``--fit`` objectives; the best (ties: fewer criteria) is checked
   on the held-apart objectives against RankMe alone (today's score). A criterion is adopted only
   where the chosen subset beats RankMe alone on the held-apart objectives;
3. compression (with its measured sign: 1/(1 + compression)) and the tangent-Fisher effective
   rank, which are recorded but are not components of the score, are candidates of the subsets
   too (``EXTRA``), so either can be adopted where it earns it.

Run: ``python benchmarks/criteria_transfer.py --transfer benchmarks/results/search_transfer22_cpu.json
benchmarks/results/search_transfer22p_cpu.json --fit barlow simclr byol`` (the other objectives are
held apart; an objective in a later file replaces its runs in the earlier ones: the second file
re-measured BYOL and SimSiam with the published predictor).
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from geohead.search.results import spearman
from geohead.search.score import SCORE_CRITERIA, fisher_erank, low_compression

#: Recorded criteria reported per objective (search-time values of the re-trained heads).
RECORDED = ("score_rankme", "score_uniformity", "score_invariance", "score_fisher", "score_conditioning",
            "compression", "local_invariance", "tangent_invariance", "fisher_effective_rank", "fisher_soft_rank_loss",
            "heff_stable_rank", "screen_head_escape", "screen_heff_stable_rank")


def merge(results: list[dict[str, Any]]) -> dict[str, Any]:
    """One results dict from several: each objective's runs come from the last file that holds it."""
    owner = {r["objective"]: i for i, res in enumerate(results) for r in res["runs"]}
    return {"runs": [r for i, res in enumerate(results) for r in res["runs"] if owner[r["objective"]] == i]}


def heads(results: dict[str, Any], epochs: int | None = None) -> dict[str, list[dict[str, Any]]]:
    """Objective -> the distinct re-trained heads at the first seed (one row per search trial)."""
    out: dict[str, dict[int, dict[str, Any]]] = {}
    for r in results["runs"]:
        if r.get("trial") is None or r["seed"] != 0 or not r.get("search"):
            continue
        if epochs is not None and r.get("epochs", epochs) != epochs:
            continue
        out.setdefault(r["objective"], {}).setdefault(r["trial"], r)
    return {o: list(by.values()) for o, by in out.items()}


def rho(rows: list[dict[str, Any]], values: list[float | None], target: str = "knn_backbone") -> float | None:
    return spearman(values, [r[target] for r in rows])["rho"]


#: Recorded criteria that are not score components, as candidates with a fixed [0, 1] transform
#: (like the score's own) and the sign #15 measured: compression (ρ < 0 on Barlow Twins and
#: SimCLR) enters as 1/(1 + compression); the tangent-Fisher effective rank (ρ > 0) as
#: log(1 + erank)/log(1 + d).
EXTRA = ("low_compression", "fisher_erank")


def component(r: dict[str, Any], c: str) -> float | None:
    """Score component ``c`` of a re-trained head (one of SCORE_CRITERIA or EXTRA)."""
    s = r["search"]
    if c == "low_compression":
        x = s.get("compression")
        return None if x is None else low_compression(x)
    if c == "fisher_erank":
        x, d = s.get("fisher_effective_rank"), r.get("dim_backbone") or 128
        return None if x is None else fisher_erank(x, d)
    return s.get(f"score_{c}")


def subset_values(rows: list[dict[str, Any]], subset: tuple[str, ...]) -> list[float | None]:
    """Equal-weight mean of the components in ``subset`` per head."""
    out = []
    for r in rows:
        xs = [component(r, c) for c in subset]
        out.append(None if any(x is None for x in xs) else sum(xs) / len(xs))
    return out


def mean(xs: list[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def choose(by_obj: dict[str, list[dict[str, Any]]], fit: list[str], check: list[str]) -> dict[str, Any]:
    """The subset of components with the best mean ρ on ``fit``; its ρ and RankMe's on ``check``."""
    scored = []
    pool = SCORE_CRITERIA + EXTRA
    for k in range(1, len(pool) + 1):
        for subset in itertools.combinations(pool, k):
            fit_rho = mean([rho(by_obj[o], subset_values(by_obj[o], subset)) for o in fit if o in by_obj])
            if fit_rho is not None:
                scored.append((fit_rho, -k, subset))
    scored.sort(reverse=True)
    best = scored[0][2]
    res = {"fit": fit, "check": check, "chosen": list(best), "fit_rho": scored[0][0]}
    for name, subset in (("chosen", best), ("rankme", ("rankme",)), ("all", SCORE_CRITERIA)):
        res[f"check_rho_{name}"] = {o: rho(by_obj[o], subset_values(by_obj[o], subset)) for o in check if o in by_obj}
        res[f"check_mean_{name}"] = mean(list(res[f"check_rho_{name}"].values()))
    c, r = res["check_mean_chosen"], res["check_mean_rankme"]
    res["adopt"] = bool(best != ("rankme",) and c is not None and r is not None and c > r)
    return res


def leave_one_out(by_obj: dict[str, list[dict[str, Any]]]) -> dict[str, dict[str, Any]]:
    """For each objective: the subset chosen on all the others, checked on it against RankMe."""
    return {o: choose(by_obj, [x for x in by_obj if x != o], [o]) for o in sorted(by_obj)}


def picks(results: dict[str, Any], by_obj: dict[str, list[dict[str, Any]]],
          subset: tuple[str, ...]) -> dict[str, dict[str, Any]]:
    """Per objective: the head ``subset``'s equal-weight score ranks first among the re-trained
    heads, its seed-0 linear probe and its margin (points) over the published head's mean over
    seeds. Restricted to the heads the search's own score put in its top k: what a score change
    would have picked there, not what it would pick from the whole space."""
    pub: dict[str, list[float]] = {}
    for r in results["runs"]:
        if r["label"] == "published" and r.get("linear_backbone") is not None:
            pub.setdefault(r["objective"], []).append(r["linear_backbone"])
    out = {}
    for o, rows in sorted(by_obj.items()):
        vals = subset_values(rows, subset)
        i = max(range(len(rows)), key=lambda k: -1.0 if vals[k] is None else vals[k])
        p = sum(pub[o]) / len(pub[o]) if pub.get(o) else None
        lin = rows[i]["linear_backbone"]
        out[o] = {"trial": rows[i]["trial"], "linear_backbone": lin, "published_mean": p,
                  "margin_points": None if p is None else 100 * (lin - p)}
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transfer", nargs="+", required=True,
                    help="search_transfer.py's results.json files; an objective in a later one replaces the earlier's")
    ap.add_argument("--fit", nargs="+", required=True, help="objectives the weights are chosen on")
    ap.add_argument("--out", default=None, help="write the tables as JSON here")
    args = ap.parse_args(argv)
    results = merge([json.loads(Path(p).read_text()) for p in args.transfer])
    by_obj = heads(results)
    objectives = sorted(by_obj)
    table: dict[str, dict[str, Any]] = {}
    print("| criterion | " + " | ".join(f"{o} (n={len(by_obj[o])})" for o in objectives) + " |")
    print("|---|" + "---|" * len(objectives))
    for c in RECORDED:
        row = {o: rho(by_obj[o], [r["search"].get(c) for r in by_obj[o]]) for o in objectives}
        table[c] = row
        print(f"| {c} | " + " | ".join("-" if v is None else f"{v:+.2f}" for v in row.values()) + " |")
    check = [o for o in objectives if o not in args.fit]
    res = choose(by_obj, args.fit, check)
    print(f"\nchosen on {args.fit}: {res['chosen']} (mean rho {res['fit_rho']:+.2f}); on {check}: "
          f"chosen {res['check_mean_chosen']}, RankMe alone {res['check_mean_rankme']}, all five {res['check_mean_all']}; "
          f"adopt: {res['adopt']}")
    loo = leave_one_out(by_obj)
    print("\nleave one objective out (chosen on the others, checked on it):")
    print("| held out | chosen on the others | rho chosen | rho RankMe alone |\n|---|---|---|---|")
    for o, r in loo.items():
        print(f"| {o} | {', '.join(r['chosen'])} | {_f(r['check_mean_chosen'])} | {_f(r['check_mean_rankme'])} |")
    chosen = tuple(res["chosen"])
    now, then = picks(results, by_obj, ("rankme",)), picks(results, by_obj, chosen)
    print(f"\nthe first head among the re-trained ones, RankMe alone vs {', '.join(chosen)} (seed-0 linear probe, "
          "points over the published head's mean):")
    print("| objective | RankMe: trial, linear, margin | chosen: trial, linear, margin |\n|---|---|---|")
    for o in objectives:
        a, b = now[o], then[o]
        print(f"| {o} | #{a['trial']} {a['linear_backbone']:.3f} {_f(a['margin_points'])} | "
              f"#{b['trial']} {b['linear_backbone']:.3f} {_f(b['margin_points'])} |")
    if args.out:
        Path(args.out).write_text(json.dumps({"per_criterion": table, "weights": res, "leave_one_out": loo,
                                              "picks": {"rankme": now, "chosen": then}},
                                             indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
