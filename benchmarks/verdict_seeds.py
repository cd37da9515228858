"""Which noise model lets the search's verdict tell a better head from a worse one? (issue 22, item 3)

The verdict (:mod:`geohead.search.verdict`) re-trains the search's pick and the published head at
fresh seeds and recommends the pick when its margin exceeds two noise units. Measured against
20-epoch backbones, the first noise model (the spread of one head's value across seeds) was wrong
on DINO: the pick trained a +2.8-point better backbone, but the seed-to-seed swing of the score,
shared by both heads at a seed, hid a margin that was the same at every seed.

For each finished search folder (``LABEL=FOLDER``) this benchmark

1. re-runs the verdict at ``--confirm-seeds`` fresh seeds (``run_search`` on the folder's own
   settings: the study already holds its heads, so no trial is trained again, and confirmation
   runs stored by earlier verdicts are reused; each new one is ``max_steps`` of training);
2. reports, per seed, the pick's and the published head's value (the search's score) and backbone
   kNN, and their paired differences;
3. decides with each model, at the first fresh seed (what a default search does) and at all of
   them, and on the later seeds alone (seeds the models were not designed on):
   * ``pooled`` (the baseline, the first verdict): the score's margin against σ = the spread of
     one head's value across seeds, pooled over both heads; noise = σ·sqrt(2/n);
   * ``paired_score``: the score's margin against the spread of the per-seed difference;
   * ``paired_knn``: the same with the backbone's kNN accuracy;
   * ``verdict``: what :func:`geohead.search.verdict.decide` does now (the kNN margin beyond the
     noise, or the score's beyond it and the kNN's not negative; the table shows the kNN margin);
4. compares each decision with the truth: the 20-epoch linear-probe difference, found minus
   published, mean of seeds 0 and 1, from the ``search_transfer`` results named in the case
   (``LABEL=FOLDER=RESULTS_JSON``).

Run: ``python benchmarks/verdict_seeds.py --confirm-seeds 3 --case dino=runs/search_transfer22b/dino/search ...``
(measured: docs/results.md, "The verdict's noise, measured"; results:
benchmarks/results/verdict_seeds_cpu.json).
``--report-only`` re-reads the stored confirmation runs without training.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

def rerun_verdict(folder: Path, confirm_seeds: int) -> None:
    """The search in ``folder`` resumed with ``confirm_seeds``: no new trial (its target is
    reached), the verdict's missing confirmation runs trained, search.json rewritten."""
    import dataclasses

    from geohead.search import SearchConfig, run_search

    summary = json.loads((folder / "search.json").read_text())
    fields = {f.name for f in dataclasses.fields(SearchConfig)}
    s = {k: v for k, v in summary["settings"].items() if k in fields}  # search.json also records derived values
    cfg = SearchConfig(**{**s, "fix": tuple(s["fix"]), "ranges": tuple(s["ranges"]), "overrides": tuple(s["overrides"]),
                          "families": tuple(s["families"])}, out=str(folder), trials=summary["trials"]["done"],
                       timeout=None, progress=False, confirm_seeds=confirm_seeds).validate()
    run_search(cfg, echo=lambda line: print(f"[{folder}] {line}", flush=True))


def measured(folder: Path) -> dict[str, dict[str, dict[int, float]]]:
    """{"value"|"knn": {"pick"|"published": {seed: x}}} from search.json (the study's seed) and
    the stored confirmation runs."""
    summary = json.loads((folder / "search.json").read_text())
    v = summary["verdict"]
    out: dict[str, dict[str, dict[int, float]]] = {"value": {}, "knn": {}}
    for key in ("values", "knn"):
        for label, by in v[key].items():
            out["value" if key == "values" else "knn"][label] = {int(s): x for s, x in by.items()}
    for path in sorted((folder / "confirm").glob("*_s*/result.json")):
        label, seed = path.parent.name.rsplit("_s", 1)
        rec = json.loads(path.read_text())
        out["value"].setdefault(label, {})[int(seed)] = rec["value"]
        out["knn"].setdefault(label, {})[int(seed)] = rec.get("knn_backbone")
    return out


def pooled(values: dict[str, dict[int, float]], fresh: list[int]) -> tuple[float, float]:
    """The baseline model: (margin, noise) with σ the pooled spread of one head across seeds."""
    m = sum(values["pick"][s] - values["published"][s] for s in fresh) / len(fresh)
    ss, df = 0.0, 0
    for by in values.values():
        xs = list(by.values())
        mu = sum(xs) / len(xs)
        ss += sum((x - mu) ** 2 for x in xs)
        df += len(xs) - 1
    return m, math.sqrt(ss / df) * math.sqrt(2.0 / len(fresh))


MODELS = ("pooled", "paired_score", "paired_knn", "verdict")


