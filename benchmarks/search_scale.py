"""Search small, train big: does the search's pick keep its margin at the width, data and epochs
users train with? (the scale ladder)

The pick of the default (theory-score) search on the cheap proxy (resnet18_w16, d = 128, CIFAR-10
10k, 20 epochs; its record in ``--transfer``, benchmarks/results/search_transfer22u_cpu.json)
against the method's published head (ReLU preset at the CPU recipe's widths), trained with the
search's own settings (search_transfer.train_config) along one axis at a time:

* ``width_w32``: resnet18_w32 (d = 256), 20 epochs, 10k images;
* ``width_full``: the full-width ResNet-18 with the CIFAR stem (d = 512), 20 epochs, 10k images;
* ``data_40k``: resnet18_w16 on 40k images (../shared/data's 10k + the three 10k extensions), 20 epochs;
* ``budget_300``: resnet18_w16, 10k images, 300 epochs;
* ``search_w32``: a search run directly on resnet18_w32 (same budget: ``--search-trials`` heads);
  its pick trained as on ``width_w32`` (does searching at the real width pick differently?);
* ``search_40k``: a search run directly on the 40k images (same budget in steps, so about the
  proxy search's cost); its pick trained as on ``data_40k`` (does searching on all the data pick
  a head that keeps its margin there?).

Both heads move to a wider backbone by one rule, :meth:`HeadSpec.rescale`: hidden and output
widths stay the same multiples of d (``linear 128->512`` becomes ``linear 512->2048``; the
published Barlow Twins head 512-512-512 on d = 128 becomes 2048-2048-2048 on d = 512), the rule
``geohead train --head`` applies. Probes: backbone kNN (k=20) and linear probe on the 10k test images.

Runs go one at a time, cheapest informative ones first (``--axes`` order, then seed); each
checkpoints and resumes, a finished run is never trained again (its record in ``--results`` is
enough), and after every run ``--results`` (``runs``: objective, axis, label, seed, epochs,
backbone, d, n_train, knn_backbone, linear_backbone, desc, ...) and ``--plot`` (margin, pick minus
published, against each axis, with the 20-epoch w16 baseline and the 100-epoch runs of
search_budget beside it) are written. ``--time-budget`` starts no run after that many seconds.

With ``--criteria`` each run also records what a verdict on its backbone compares (the theory
score and backbone kNN on the search's probe split, benchmarks/run_criteria.py); where two or more
seeds of an axis have both heads measured so, ``verdicts`` in ``--results`` and the table give
the decision the search's verdict (``--confirm-backbone``, ``--confirm-epochs``) would reach on
those runs, beside the test set's linear margin: does the verdict catch a margin that turns?

``--device cuda``: the GPU version: the width axis at full width for 100 epochs (pick vs
published, seed 0) in bf16 with the views made on the GPU (about 2 min a run on one H200 at the
9,000 img/s device_check measured); its results go to search_scale_cuda.json.

Run: ``python benchmarks/search_scale.py`` (measured: docs/search.md, "Search small, train big")
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import search_transfer as st  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
BASE_BACKBONE, BASE_D = "resnet18_w16", 128
#: axis -> (backbone, epochs, training images); the proxy is (resnet18_w16, 20, "10k")
AXES: dict[str, tuple[str, int, str]] = {
    "width_w32": ("resnet18_w32", 20, "10k"), "search_w32": ("resnet18_w32", 20, "10k"),
    "data_40k": (BASE_BACKBONE, 20, "40k"), "width_full": ("resnet18_cifar", 20, "10k"),
    "budget_300": (BASE_BACKBONE, 300, "10k"), "search_40k": (BASE_BACKBONE, 20, "40k"),
}
#: search axis -> the axis whose published-head runs its pick is compared with
SEARCHES = {"search_w32": "width_w32", "search_40k": "data_40k"}
DIMS = {"resnet18_w16": 128, "resnet18_w32": 256, "resnet18_cifar": 512}
TRAIN_FILES = {"10k": ["cifar10_train_10k.npz"],
               "40k": ["cifar10_train_10k.npz", "cifar10_train_ext_a.npz", "cifar10_train_ext_b.npz",
                       "cifar10_train_ext_c.npz"]}


def joined_train(data_dir: Path, which: str) -> str:
    """The training .npz of ``which``: the 10k file itself, or the 40k join written once to the
    temp folder (the shared files are read, never copied into the project)."""
    files = [data_dir / f for f in TRAIN_FILES[which]]
    if len(files) == 1:
        return str(files[0])
    import numpy as np

    path = Path(tempfile.gettempdir()) / "geohead_search_scale_cifar10_train_40k.npz"
    if not path.is_file():
        parts = [np.load(f, allow_pickle=False) for f in files]
        tmp = path.with_suffix(".part.npz")
        np.savez(tmp, images=np.concatenate([p["images"] for p in parts]),
                 labels=np.concatenate([p["labels"] for p in parts]), classes=parts[0]["classes"])
        tmp.replace(path)
    return str(path)


def heads(transfer: dict[str, Any], objective: str) -> dict[str, dict[str, Any]]:
    """label -> the proxy's run record (seed 0) of ``found`` and ``published``."""
    out: dict[str, dict[str, Any]] = {}
    for r in transfer["runs"]:
        if r["objective"] == objective and r["label"] in ("found", "published"):
            out.setdefault(r["label"], r)
    return out


