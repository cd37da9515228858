"""Does the search's pick still win at the budget users train for? (issue 22, item 2)

The heads of the 20-epoch transfer benchmark (``search_transfer.py``, its results file
``benchmarks/results/search_transfer_cpu.json`` by default) re-trained for ``--epochs`` (100) with
exactly that benchmark's training settings (resnet18_w16, CIFAR-10 10k train -> 10k test, the
search's optimiser, views and warm-up fraction; one cosine schedule over the longer run):

* ``found`` and ``published`` (the method's preset with ReLU at the CPU recipe's widths), every
  ``--seeds``;
* ``preset_silu`` and ``best_deep`` (the best-scored completed head of depth >= 2) at the first seed.

Runs go one at a time, most important first (found/published at seed 0 per objective, then seed 1,
then the rest). Each run checkpoints ten times and resumes from its last checkpoint when killed;
a finished run is never trained again (its record in ``--results`` is enough, so the plan spans
sittings whose run folders are gone). After every run the results are written to
``OUT/results.json`` and ``--results`` (``runs``: objective, label, seed, epochs, knn_backbone,
linear_backbone, desc, ...), and the plot of accuracy against epochs (20 from the transfer
results -> 100) to ``--plot``. ``--time-budget`` starts no run after that many seconds.

A 100-epoch run takes about 15 min (Barlow Twins) / 9 min (SimCLR) on 2 idle cores.

Run: ``python benchmarks/search_budget.py`` (measured: docs/results.md, "At 100 epochs")
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_transfer as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
LABELS = ("found", "published", "preset_silu", "best_deep")


def heads(transfer: dict[str, Any], objectives: list[str]) -> dict[tuple[str, str], dict[str, Any]]:
    """(objective, label) -> the transfer benchmark's run record of that head (seed 0)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in transfer["runs"]:
        if r["objective"] in objectives and r["label"] in LABELS:
            out.setdefault((r["objective"], r["label"]), r)
    return out


def plan(objectives: list[str], seeds: list[int], labels: tuple[str, ...] = LABELS) -> list[tuple[str, str, int]]:
    """(objective, label, seed) of the heads in ``labels``, most important first."""
    runs = [(o, lab, seeds[0]) for o in objectives for lab in ("found", "published")]
    runs += [(o, lab, s) for s in seeds[1:] for o in objectives for lab in ("found", "published")]
    runs += [(o, lab, seeds[0]) for o in objectives for lab in ("preset_silu", "best_deep")]
    return [r for r in runs if r[1] in labels]