def decisions(values: dict[str, dict[int, float]], knn: dict[str, dict[int, float]], study_seed: int,
              fresh: list[int]) -> dict[str, Any]:
    """Each model's decision with the fresh seeds ``fresh`` (and the study's seed for σ)."""
    from geohead.search.verdict import NOISE_UNITS, decide

    sub = {k: {s: by[s] for s in [study_seed, *fresh]} for k, by in values.items()}
    sub_knn = {k: {s: by.get(s) for s in [study_seed, *fresh]} for k, by in knn.items()}
    m0, n0 = pooled(sub, fresh)
    d = decide(sub, study_seed, sub_knn)
    out: dict[str, Any] = {"seeds": fresh, "pooled": {"margin": m0, "noise": n0, "pick": m0 > NOISE_UNITS * n0},
                           "paired_score": {"margin": d.score.margin, "noise": d.score.noise,
                                            "pick": d.score.beyond_noise}}
    if d.knn is not None:
        out["paired_knn"] = {"margin": d.knn.margin, "noise": d.knn.noise, "pick": d.knn.beyond_noise}
    out["verdict"] = {"basis": d.basis, "margin": (d.knn or d.score).margin, "noise": (d.knn or d.score).noise,
                      "pick": d.pick}
    return out


def truth(path: Path | None) -> dict[str, float]:
    """objective -> found - published linear-probe points (mean of the paired seeds)."""
    if path is None or not path.is_file():
        return {}
    return {s["objective"]: s["found_minus_published_linear_points"] for s in json.loads(path.read_text())["summaries"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--case", nargs="+", required=True, help="LABEL=SEARCH_FOLDER[=TRUTH_JSON]")
    ap.add_argument("--confirm-seeds", type=int, default=3)
    ap.add_argument("--report-only", action="store_true", help="no training: report the stored runs")
    ap.add_argument("--measure-only", action="store_true", help="train the missing runs, report nothing")
    ap.add_argument("--results", default=None, help="write the results JSON here")
    args = ap.parse_args(argv)
    rows = []
    for case in args.case:
        label, folder, *rest = case.split("=")
        folder = Path(folder)
        if not args.report_only:
            rerun_verdict(folder, args.confirm_seeds)
        if args.measure_only:
            continue
        rows.append(report_case(label, folder, Path(rest[0]) if rest else None))
        if args.results:
            Path(args.results).write_text(json.dumps({"confirm_seeds": args.confirm_seeds, "cases": rows}, indent=2)
                                          + "\n")
    if rows:
        print(table(rows))
    return 0


def report_case(label: str, folder: Path, truth_path: Path | None) -> dict[str, Any]:
    summary = json.loads((folder / "search.json").read_text())
    study_seed = summary["settings"]["seed"]
    m = measured(folder)
    seeds = sorted(s for s in m["value"]["pick"] if s != study_seed and s in m["value"]["published"])
    row: dict[str, Any] = {"case": label, "folder": str(folder), "objective": summary["objective"],
                           "score": summary["settings"]["score"], "values": m["value"], "knn": m["knn"],
                           "truth_linear_points": truth(truth_path).get(summary["objective"])}
    row["first_seed"] = decisions(m["value"], m["knn"], study_seed, seeds[:1])
    if len(seeds) > 1:  # with one fresh seed "all" is the first: decided (and counted) once
        row["all_seeds"] = decisions(m["value"], m["knn"], study_seed, seeds)
        row["later_seeds"] = decisions(m["value"], m["knn"], study_seed, seeds[1:])
    return row


SETS = ("first_seed", "all_seeds", "later_seeds")


def right(pick: bool, truth: float | None) -> bool | None:
    """Whether a decision is right by the 20-epoch truth: the pick where it is >= 1 point better,
    the published head where the pick is >= 0.3 points worse; None (either is fine) between."""
    if truth is None or -0.3 < truth < 1.0:
        return None
    return pick == (truth >= 1.0)


def table(rows: list[dict[str, Any]]) -> str:
    """One line per case: the truth, then per model its decisions at the first fresh seed, at all
    fresh seeds and at the later seeds alone; the last line counts the right decisions."""
    lines = ["| case | 20-epoch truth (points) | " + " | ".join(MODELS) + " |", "|" + "---|" * (2 + len(MODELS))]
    tally = {m: [0, 0] for m in MODELS}
    for r in rows:
        t = r["truth_linear_points"]
        cells = []
        for m in MODELS:
            got = [r[k][m]["pick"] for k in SETS if k in r and m in r[k]]
            for pick in got:
                ok = right(pick, t)
                if ok is not None:
                    tally[m][0] += ok
                    tally[m][1] += 1
            cells.append(" · ".join("pick" if p else "pub" for p in got) or "-")
        lines.append(f"| {r['case']} | {'-' if t is None else f'{t:+.1f}'} | " + " | ".join(cells) + " |")
    lines.append("| right (decisive cases) | | " + " | ".join(f"{a}/{n}" for a, n in tally.values()) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