def scaled_head(objective: str, head: dict[str, Any], d: int) -> tuple[dict[str, Any], str]:
    """A run's ``head`` (train_config's) and description, rescaled from d = 128 to ``d``."""
    from geohead.heads import HeadSpec, preset_spec

    if "preset" in head:
        spec = preset_spec(head["preset"], BASE_D, smooth=head["smooth"], **head["spec"]).rescale(d)
        widths = {"hidden_dim": spec.hidden_dim, "out_dim": spec.out_dim}
        return {**head, "spec": widths}, f"{objective} preset, {spec.activation}, {spec.describe()}"
    spec = HeadSpec(in_dim=BASE_D, **head["spec"]).rescale(d)
    return st.run_head(spec), spec.describe()


def search_pick(objective: str, args: argparse.Namespace, axis: str, data: dict[str, str]) -> tuple[dict[str, Any], str]:
    """The ``head`` and description of the pick of a search run directly on the search axis's
    backbone and training data (seed 0, run once, then reused)."""
    from geohead.heads import HeadSpec

    folder = st.run_the_search(objective, Path(args.out) / axis, data, 0, st.SCALES["cpu"], None,
                               AXES[axis][0], trials=args.search_trials, score="theory")
    spec = HeadSpec.load(folder / "best_head.json")
    return st.run_head(spec), spec.describe()


def plan(args: argparse.Namespace) -> list[tuple[str, str, str, int]]:
    """(axis, objective, label, seed): axis by axis in ``--axes`` order, seed by seed within one."""
    return [(a, o, lab, s) for a in args.axes for s in args.seeds for o in args.objective
            for lab in (["found"] if a in SEARCHES else ["found", "published"])]


def run_config(args: argparse.Namespace, axis: str, objective: str, label: str, seed: int,
               transfer: dict[str, Any]) -> tuple[Any, dict[str, Any], str]:
    """The TrainConfig of one ladder point (the search's settings, the axis's backbone, epochs and
    data, the head rescaled to its d; bf16 on a GPU), its ``head`` and the head's description."""
    backbone, epochs, which = AXES[axis]
    data = {"train": joined_train(Path(args.data_dir), which), "test": str(Path(args.data_dir) / "cifar10_test.npz")}
    if axis in SEARCHES:
        head, desc = search_pick(objective, args, axis, data)
    else:
        head, desc = scaled_head(objective, heads(transfer, objective)[label]["head"], DIMS[backbone])
    folder = Path(args.out) / axis / objective / f"{label}_s{seed}"
    cfg = st.train_config(objective, data, seed, args.epochs or epochs, None, args.n_test, head, folder, backbone,
                          checkpoints=10)
    if args.device != "cpu":
        cfg = dataclasses.replace(cfg, device=args.device, precision="bf16")
    return cfg, head, desc


