"""Which order of a search's heads ranks them like their 20-epoch backbones? The re-trained top
heads of the transfer benchmarks, re-ranked by each candidate rule.

Every head a search measured has a score at the first successive-halving rung (``rung_score``,
all heads share it) and at the last step it reached (``search.score``: the same value for a head
pruned there, the final score for a completed one; the default search has one rung, so these are
its only two levels). The rules (each a function of those two values and whether the head completed):

* ``completed_first``: the order the search used to report: completed heads by their final score,
  then pruned ones (the published-head trial and the first trials complete without ever meeting
  the pruner, so they outrank better heads that were compared and pruned);
* ``first_rung``: the score at the first rung, the highest rung *every* head shares;
* ``last_score``: each head's score at its last rung (the score as recorded);
* ``shared_rung``: the score at the highest rung the two heads share, made a total order as
  successive halving builds it: heads sorted by the first-rung score, then the heads that went on
  re-sorted by their later score among the places they hold (``geohead.search.results.rank_heads``).

For each results file and objective: Spearman ρ of each rule's order against the re-trained
backbone kNN (seed 0), the count of objectives with ρ >= 0.6 (issue 34's goal: 4 of 6). The rule
is chosen on RankMe's searches (``--choose``), checked on the theory-score searches (``--check``)
and confirmed on fresh searches with the default score (``--confirm``: their top heads were chosen
by the new order itself, so it is not re-ranking heads an older order picked).

Run: ``python benchmarks/search_order.py`` (measured: docs/search.md, "The order of the heads")
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# RankMe's searches: issue 15's Barlow Twins / SimCLR (reused by 22), 22's VICReg / DINO, 22p's
# BYOL / SimSiam (re-measured with the published predictor: they replace 22's)
CHOOSE = ["search_transfer22_cpu.json", "search_transfer22p_cpu.json"]
CHECK = ["search_transfer22u_cpu.json", "search_transfer22t_cpu.json"]
# fresh searches (seed 2, the default score), run after the rule was chosen: their top heads were
# picked by the new order itself
CONFIRM = ["search_transfer34_cpu.json"]
RULES = ("completed_first", "first_rung", "last_score", "shared_rung")


def heads(files: list[str]) -> dict[str, list[dict[str, Any]]]:
    """objective -> its re-trained top heads (at the file's first seed, the one every head is
    trained with); a later file replaces an objective's heads."""
    out: dict[str, list[dict[str, Any]]] = {}
    for name in files:
        rec = json.loads((RESULTS / name).read_text())
        seed = rec["settings"]["seeds"][0]
        mine: dict[str, list[dict[str, Any]]] = {}
        for r in rec["runs"]:
            if r["seed"] == seed and (r["label"] == "found" or r["label"].startswith("top_")) and r.get("rung_score") is not None:
                mine.setdefault(r["objective"], []).append(r)
        out.update(mine)
    return out


def rows_of(top: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows :func:`rank_heads` reads: number, rung scores ({step: score}), state."""
    rows = []
    for r in top:
        last = r["search"]["score"]
        completed = last != r["rung_score"]  # a head pruned at the (only) rung keeps that rung's score
        rungs = {1: r["rung_score"]} | ({2: last} if completed else {})
        rows.append({"number": r["trial"], "rungs": rungs, "completed": completed, "knn": r["knn_backbone"]})
    return rows


def order(rule: str, rows: list[dict[str, Any]]) -> list[int]:
    """Trial numbers, best first, by ``rule``."""
    from geohead.search.results import rank_heads

    if rule == "completed_first":  # completed heads by their final score, then pruned ones by theirs
        return [r["number"] for r in sorted(rows, key=lambda r: (not r["completed"], -r["rungs"][max(r["rungs"])]))]
    if rule == "first_rung":
        return [r["number"] for r in sorted(rows, key=lambda r: -r["rungs"][1])]
    if rule == "last_score":
        return [r["number"] for r in sorted(rows, key=lambda r: -r["rungs"][max(r["rungs"])])]
    return rank_heads({r["number"]: r["rungs"] for r in rows})


def evaluate(files: list[str]) -> dict[str, dict[str, float]]:
    """objective -> rule -> ρ(order, re-trained kNN)."""
    from geohead.search.results import spearman

    out: dict[str, dict[str, float]] = {}
    for objective, top in sorted(heads(files).items()):
        rows = rows_of(top)
        knn = {r["number"]: r["knn"] for r in rows}
        out[objective] = {}
        for rule in RULES:
            ranked = order(rule, rows)
            out[objective][rule] = spearman([-i for i in range(len(ranked))], [knn[n] for n in ranked])["rho"]
        out[objective]["n"] = len(rows)
    return out


def table(title: str, res: dict[str, dict[str, float]]) -> str:
    lines = [f"{title}", "| objective | n | " + " | ".join(RULES) + " |", "|---|---|" + "---|" * len(RULES)]
    for o, by in res.items():
        lines.append(f"| {o} | {by['n']} | " + " | ".join(f"{by[r]:+.2f}" for r in RULES) + " |")
    met = {r: sum(1 for by in res.values() if by[r] >= 0.6 - 1e-9) for r in RULES}
    lines.append(f"| ρ ≥ 0.6 | | " + " | ".join(f"{met[r]} of {len(res)}" for r in RULES) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--choose", nargs="+", default=CHOOSE, help="results files the rule is chosen on")
    ap.add_argument("--check", nargs="+", default=CHECK, help="results files it is checked on")
    ap.add_argument("--confirm", nargs="*", default=CONFIRM, help="fresh searches it is confirmed on (skipped until measured)")
    ap.add_argument("--out", default=str(RESULTS / "search_order_cpu.json"))
    args = ap.parse_args(argv)
    res = {"choose": evaluate(args.choose), "check": evaluate(args.check)}
    print(table("RankMe's searches (choose)", res["choose"]))
    print()
    print(table("theory-score searches (check)", res["check"]))
    confirm = [f for f in args.confirm if (RESULTS / f).is_file()]
    if confirm:
        res["confirm"] = evaluate(confirm)
        print()
        print(table("fresh searches, default score (confirm)", res["confirm"]))
    Path(args.out).write_text(json.dumps({"settings": vars(args), **res}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
