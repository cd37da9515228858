"""The weights of the search's label-free score: chosen on one search's trials, checked on another's.

Reads the measured criteria of two search folders (``--fit`` and ``--check``): the trials at
the first successive-halving rung (rungs.csv: every head that trained, at the same step), or
the completed trials of a fixed-budget search (trials.csv), each head once. The score's
components are recomputed from the raw criteria with :func:`geohead.search.score.score_components`
(so a study recorded before a transform changed is scored as today).

* per criterion: Spearman ρ with backbone kNN accuracy on both folders, overall and with depth
  held fixed (within depth 1 and within depth >= 2, and their n-weighted mean);
* the weights: every vector in {0, 1}^5 (but 0; ``--levels 0 1 2`` for a finer grid) is scored
  on the fit folder: which criteria enter, with equal weights (a choice of 31, not a fit of five
  real numbers to ~20 trials). The one with the highest ρ there (ties: fewer criteria, then more
  equal weights) is the choice; its ρ on the check folder, which the choice never saw, is the
  evidence. Equal weights and each single criterion are shown beside it.

Run: ``python benchmarks/search_weights.py --fit runs/fit_shapes --check runs/search_transfer/barlow/search``
"""
from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

from geohead.search.results import read_trials_csv, spearman
from geohead.search.score import SCORE_CRITERIA, geometric_score, score_components

RAW = ("rankme_backbone_frac", "std_backbone", "local_invariance", "fisher_soft_rank_loss", "fisher_effective_rank",
       "heff_stable_rank", "heff_spread", "compression", "tangent_invariance", "rankme_head_frac", "knn_head")


def load_rows(folder: Path) -> tuple[list[dict[str, Any]], str]:
    """The rows to score (see the module docstring) and where they came from."""
    rungs = folder / "rungs.csv"
    if rungs.is_file():
        rows = [r for r in read_trials_csv(rungs) if r.get("knn_backbone") is not None]
        if rows:
            first = min(r["step"] for r in rows)
            return [r for r in rows if r["step"] == first], f"rungs.csv at step {first}"
    rows = [r for r in read_trials_csv(folder / "trials.csv")
            if r["state"] == "COMPLETE" and r.get("duplicate_of") is None and r.get("knn_backbone") is not None]
    return rows, "trials.csv (completed trials)"


def components(rows: list[dict[str, Any]]) -> list[dict[str, float]]:
    return [score_components({k: v for k, v in r.items() if isinstance(v, (int, float))}) for r in rows]


def by_depth(rows: list[dict[str, Any]], xs: list[Any]) -> dict[str, Any]:
    """ρ(x, kNN) within depth 1 and within depth >= 2, and their n-weighted mean (groups of >= 4)."""
    out: dict[str, Any] = {}
    groups = {"depth1": [i for i, r in enumerate(rows) if int(r["depth"]) == 1],
              "depth2+": [i for i, r in enumerate(rows) if int(r["depth"]) >= 2]}
    tot, acc = 0, 0.0
    for name, idx in groups.items():
        s = spearman([xs[i] for i in idx], [rows[i]["knn_backbone"] for i in idx])
        out[name] = s
        if s["rho"] is not None and s["n"] >= 4:
            tot += s["n"]
            acc += s["n"] * s["rho"]
    out["within_depth"] = acc / tot if tot else None
    return out


def criterion_table(rows: list[dict[str, Any]]) -> dict[str, Any]:
    comps = components(rows)
    knn = [r["knn_backbone"] for r in rows]
    table: dict[str, Any] = {}
    for c in SCORE_CRITERIA:
        xs = [cp[c] for cp in comps]
        table[f"score_{c}"] = {"all": spearman(xs, knn), **by_depth(rows, xs)}
    for c in RAW:
        xs = [r.get(c) for r in rows]
        if any(x is not None for x in xs):
            table[c] = {"all": spearman(xs, knn), **by_depth(rows, xs)}
    return table


def rho_of(rows: list[dict[str, Any]], comps: list[dict[str, float]], w: dict[str, float]) -> float | None:
    total = sum(w.values())
    scores = [sum(w[k] * cp[k] for k in w) / total for cp in comps]
    return spearman(scores, [r["knn_backbone"] for r in rows])["rho"]