def train_run(args: argparse.Namespace, axis: str, objective: str, label: str, seed: int,
              transfer: dict[str, Any], done: list[dict[str, Any]]) -> dict[str, Any]:
    """Train one ladder point (or read its finished run folder) and return its record; a point
    whose head, backbone, data, epochs, seed and device equal a run in ``done`` (a search axis
    that picked the proxy's head) takes that run's record, as training it again reproduces it
    (the w32 search's pick, trained again, gave the width_w32 run's probes to the 4th decimal)."""
    backbone, epochs, which = AXES[axis]
    epochs = args.epochs or epochs
    d = DIMS[backbone]
    cfg, head, desc = run_config(args, axis, objective, label, seed, transfer)
    n_train = 10_000 * len(TRAIN_FILES[which])
    twin = next((r for r in done if r["objective"] == objective and r["head"] == head and r["backbone"] == backbone
                 and r["n_train"] == n_train and r["epochs"] == epochs and r["seed"] == seed
                 and r["device"] == args.device and "same_run_as" not in r), None)
    if twin is not None:
        print(f"[{axis}] {objective} {label} seed {seed}: {desc}: the same run as {twin['axis']} {twin['label']} "
              f"(kNN {twin['knn_backbone']:.3f}, linear {twin['linear_backbone']:.3f}), not trained again", flush=True)
        return dict(twin, axis=axis, label=label, desc=desc, same_run_as=f"{twin['axis']} {twin['label']} seed {seed}")
    print(f"[{axis}] {objective} {label} seed {seed}: {desc} ({backbone}, {epochs} epochs, {which})", flush=True)
    rec = st.train_one(cfg, keep=args.criteria is not None)
    print(f"[{axis}] {objective} {label} seed {seed}: backbone kNN {rec['knn_backbone']:.3f}, "
          f"linear {rec['linear_backbone']:.3f} in {rec['wall_s']:.0f} s", flush=True)
    out = {"objective": objective, "axis": axis, "label": label, "seed": seed, "epochs": epochs,
           "backbone": backbone, "d": d, "n_train": n_train, "device": args.device,
           "knn_backbone": rec["knn_backbone"], "linear_backbone": rec["linear_backbone"],
           "knn_head": rec["knn_head"], "linear_head": rec["linear_head"], "steps": rec["steps"],
           "wall_s": rec["wall_s"], "desc": desc, "head": head}
    return {**out, **run_criteria(args, objective, backbone, Path(cfg.out) / "last.safetensors")}


_RUNNERS: dict[tuple[str, str], Any] = {}


def run_criteria(args: argparse.Namespace, objective: str, backbone: str, checkpoint: Path) -> dict[str, Any]:
    """With ``--criteria``: ``{"criteria": ...}``, the label-free criteria a verdict on ``backbone``
    would compare (benchmarks/run_criteria.py, on the probe split of the search in
    ``<--criteria>/<objective>/search``), measured on the run's checkpoint, which is then deleted;
    else (or when the run finished before and its checkpoint is gone) nothing."""
    if args.criteria is None or not checkpoint.is_file():
        return {}
    import run_criteria as rc  # noqa: E402  (beside this file)

    if (objective, backbone) not in _RUNNERS:
        settings = json.loads((Path(args.criteria) / objective / "search" / "search.json").read_text())["settings"]
        _RUNNERS[objective, backbone] = rc.search_runner(settings, backbone)
    measured = rc.measure_run(checkpoint, _RUNNERS[objective, backbone])
    checkpoint.unlink()
    return {"criteria": {k: measured[k] for k in rc.KEYS if k in measured}}


def baselines(transfer: dict[str, Any]) -> list[dict[str, Any]]:
    """The proxy's own points: 20 epochs on w16 (``--transfer``) and the 100-epoch w16 runs of
    search_budget with the theory pick (``search_budget_theory_cpu.json``: the pick and the
    published head, each seed), as ladder records."""
    out = [dict(r, axis="proxy", epochs=20, backbone=BASE_BACKBONE, d=BASE_D, n_train=10_000)
           for r in transfer["runs"] if r["label"] in ("found", "published")]
    path = RESULTS / "search_budget_theory_cpu.json"
    if path.is_file():
        out += [dict(r, axis="budget_100", backbone=BASE_BACKBONE, d=BASE_D, n_train=10_000)
                for r in json.loads(path.read_text())["runs"] if r["label"] in ("found", "published") and r["epochs"] == 100]
    return out