def plot(runs: list[dict[str, Any]], transfer: dict[str, Any], path: Path) -> None:
    """Backbone linear probe and kNN against epochs, one line per (objective, head): the mean over
    the seeds measured at the long budget, at every budget (like against like)."""
    from geohead.plotting import agg_figure

    seeds: dict[tuple[str, str], set[int]] = {}
    for r in runs:
        seeds.setdefault((r["objective"], r["label"]), set()).add(r["seed"])
    points: dict[tuple[str, str], dict[int, list[tuple[float, float]]]] = {}
    for r in transfer["runs"] + runs:
        if r["label"] not in LABELS or r["seed"] not in seeds.get((r["objective"], r["label"]), ()):
            continue
        ep = r.get("epochs", transfer["settings"]["epochs"])
        points.setdefault((r["objective"], r["label"]), {}).setdefault(ep, []).append(
            (r["linear_backbone"], r["knn_backbone"]))
    objectives = sorted({o for o, _ in points})
    fig = agg_figure(5.0 * len(objectives), 3.6)
    for i, o in enumerate(objectives):
        ax = fig.add_subplot(1, len(objectives), i + 1)
        for (obj, lab), by_ep in sorted(points.items()):
            if obj != o:
                continue
            eps = sorted(by_ep)
            lin = [sum(p[0] for p in by_ep[e]) / len(by_ep[e]) for e in eps]
            n = ",".join(str(x) for x in sorted(seeds[(obj, lab)]))
            line, = ax.plot(eps, lin, marker="o", label=f"{lab} (linear, seed {n})")
            knn = [sum(p[1] for p in by_ep[e]) / len(by_ep[e]) for e in eps]
            ax.plot(eps, knn, marker="x", ls="--", color=line.get_color(), label=f"{lab} (kNN)")
        ax.set(title=o, xlabel="epochs", ylabel="backbone accuracy (CIFAR-10 test)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transfer", default=str(RESULTS / "search_transfer_cpu.json"))
    ap.add_argument("--objective", nargs="+", default=["barlow", "simclr"])
    ap.add_argument("--epochs", type=int, default=100)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--data-dir", default=str(st.SHARED))
    ap.add_argument("--n-train", type=int, default=None, help="training images (default all 10k)")
    ap.add_argument("--n-test", type=int, default=None, help="test images (default all 10k)")
    ap.add_argument("--labels", nargs="+", choices=LABELS, default=list(LABELS), help="train only these heads")
    ap.add_argument("--time-budget", type=float, default=None, help="start no run after this many seconds")
    ap.add_argument("--out", default="runs/search_budget")
    ap.add_argument("--results", default=str(RESULTS / "search_budget_cpu.json"))
    ap.add_argument("--plot", default=str(ROOT / "docs" / "search_budget.png"))
    args = ap.parse_args(argv)
    data = st.cifar_files(args.data_dir)
    if not all(Path(p).is_file() for p in data.values()):
        print(f"error: {args.data_dir} lacks cifar10_train_10k.npz / cifar10_test.npz", file=sys.stderr)
        return 2
    transfer = json.loads(Path(args.transfer).read_text())
    by_head = heads(transfer, args.objective)
    out = Path(args.out)
    t0 = time.perf_counter()
    runs: list[dict[str, Any]] = []
    prior = {(r["objective"], r["label"], r["seed"]): r for r in _prior(args.results, args.epochs)}
    todo = plan(args.objective, args.seeds, tuple(args.labels))
    runs += [r for key, r in prior.items() if key not in set(todo)]  # kept in the results file as they are
    stopped = None
    for objective, label, seed in todo:
        src = by_head.get((objective, label))
        if src is None:
            continue
        if (objective, label, seed) in prior:  # measured in an earlier sitting (its run folder may be gone)
            runs.append(prior[(objective, label, seed)])
            continue
        done = out / objective / f"{label}_s{seed}" / "transfer.json"
        if not done.is_file() and args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
            stopped = f"time budget of {args.time_budget:.0f} s spent before {objective} {label} seed {seed}"
            break
        cfg = st.train_config(objective, data, seed, args.epochs, args.n_train, args.n_test, src["head"],
                              done.parent, None, checkpoints=10)
        print(f"[{objective}] {label} seed {seed}: {src['desc']} ({args.epochs} epochs)", flush=True)
        rec = st.train_one(cfg)
        runs.append({"objective": objective, "label": label, "seed": seed, "epochs": args.epochs,
                     "knn_backbone": rec["knn_backbone"], "linear_backbone": rec["linear_backbone"],
                     "knn_head": rec["knn_head"], "linear_head": rec["linear_head"], "steps": rec["steps"],
                     "wall_s": rec["wall_s"], "desc": src["desc"], "head": src["head"], "trial": src.get("trial")})
        print(f"[{objective}] {label} seed {seed}: backbone kNN {rec['knn_backbone']:.3f}, "
              f"linear {rec['linear_backbone']:.3f} in {rec['wall_s']:.0f} s", flush=True)
        write(args, runs, transfer, stopped, time.perf_counter() - t0)
    write(args, runs, transfer, stopped, time.perf_counter() - t0)
    if stopped:
        print(f"stopped: {stopped}")
    return 0


def _prior(path: str, epochs: int) -> list[dict[str, Any]]:
    """The finished runs of ``epochs`` epochs in the results file ``path`` (none when absent)."""
    if not Path(path).is_file():
        return []
    return [r for r in json.loads(Path(path).read_text()).get("runs", []) if r.get("epochs") == epochs]


def write(args: argparse.Namespace, runs: list[dict[str, Any]], transfer: dict[str, Any], stopped: str | None,
          wall: float) -> None:
    from geohead.io import atomic_write_text

    rec = {"settings": vars(args), "transfer_settings": transfer["settings"], "wall_s": wall, "stopped": stopped,
           "runs": runs}
    text = json.dumps(rec, indent=2, default=str) + "\n"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out) / "results.json", text)
    atomic_write_text(Path(args.results), text)
    if runs:
        plot(runs, transfer, Path(args.plot))


if __name__ == "__main__":
    sys.exit(main())
