"""Does the escape constraint help where Thm 4.1's premise holds? (issue 22, item 1: DINO)

The search's escape constraint prunes a head that has no negative curvature at the collapsed
state, and is on only where the premise holds (of the six objectives, DINO in the search's own
setting). This benchmark runs the same search as ``benchmarks/search_transfer.py --scale cpu
--search-trials 9`` with the constraint off (``--no-escape``), on the same data and seed, and
compares it with that benchmark's search (constraint on):

* the pick (best_head / pick_head) of each search, and the trials the constraint pruned;
* where the picks differ, the constraint-off pick re-trained 20 epochs at seeds 0 and 1 with the
  transfer benchmark's recipe, against the constraint-on pick's runs in its results file;
* with ``--screened``, also the heads the constraint pruned that completed the constraint-off
  search, re-trained at the first seed: did the constraint throw away a better head?

Run: ``python benchmarks/escape_ablation.py --transfer runs/search_transfer22b --results
benchmarks/results/search_transfer22_cpu.json`` (after search_transfer has measured DINO);
writes ``benchmarks/results/escape_ablation_cpu.json`` and prints a table.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import search_transfer as st  # noqa: E402  (the transfer benchmark's search, recipe and runs)
from geohead.heads import HeadSpec  # noqa: E402
from geohead.search.results import read_trials_csv  # noqa: E402


def _search_summary(folder: Path) -> dict[str, Any]:
    """Pick, verdict and the trials the screen pruned, from a search's outputs."""
    summary = json.loads((folder / "search.json").read_text())
    pick = json.loads((folder / "pick_head.json").read_text())
    rows = read_trials_csv(folder / "trials.csv")
    screened = [r["number"] for r in rows if str(r.get("pruned_by") or "").startswith("screen")]
    return {"folder": str(folder), "pick": pick, "pick_trial": summary["best"]["number"],
            "verdict": summary.get("verdict"), "escape_criterion": summary.get("escape_criterion"),
            "pruned_by_screen": screened, "trials": summary.get("trials")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--objective", default="dino")
    ap.add_argument("--transfer", default="runs/search_transfer22b", help="search_transfer's --out (constraint on)")
    ap.add_argument("--results", default="benchmarks/results/search_transfer22_cpu.json",
                    help="search_transfer's results file (the constraint-on runs)")
    ap.add_argument("--search-trials", type=int, default=9)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--epochs", type=int, default=20)
    ap.add_argument("--data-dir", default=str(st.SHARED))
    ap.add_argument("--out", default="runs/escape_ablation")
    ap.add_argument("--save", default="benchmarks/results/escape_ablation_cpu.json")
    ap.add_argument("--screened", action="store_true",
                    help="also re-train (first seed) the heads the constraint pruned that completed without it")
    args = ap.parse_args(argv)
    data = st.cifar_files(args.data_dir)
    on_folder = Path(args.transfer) / args.objective / "search"
    if not (on_folder / "search.json").is_file():
        print(f"error: {on_folder} holds no finished search; run search_transfer.py for {args.objective} first",
              file=sys.stderr)
        return 2
    off_folder = st.run_the_search(args.objective, Path(args.out), data, args.seeds[0], st.SCALES["cpu"], None, None,
                                   args.search_trials, escape=False)
    on, off = _search_summary(on_folder), _search_summary(off_folder)
    results = json.loads(Path(args.results).read_text())
    on_runs = [r for r in results["runs"] if r["objective"] == args.objective and r["label"] in ("found", "published")]
    runs = []
    todo = [("found_no_escape", off["pick"], seed) for seed in args.seeds] if off["pick"] != on["pick"] else []
    if args.screened:  # the heads the constraint pruned that completed without it, at the first seed
        done = {r["number"] for r in read_trials_csv(off_folder / "trials.csv") if r["state"] == "COMPLETE"}
        todo += [(f"screened_trial_{n}", st.head_of_trial(off_folder, n), args.seeds[0])
                 for n in on["pruned_by_screen"] if n in done]
    for label, head, seed in todo:
        cfg = st.train_config(args.objective, data, seed, args.epochs, None, None, st.run_head(HeadSpec.from_dict(head)),
                              Path(args.out) / args.objective / "runs" / f"{label}_s{seed}", None)
        runs.append({"label": label, "seed": seed, **st.train_one(cfg)})
        _save(args, on, off, on_runs, runs)
    _save(args, on, off, on_runs, runs)
    return 0


def _save(args: argparse.Namespace, on: dict[str, Any], off: dict[str, Any], on_runs: list[dict[str, Any]],
          runs: list[dict[str, Any]]) -> None:
    from geohead.io import atomic_write_text

    keep = ("label", "seed", "desc", "knn_backbone", "linear_backbone")
    rec = {"objective": args.objective, "epochs": args.epochs, "escape_on": on, "escape_off": off,
           "same_pick": on["pick"] == off["pick"], "runs_escape_on": [{k: r.get(k) for k in keep} for r in on_runs],
           "runs_escape_off": runs}
    atomic_write_text(Path(args.save), json.dumps(rec, indent=2, default=str) + "\n")
    print(f"constraint on:  pick trial {on['pick_trial']}, screen pruned {on['pruned_by_screen']}")
    print(f"constraint off: pick trial {off['pick_trial']}, screen pruned {off['pruned_by_screen']}")
    print("same pick" if rec["same_pick"] else "the picks differ")
    for r in rec["runs_escape_on"] + runs:
        print(f"  {r['label']:16s} seed {r['seed']}: kNN {r['knn_backbone']:.3f} linear {r['linear_backbone']:.3f}")


if __name__ == "__main__":
    sys.exit(main())