def margins(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (objective, axis, seed) with both heads: pick minus published, linear and kNN, in points."""
    by: dict[tuple[str, str, int], dict[str, dict[str, Any]]] = {}
    for r in runs:
        by.setdefault((r["objective"], r["axis"], r["seed"]), {})[r["label"]] = r
        for search, axis in SEARCHES.items():  # a search axis's pick meets its axis's published head
            if r["axis"] == axis and r["label"] == "published":
                by.setdefault((r["objective"], search, r["seed"]), {})["published"] = r
    rows = []
    for (o, axis, seed), pair in sorted(by.items()):
        if "found" in pair and "published" in pair:
            f, p = pair["found"], pair["published"]
            rows.append({"objective": o, "axis": axis, "seed": seed, "d": f["d"], "n_train": f["n_train"],
                         "epochs": f["epochs"], "pick_linear": f["linear_backbone"], "pub_linear": p["linear_backbone"],
                         "margin_linear": 100 * (f["linear_backbone"] - p["linear_backbone"]),
                         "pick_knn": f["knn_backbone"], "pub_knn": p["knn_backbone"],
                         "margin_knn": 100 * (f["knn_backbone"] - p["knn_backbone"]), **_verdict_view(f, p)})
    return rows


def _verdict_view(found: dict[str, Any], published: dict[str, Any]) -> dict[str, Any]:
    """What a verdict on the pair's backbone compares, where both runs recorded it (``--criteria``):
    each head's theory score and backbone kNN on the search's probe split, and their margins
    (kNN in points)."""
    if "criteria" not in found or "criteria" not in published:
        return {}
    f, p = found["criteria"], published["criteria"]
    return {"pick_score": f["score"], "pub_score": p["score"], "margin_score": f["score"] - p["score"],
            "pick_probe_knn": f["knn_backbone"], "pub_probe_knn": p["knn_backbone"],
            "margin_probe_knn": 100 * (f["knn_backbone"] - p["knn_backbone"])}


def verdicts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (objective, axis) with two or more seeds of pairs that recorded the verdict's view: the
    decision of :func:`geohead.search.verdict.decide` on them, every seed a fresh one (as
    ``geohead search --confirm-backbone B --confirm-epochs E --confirm-seeds n`` decides on n runs
    of each head at the axis's backbone and schedule), beside the test set's linear margin."""
    from geohead.search.verdict import decide

    by: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        if "margin_score" in r:
            by.setdefault((r["objective"], r["axis"]), []).append(r)
    out = []
    for (o, axis), pts in sorted(by.items()):
        if len(pts) < 2:
            continue
        score = {"pick": {r["seed"]: r["pick_score"] for r in pts}, "published": {r["seed"]: r["pub_score"] for r in pts}}
        knn = {"pick": {r["seed"]: r["pick_probe_knn"] for r in pts}, "published": {r["seed"]: r["pub_probe_knn"] for r in pts}}
        d = decide(score, min(score["pick"]) - 1, knn)
        out.append({"objective": o, "axis": axis, "seeds": sorted(score["pick"]),
                    "recommended": "pick" if d.pick else "published", "basis": d.basis,
                    "score_margin": d.score.margin, "score_noise": d.score.noise,
                    "knn_margin": 100 * d.knn.margin if d.knn else None, "knn_noise": 100 * d.knn.noise if d.knn else None,
                    "test_linear_margin": sum(r["margin_linear"] for r in pts) / len(pts)})
    return out


def table(rows: list[dict[str, Any]], runs: list[dict[str, Any]]) -> str:
    """The ladder as markdown: one row per (objective, axis, seed), then the search axes' picks."""
    lines = ["| objective | axis | seed | backbone d | images | epochs | pick linear | published linear | margin linear | "
             "pick kNN | published kNN | margin kNN |", "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['objective']} | {r['axis']} | {r['seed']} | {r['d']} | {r['n_train']} | {r['epochs']} | "
                     f"{r['pick_linear']:.3f} | {r['pub_linear']:.3f} | {r['margin_linear']:+.1f} | {r['pick_knn']:.3f} | "
                     f"{r['pub_knn']:.3f} | {r['margin_knn']:+.1f} |")
    lines += _verdict_lines(rows)
    for r in runs:
        if r["axis"] in SEARCHES:
            lines.append(f"\nsearch on {r['backbone']}, {r['n_train']:,} images, {r['objective']} seed {r['seed']}: {r['desc']}: "
                         f"linear {r['linear_backbone']:.3f}, kNN {r['knn_backbone']:.3f}")
    return "\n".join(lines) + "\n"


def _verdict_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The table's section on what a verdict on each pair's backbone sees (:func:`verdicts`)."""
    seen = [r for r in rows if "margin_score" in r]
    if not seen:
        return []
    lines = ["\nWhat a verdict on the axis's backbone compares (label-free theory score and backbone kNN on the "
             "search's probe split):\n", "| objective | axis | seed | score margin | probe kNN margin | test linear margin |",
             "|---|---|---|---|---|---|"]
    lines += [f"| {r['objective']} | {r['axis']} | {r['seed']} | {r['margin_score']:+.3f} | {r['margin_probe_knn']:+.1f} | "
              f"{r['margin_linear']:+.1f} |" for r in seen]
    for v in verdicts(rows):
        lines.append(f"\nverdict on {v['objective']} {v['axis']} at seeds {', '.join(map(str, v['seeds']))}: "
                     f"{v['recommended']} ({v['basis']}; score {v['score_margin']:+.3f}, noise {v['score_noise']:.3f}; "
                     + (f"kNN {v['knn_margin']:+.1f} points, noise {v['knn_noise']:.1f}; " if v["knn_margin"] is not None else "")
                     + f"test linear {v['test_linear_margin']:+.1f})")
    return lines


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    """Margin (pick minus published, linear probe points) against width d, images and epochs:
    one line per objective through the seed means, each seed a dot; the proxy's point on every panel."""
    from geohead.plotting import agg_figure

    panels = (("d", "backbone width d", ("proxy", "width_w32", "width_full")),
              ("n_train", "training images", ("proxy", "data_40k")),
              ("epochs", "epochs", ("proxy", "budget_100", "budget_300")))
    fig = agg_figure(13.0, 3.8)
    for i, (key, xlabel, axes) in enumerate(panels):
        ax = fig.add_subplot(1, 3, i + 1)
        for o in sorted({r["objective"] for r in rows}):
            pts = [r for r in rows if r["objective"] == o and r["axis"] in axes]
            xs = sorted({r[key] for r in pts})
            mean = [sum(r["margin_linear"] for r in pts if r[key] == x) / sum(1 for r in pts if r[key] == x) for x in xs]
            line, = ax.plot(xs, mean, marker="o", label=o)
            ax.scatter([r[key] for r in pts], [r["margin_linear"] for r in pts], s=12, color=line.get_color(), alpha=0.5)
        ax.axhline(0.0, color="k", lw=0.8)
        ax.set(xscale="log", xlabel=xlabel, ylabel="pick - published (linear probe points)",
               title=f"margin vs {xlabel}")
        ticks = sorted({r[key] for r in rows if r["axis"] in axes})
        ax.set_xticks(ticks, [f"{t:,}" for t in ticks])
        ax.minorticks_off()
        ax.legend(fontsize=7)
    fig.suptitle("Does the proxy's pick keep its margin? (CIFAR-10 test; dots: seeds, line: seed mean)", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


#: ladder.json's axes: (axis name, the ladder's axes on it, the field that orders their far end, its label)
LADDER_AXES = (("width", ("width_w32", "width_full"), "d", "d={}"), ("data", ("data_40k",), "n_train", "{:,} images"),
               ("budget", ("budget_100", "budget_300"), "epochs", "{} epochs"))


def ladder_record(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """geohead/search/ladder.json: per objective, the proxy's margin and each axis's at its far end
    measured (linear-probe and kNN points, means over the seeds there), read by geohead.search.ladder."""
    out: dict[str, Any] = {}
    for o in sorted({r["objective"] for r in rows}):
        mine = [r for r in rows if r["objective"] == o]
        if not any(r["axis"] == "proxy" for r in mine):
            continue
        axes = {}
        for name, members, key, label in LADDER_AXES:
            pts = [r for r in mine if r["axis"] in members]
            if pts:
                far = max(r[key] for r in pts)
                at = sorted((r for r in pts if r[key] == far), key=lambda r: r["seed"])
                axes[name] = {"at": label.format(far), "margin": _mean(at, "margin_linear"),
                              "knn_margin": _mean(at, "margin_knn"), "seeds": [r["seed"] for r in at],
                              "seed_margins": [round(r["margin_linear"], 2) for r in at]}
        at = [r for r in mine if r["axis"] == "proxy"]
        out[o] = {"proxy": {"margin": _mean(at, "margin_linear"), "knn_margin": _mean(at, "margin_knn"),
                            "seeds": sorted(r["seed"] for r in at)}, "axes": axes}
    return {"source": "benchmarks/search_scale.py: the default search's pick vs the published head, CIFAR-10, "
                      "backbone linear probe (knn_margin: kNN) on the 10k test images; the proxy is resnet18_w16, "
                      "10k images, 20 epochs",
            "objectives": out}


def _mean(rows: list[dict[str, Any]], key: str) -> float:
    return round(sum(r[key] for r in rows) / len(rows), 2)


def write(args: argparse.Namespace, runs: list[dict[str, Any]], transfer: dict[str, Any], stopped: str | None) -> None:
    from geohead.io import atomic_write_text

    measured = set(args.objective) | {r["objective"] for r in runs}  # a sitting on one objective keeps the others'
    rows = margins([r for r in baselines(transfer) if r["objective"] in measured] + runs)
    rec = {"settings": vars(args), "stopped": stopped, "margins": rows, "verdicts": verdicts(rows), "runs": runs}
    text = json.dumps(rec, indent=2, default=str) + "\n"
    atomic_write_text(Path(args.results), text)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    atomic_write_text(Path(args.out) / "table.md", table(rows, runs))
    if rows and args.plot:
        plot(rows, Path(args.plot))
    if rows and args.ladder:
        atomic_write_text(Path(args.ladder), json.dumps(ladder_record(rows), indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--transfer", default=str(RESULTS / "search_transfer22u_cpu.json"))
    ap.add_argument("--objective", nargs="+", default=["barlow", "simclr"])
    ap.add_argument("--axes", nargs="+", choices=list(AXES), default=None,
                    help="axes in run order (default: all, cheapest first; with --device cuda: width_full)")
    ap.add_argument("--seeds", type=int, nargs="+", default=None, help="default 0 1 (cuda: 0)")
    ap.add_argument("--epochs", type=int, default=None, help="override every axis's epochs (cuda default: 100)")
    ap.add_argument("--n-test", type=int, default=None, help="test images (default all 10k)")
    ap.add_argument("--search-trials", type=int, default=9, help="heads a search axis's search measures (as the proxy's did)")
    ap.add_argument("--device", default="cpu", help="cpu, or cuda[:K] for the GPU version")
    ap.add_argument("--data-dir", default=str(st.SHARED))
    ap.add_argument("--time-budget", type=float, default=None, help="start no run after this many seconds "
                    "(0: train nothing, rewrite the table and plot from --results)")
    ap.add_argument("--out", default="runs/search_scale")
    ap.add_argument("--results", default=None, help="default benchmarks/results/search_scale_{cpu,cuda}.json")
    ap.add_argument("--plot", default=None, help="default docs/search_scale{,_cuda}.png")
    ap.add_argument("--ladder", default=None, help="the margins the search prints (default on CPU: "
                    "geohead/search/ladder.json; '' writes none)")
    ap.add_argument("--criteria", default=None, help="a folder of searches (<objective>/search/search.json, e.g. "
                    "runs/search_transfer34): each new run also records the label-free criteria a verdict on its "
                    "backbone compares, on that search's probe split (benchmarks/run_criteria.py)")
    args = ap.parse_args(argv)
    gpu = args.device != "cpu"
    args.axes = args.axes or (["width_full"] if gpu else list(AXES))
    args.seeds = args.seeds if args.seeds is not None else ([0] if gpu else [0, 1])
    args.epochs = args.epochs or (100 if gpu else None)
    args.results = args.results or str(RESULTS / f"search_scale_{'cuda' if gpu else 'cpu'}.json")
    args.plot = args.plot if args.plot is not None else str(ROOT / "docs" / f"search_scale{'_cuda' if gpu else ''}.png")
    args.ladder = args.ladder if args.ladder is not None else ("" if gpu else str(ROOT / "geohead" / "search" / "ladder.json"))
    needed = {f for a in args.axes for f in TRAIN_FILES[AXES[a][2]]} | {"cifar10_test.npz"}
    missing = [f for f in needed if not (Path(args.data_dir) / f).is_file()]
    if missing:
        print(f"error: {args.data_dir} lacks {sorted(set(missing))}; give --data-dir with ../shared/data's files",
              file=sys.stderr)
        return 2
    transfer = json.loads(Path(args.transfer).read_text())
    prior = _prior(args.results)
    runs = list(prior.values())
    t0, stopped = time.perf_counter(), None
    for axis, objective, label, seed in plan(args):
        key = (axis, objective, label, seed)
        if key in prior:
            continue
        if args.time_budget is not None and time.perf_counter() - t0 > args.time_budget:
            stopped = f"time budget of {args.time_budget:.0f} s spent before {key}"
            break
        runs.append(train_run(args, axis, objective, label, seed, transfer, runs))
        write(args, runs, transfer, None)
    write(args, runs, transfer, stopped)
    print((Path(args.out) / "table.md").read_text())
    if stopped:
        print(f"stopped: {stopped}")
    return 0


def _prior(path: str) -> dict[tuple[str, str, str, int], dict[str, Any]]:
    """(axis, objective, label, seed) -> a finished run's record in the results file ``path``."""
    if not Path(path).is_file():
        return {}
    return {(r["axis"], r["objective"], r["label"], r["seed"]): r for r in json.loads(Path(path).read_text())["runs"]}


if __name__ == "__main__":
    sys.exit(main())
