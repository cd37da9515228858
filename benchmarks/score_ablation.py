"""Should ``low_compression`` leave the default (``theory``) score? Stored data only, no training.

Reads the transfer benchmark's re-trained heads (``search_transfer.py``: 20 epochs, resnet18_w16,
CIFAR-10 10k, probes on the 10k test images, seed 0, each head once) of two head sets:

* ``rankme``: RankMe-scored searches (search_transfer22_cpu.json; 22p's BYOL / SimSiam replace 22's);
* ``theory``: searches scored with the default theory score (search_transfer22u_cpu.json,
  search_transfer22t_cpu.json).

Per objective and head set it reports

1. Spearman ρ of the recorded orbit compression and of the score's component
   ``low_compression = 1/(1 + compression)`` with the backbone kNN accuracy, and the sign (the
   component assumes lower compression is better, i.e. ρ(compression) < 0): the sign split
   re-checked on the RankMe searches' heads next to the theory searches' ones;
2. ρ with backbone kNN and linear-probe accuracy of the 4-component theory score the searches
   ran with (``UNRECORDED_WEIGHTS["theory"]``) and of the 3-component score without
   ``low_compression`` (:data:`~geohead.search.score.THEORY_WEIGHTS`, the default since), each head re-scored from its recorded criteria with
   :func:`~geohead.search.score.geometric_score` (weights passed explicitly; on the theory
   searches the 4-component re-score equals the recorded ``search.score``), and the count of
   objectives with ρ >= 0.6 for each;
3. the pick under each score: the search's rule (``geohead.search.outputs.best_trial``: the
   highest final score among the trials that completed, pruned trials are not candidates) applied
   to the heads in the file that completed, with their measured backbone accuracies, and whether
   dropping ``low_compression`` changes it.

Limits: a file holds a search's top-k heads only (k = 6, 8 for the first
Barlow Twins / SimCLR searches), ranked completed-first, so it surely holds every completed trial when its
last head was pruned (``holds_all_completed``); where it does not, a completed trial outside the file
could be the 3-component pick. A pick under a score the search did not use is counterfactual:
that score's own pruner would have completed other trials. A pruned head's criteria are the rung's
(117 steps), a completed head's the final step's. The two head sets share heads (same head spec,
re-trained separately; ``shared``), so the RankMe set is not an independent sample everywhere.

Run: ``python benchmarks/score_ablation.py`` (writes benchmarks/results/score_ablation_cpu.json)
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from criteria_transfer import heads, merge, rho
from geohead.search.score import THEORY_WEIGHTS, UNRECORDED_WEIGHTS, geometric_score, low_compression

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: Head sets: the files of each (a later file replaces an objective's runs in the earlier ones).
HEAD_SETS: dict[str, list[str]] = {
    "rankme": ["search_transfer22_cpu.json", "search_transfer22p_cpu.json"],
    "theory": ["search_transfer22u_cpu.json", "search_transfer22t_cpu.json"],
}
#: The scores compared: the default and the default without low_compression.
SCORES: dict[str, dict[str, float]] = {
    # the theory score these searches ran with, and the default since (without low_compression)
    "theory4": dict(UNRECORDED_WEIGHTS["theory"]),
    "theory3": dict(THEORY_WEIGHTS),
}
#: The backbone's feature width (resnet18_w16) where a run does not record it (criteria_transfer's default).
DIM = 128
GOAL = 0.6


def load(files: list[str]) -> dict[str, list[dict[str, Any]]]:
    """Objective -> the distinct re-trained heads at seed 0 (criteria_transfer's selection)."""
    return heads(merge([json.loads((RESULTS / f).read_text()) for f in files]))


def published(files: list[str]) -> dict[str, dict[str, float]]:
    """Objective -> the published head's seed-0 backbone accuracies (for context)."""
    res = merge([json.loads((RESULTS / f).read_text()) for f in files])
    return {r["objective"]: {"knn_backbone": r["knn_backbone"], "linear_backbone": r["linear_backbone"]}
            for r in res["runs"] if r["label"] == "published" and r["seed"] == 0}


def criteria(r: dict[str, Any]) -> dict[str, float]:
    """The inputs of :func:`geometric_score` rebuilt from a head's recorded search criteria."""
    s, d = r["search"], float(r.get("dim_backbone") or DIM)
    return {"rankme_backbone": s["rankme_backbone_frac"] * d, "dim_backbone": d, "heff_spread": s["score_conditioning"],
            "compression": s["compression"], "fisher_effective_rank": s["fisher_effective_rank"]}


def rescore(r: dict[str, Any], weights: dict[str, float]) -> float:
    return geometric_score(criteria(r), weights)


def completed(r: dict[str, Any]) -> bool:
    """Whether the head completed its search: a head pruned at the (only) rung keeps that rung's score."""
    return r["search"]["score"] != r["rung_score"]


def sign(x: float | None) -> str:
    return "?" if x is None else ("+" if x > 0 else "−" if x < 0 else "0")


def pick(rows: list[dict[str, Any]], values: list[float]) -> dict[str, Any]:
    """The search's rule: the highest value among the completed heads; ``margin``: its value over
    the runner-up's (another completed head), ``runner_up``: that head's trial."""
    done = sorted((k for k, r in enumerate(rows) if completed(r)), key=lambda k: -values[k])
    r = rows[done[0]]
    second = rows[done[1]]["trial"] if len(done) > 1 else None
    return {"trial": r["trial"], "value": values[done[0]], "knn_backbone": r["knn_backbone"],
            "linear_backbone": r["linear_backbone"], "runner_up": second,
            "margin": values[done[0]] - values[done[1]] if len(done) > 1 else None}


def shared(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> int:
    """Heads (by spec) present in both head sets of an objective."""
    key = lambda r: json.dumps(r["head"], sort_keys=True)  # noqa: E731
    return len({key(r) for r in a} & {key(r) for r in b})


def analyse(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """One objective's heads of one head set: compression's ρ, each score's ρ and pick."""
    comp = [r["search"]["compression"] for r in rows]
    out: dict[str, Any] = {
        "n": len(rows), "n_completed": sum(completed(r) for r in rows),
        "holds_all_completed": any(not completed(r) for r in rows),
        "rho_compression": rho(rows, comp), "rho_low_compression": rho(rows, [low_compression(c) for c in comp]),
        "search_pick": pick(rows, [r["search"]["score"] for r in rows]),
    }
    out["sign_compression"] = sign(out["rho_compression"])
    for name, w in SCORES.items():
        vals = [rescore(r, w) for r in rows]
        out[name] = {"rho_knn": rho(rows, vals), "rho_linear": rho(rows, vals, "linear_backbone"), "pick": pick(rows, vals)}
    out["pick_changes"] = out["theory3"]["pick"]["trial"] != out["theory4"]["pick"]["trial"]
    return out


def evaluate() -> dict[str, Any]:
    """Head set -> objective -> :func:`analyse`'s fields, the published head's and ``shared``; plus ``summary``."""
    sets = {name: load(files) for name, files in HEAD_SETS.items()}
    res: dict[str, Any] = {}
    for name, by_obj in sets.items():
        pub = published(HEAD_SETS[name])
        res[name] = {o: {**analyse(rows), "published": pub.get(o)} for o, rows in sorted(by_obj.items())}
        for o in res[name]:
            res[name][o]["shared"] = shared(sets["rankme"][o], sets["theory"][o]) if o in sets["rankme"] and o in sets["theory"] else 0
    res["summary"] = {name: summary(by) for name, by in list(res.items())}
    return res


def summary(by: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Sign split and ρ >= 0.6 counts over the objectives of one head set."""
    out = {"compression_negative": sum(v["sign_compression"] == "−" for v in by.values()),
           "compression_positive": sum(v["sign_compression"] == "+" for v in by.values()),
           "objectives": len(by), "picks_changed": [o for o, v in by.items() if v["pick_changes"]]}
    for name in SCORES:
        for t in ("knn", "linear"):
            out[f"{name}_rho_{t}_ge_{GOAL}"] = sum((v[name][f"rho_{t}"] or -1) >= GOAL - 1e-9 for v in by.values())
            out[f"{name}_mean_rho_{t}"] = sum(v[name][f"rho_{t}"] or 0.0 for v in by.values()) / len(by)
    return out


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:+.2f}"


def _acc(r: dict[str, Any] | None) -> str:
    return "-" if r is None else f"{r['knn_backbone']:.3f}/{r['linear_backbone']:.3f}"


def _p(p: dict[str, Any]) -> str:
    return f"#{p['trial']} {_acc(p)}"


def table(res: dict[str, Any]) -> str:
    lines = ["| heads | objective | n (done, shared) | ρ compression (sign) | ρ low_comp | ρ kNN 4 | ρ kNN 3 | ρ lin 4 | ρ lin 3 |"
             " pick 4: kNN/lin | pick 3: kNN/lin | published kNN/lin |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name in HEAD_SETS:
        for o, v in res[name].items():
            a, b, pub = v["theory4"], v["theory3"], v["published"]
            p3 = _p(b["pick"]) if v["pick_changes"] else "same"
            done = f"{v['n_completed']}{'' if v['holds_all_completed'] else '+?'}"
            lines.append(f"| {name} | {o} | {v['n']} ({done}, {v['shared']}) | {_f(v['rho_compression'])} ({v['sign_compression']}) | "
                         f"{_f(v['rho_low_compression'])} | {_f(a['rho_knn'])} | {_f(b['rho_knn'])} | {_f(a['rho_linear'])} | "
                         f"{_f(b['rho_linear'])} | {_p(a['pick'])} | {p3} | "
                         f"{_acc(pub)} |")
    lines.append("")
    lines.append(f"| heads | compression ρ < 0 / > 0 | ρ kNN ≥ {GOAL}: 4 / 3 | ρ lin ≥ {GOAL}: 4 / 3 | mean ρ kNN: 4 / 3 | "
                 "mean ρ lin: 4 / 3 | picks changed |")
    lines.append("|---|---|---|---|---|---|---|")
    for name in HEAD_SETS:
        s = res["summary"][name]
        lines.append(f"| {name} | {s['compression_negative']} / {s['compression_positive']} | "
                     f"{s[f'theory4_rho_knn_ge_{GOAL}']} / {s[f'theory3_rho_knn_ge_{GOAL}']} of {s['objectives']} | "
                     f"{s[f'theory4_rho_linear_ge_{GOAL}']} / {s[f'theory3_rho_linear_ge_{GOAL}']} of {s['objectives']} | "
                     f"{s['theory4_mean_rho_knn']:+.2f} / {s['theory3_mean_rho_knn']:+.2f} | "
                     f"{s['theory4_mean_rho_linear']:+.2f} / {s['theory3_mean_rho_linear']:+.2f} | "
                     f"{', '.join(s['picks_changed']) or 'none'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=str(RESULTS / "score_ablation_cpu.json"))
    args = ap.parse_args(argv)
    res = evaluate()
    print(table(res))
    print("\n4 = RankMe + conditioning + low_compression + Fisher erank (the score these searches ran with); 3 = without low_compression (the default now). "
          "n (done, shared): heads, how many completed the search (+? where the file may miss completed trials), "
          "heads shared with the other head set. Picks: trial, seed-0 backbone kNN / linear; 'same' = unchanged.")
    Path(args.out).write_text(json.dumps({"files": HEAD_SETS, "scores": SCORES, **res}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