def choose(fit: list[dict[str, Any]], check: list[dict[str, Any]], levels: tuple[float, ...] = (0.0, 1.0)) -> dict[str, Any]:
    cf, cc = components(fit), components(check)
    grid = []
    for ws in itertools.product(levels, repeat=len(SCORE_CRITERIA)):
        if not any(ws):
            continue
        w = dict(zip(SCORE_CRITERIA, ws))
        r = rho_of(fit, cf, w)
        if r is None:
            continue
        spread = max(ws) - min(v for v in ws if v > 0)
        grid.append((r, -sum(v > 0 for v in ws), -spread, w))
    grid.sort(key=lambda t: t[:3], reverse=True)
    best = grid[0][3]
    equal = {k: 1.0 for k in SCORE_CRITERIA}
    return {
        "chosen": best, "fit_rho": rho_of(fit, cf, best), "check_rho": rho_of(check, cc, best),
        "equal": {"fit_rho": rho_of(fit, cf, equal), "check_rho": rho_of(check, cc, equal)},
        "top5": [{"weights": t[3], "fit_rho": t[0], "check_rho": rho_of(check, cc, t[3])} for t in grid[:5]],
        "single": {k: {"fit_rho": rho_of(fit, cf, {k: 1.0}), "check_rho": rho_of(check, cc, {k: 1.0})}
                   for k in SCORE_CRITERIA},
        "n_fit": len(fit), "n_check": len(check),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fit", required=True, help="search folder the weights are chosen on")
    ap.add_argument("--check", required=True, help="search folder they are checked on")
    ap.add_argument("--levels", type=float, nargs="+", default=[0.0, 1.0], help="weight values of the grid")
    ap.add_argument("--out", default=None, help="write the result as JSON here")
    args = ap.parse_args(argv)
    fit, fit_src = load_rows(Path(args.fit))
    check, check_src = load_rows(Path(args.check))
    res = {"fit": {"folder": args.fit, "rows": fit_src, "n": len(fit), "criteria": criterion_table(fit)},
           "check": {"folder": args.check, "rows": check_src, "n": len(check), "criteria": criterion_table(check)},
           "weights": choose(fit, check, tuple(args.levels))}
    res["check"]["score_as_recorded"] = spearman([r.get("score") for r in check], [r["knn_backbone"] for r in check])
    res["check"]["score_recomputed"] = spearman([geometric_score({k: v for k, v in r.items() if isinstance(v, (int, float))})
                                                 for r in check], [r["knn_backbone"] for r in check])

    def f(x: Any) -> str:
        return "   -  " if x is None else f"{x:+.2f}"

    print(f"fit: {args.fit} ({fit_src}, n = {len(fit)});  check: {args.check} ({check_src}, n = {len(check)})")
    print(f"\n{'criterion':<26} {'fit all':>8} {'fit d1':>7} {'fit d2+':>7} {'fit |d':>7}   {'chk all':>8} {'chk d1':>7} {'chk d2+':>7} {'chk |d':>7}")
    for c in res["fit"]["criteria"]:
        a, b = res["fit"]["criteria"][c], res["check"]["criteria"].get(c, {})
        cells = [a["all"]["rho"], a["depth1"]["rho"], a["depth2+"]["rho"], a["within_depth"]]
        cells += [b.get("all", {}).get("rho"), b.get("depth1", {}).get("rho"), b.get("depth2+", {}).get("rho"), b.get("within_depth")]
        print(f"{c:<26} " + " ".join(f"{f(x):>7}" for x in cells[:4]) + "   " + " ".join(f"{f(x):>7}" for x in cells[4:]))
    w = res["weights"]
    print(f"\nchosen weights (max rho on fit): {w['chosen']}: fit rho {f(w['fit_rho'])}, check rho {f(w['check_rho'])}")
    print(f"equal weights: fit rho {f(w['equal']['fit_rho'])}, check rho {f(w['equal']['check_rho'])}")
    for k, v in w["single"].items():
        print(f"  {k} alone: fit {f(v['fit_rho'])}, check {f(v['check_rho'])}")
    print("top 5 on fit: " + "; ".join(f"{t['weights']} fit {f(t['fit_rho'])} check {f(t['check_rho'])}" for t in w["top5"]))
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
