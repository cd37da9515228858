"""The verdict at the user's schedule: does ``geohead search --confirm-epochs`` see a margin that
turns with training length (and ``--confirm-backbone`` one that turns with width)?

On the scale ladder (benchmarks/search_scale.py) Barlow Twins' pick beat the published head by
+1.8 linear points at 20 epochs and fell 0.8 below it at 300 (seed 0; level over seeds 0 and 1);
the search's verdict, at the trials' 300 steps, recommended the pick. This benchmark copies a
stored search (default: the fresh Barlow Twins search of benchmarks/search_transfer.py,
``runs/search_transfer34/barlow/search``: theory score, seed 2, 9 heads, CIFAR-10 10k,
resnet18_w16) to ``--out``, resumes it with its own settings (no new trial) and trains its verdict
at ``--confirm-epochs`` (default 300) at ``--confirm-seeds`` (default 2) fresh seeds. Beside it:
that search's verdict at the trials' schedule (its stored search.json) and the ladder's runs at
the same budget, backbone and data (search_scale_cpu.json; e.g. ``--search
runs/search_scale/search_40k/barlow/search --confirm-epochs 20`` sets the 40k search's verdict
beside the data axis). ``--confirm-backbone`` trains the verdict on another backbone, both heads
rescaled to its d, beside the ladder's runs on it (e.g. ``--confirm-epochs 20 --confirm-backbone
resnet18_cifar`` beside the full-width axis). The runs checkpoint and resume in ``--out/confirm``;
a rerun trains nothing it has. Results: ``--results`` (verdict_schedule_cpu.json), written when the verdict is in.

Run: ``python benchmarks/verdict_schedule.py`` (measured: docs/search.md, "A verdict at your schedule")
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def resumed_config(stored: dict[str, Any], out: Path, args: argparse.Namespace) -> Any:
    """The stored search's SearchConfig (its settings, as many heads as it measured, no time limit)
    with the verdict at ``args.confirm_epochs`` and ``args.confirm_seeds`` (on ``args.confirm_backbone``), in ``out``."""
    from geohead.search import SearchConfig

    fields = {f.name for f in dataclasses.fields(SearchConfig)}
    settings = {k: tuple(v) if isinstance(v, list) else v for k, v in stored["settings"].items() if k in fields}
    return SearchConfig(**settings, out=str(out), trials=stored["trials"]["done"], timeout=None, progress=False,
                        confirm_seeds=args.confirm_seeds, confirm_epochs=args.confirm_epochs,
                        confirm_backbone=args.confirm_backbone)


def ladder_runs(path: Path, objective: str, epochs: int, backbone: str = "resnet18_w16",
                n_train: int = 10_000) -> list[dict[str, Any]]:
    """The scale ladder's pick-minus-published margins at ``epochs`` on ``backbone`` and
    ``n_train`` images (the search's own), per seed, in points: linear and kNN."""
    if not path.is_file():
        return []
    runs = [r for r in json.loads(path.read_text())["runs"] if r["objective"] == objective and r["epochs"] == epochs
            and r["backbone"] == backbone and r["n_train"] == n_train and "same_run_as" not in r]
    by = {(r["label"], r["seed"]): r for r in runs}
    return [{"seed": s, "linear": 100 * (by["found", s]["linear_backbone"] - by["published", s]["linear_backbone"]),
             "knn": 100 * (by["found", s]["knn_backbone"] - by["published", s]["knn_backbone"])}
            for s in sorted({s for _, s in by}) if ("found", s) in by and ("published", s) in by]


def verdict_row(name: str, v: dict[str, Any]) -> str:
    """One table line: what the verdict recommended, and its kNN and score margins with their noise."""
    def m(key: str, scale: float) -> str:
        x = v.get(key)
        return "-" if not x else f"{scale * x['margin']:+.2f} (2 x {scale * x['noise']:.2f})"
    seeds = sorted(int(s) for s in v["values"].get("pick", {}))
    return f"| {name} | {', '.join(map(str, seeds))} | {m('knn_margin', 100)} | {m('score_margin', 1)} | {v['recommended']} |"


def joined_40k(data: str) -> None:
    """Write the search_scale 40k join again when a search made on it is resumed and the temp
    folder lost it (the join is deterministic: the same four shared files in the same order)."""
    if Path(data).is_file() or not Path(data).name.startswith("geohead_search_scale_cifar10_train_40k"):
        return
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import search_scale  # noqa: E402

    search_scale.joined_train(Path(search_scale.st.SHARED), "40k")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--search", default=str(ROOT / "runs" / "search_transfer34" / "barlow" / "search"))
    p.add_argument("--out", default=str(ROOT / "runs" / "verdict_schedule" / "barlow"))
    p.add_argument("--confirm-epochs", type=int, default=300)
    p.add_argument("--confirm-seeds", type=int, default=2)
    p.add_argument("--confirm-backbone", default=None, help="the verdict's backbone (default: the search's)")
    p.add_argument("--ladder", default=str(RESULTS / "search_scale_cpu.json"))
    p.add_argument("--results", default=str(RESULTS / "verdict_schedule_cpu.json"))
    args = p.parse_args(argv)
    from geohead.search import run_search

    search, out = Path(args.search), Path(args.out)
    stored = json.loads((search / "search.json").read_text())
    joined_40k(stored["settings"]["data"])
    if not (out / "study.db").is_file():
        shutil.copytree(search, out, dirs_exist_ok=True)
    t0 = time.perf_counter()
    run_search(resumed_config(stored, out, args), echo=lambda s: print(s, flush=True))
    long = json.loads((out / "search.json").read_text())["verdict"]
    proxy = stored["proxy"]
    backbone = args.confirm_backbone or proxy["backbone"]
    ladder = ladder_runs(Path(args.ladder), stored["objective"], args.confirm_epochs, backbone, proxy["n_train"])
    rec = {"search": str(search), "settings": stored["settings"], "confirm_epochs": args.confirm_epochs,
           "confirm_backbone": args.confirm_backbone,
           "confirm_seeds": args.confirm_seeds, "verdict_short": stored["verdict"], "verdict_long": long,
           "ladder": ladder, "wall_s": time.perf_counter() - t0}
    Path(args.results).write_text(json.dumps(rec, indent=2) + "\n")
    print(f"\n{stored['objective']}, pick {long['pick']} vs published {long['reference']} "
          "(kNN margin in points on the search's probe split, score margin; noise 2 x sigma_d / sqrt(n)):")
    print("| verdict | seeds | kNN margin | score margin | recommends |\n|---|---|---|---|---|")
    print(verdict_row(f"trials' schedule ({stored['settings']['max_steps']} steps)", stored["verdict"]))
    print(verdict_row(f"{args.confirm_epochs} epochs on {backbone}", long))
    for r in ladder:
        print(f"ladder, {args.confirm_epochs} epochs on {backbone}, seed {r['seed']}: linear {r['linear']:+.2f}, kNN {r['knn']:+.2f} points")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
