"""Does training help? kNN accuracy of trained vs untrained backbones, and of backbone vs head.

Two experiments (issue #5), each run through ``geohead.training.loop.train`` exactly as ``geohead train``
does; the untrained numbers are the same probes on the same model before its first update
(``train(callback=...)`` at epoch 0), so "trained" and "untrained" share data, seed and probes:

* ``--shapes``: every ``geohead/recipes/*_shapes_cpu.toml`` in full: kNN accuracy (k=20, T=0.07) of
  backbone and head outputs for the class and the hue and rotation factors (4 quantile bins,
  chance 0.25), untrained vs trained;
* ``--cifar``: Barlow Twins on ../shared/data/cifar10_train_10k.npz with the CPU backbone,
  probed on ../shared/data/cifar10_test.npz: a SiLU GeometricHead vs the standard ReLU head.

Run: ``flock /tmp/geohead-bench.lock python benchmarks/train_accuracy.py --shapes --cifar``
(``--epochs N`` sets the CIFAR run length; ``--set k=v`` is passed to every run).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared" / "data"


def run(recipe: Path, overrides: list[str], out: Path) -> dict:
    """Train ``recipe``; return untrained and trained probe reports and the wall time."""
    from geohead.training.config import load_recipe
    from geohead.data import load_dataset
    from geohead.training.evaluate import run_probes
    from geohead.training.model import resolve_device
    from geohead.training.loop import train

    cfg = load_recipe(recipe, overrides + [f'out="{out}"'])
    data = load_dataset(cfg.data.name, root=cfg.data.root, train=True, n=cfg.data.n_train,
                        img_size=cfg.data.img_size, seed=cfg.seed)
    before: dict = {}

    def at_start(ev) -> None:
        if ev.epoch == 0:
            before.update(run_probes(cfg, ev.model, data, resolve_device(cfg.device), load_dataset))

    t = time.perf_counter()
    result = train(cfg, overwrite=True, callback=at_start)
    return {"untrained": before, "trained": result.probes, "seconds": time.perf_counter() - t,
            "steps": result.steps, "final_loss": result.final_loss}


def knn(report: dict, target: str, space: str) -> float:
    return report["targets"][target][space]["knn"]


def shapes(overrides: list[str]) -> None:
    rows = []
    for recipe in sorted((ROOT / "geohead" / "recipes").glob("*_shapes_cpu.toml")):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(recipe, overrides, Path(tmp) / "run")
        rows.append((recipe.stem.replace("_shapes_cpu", ""), r))
        print(f"{recipe.stem}: {r['steps']} steps in {r['seconds']:.0f} s, final loss {r['final_loss']:.4f}", flush=True)
    print("\nshapes (10 classes, chance 0.10; hue/rotation in 4 bins, chance 0.25): kNN accuracy, untrained -> trained")
    print(f"{'method':8s} {'class bb':>14s} {'class head':>14s} {'hue bb':>14s} {'hue head':>14s} {'rot bb':>14s} {'rot head':>14s}")
    for name, r in rows:
        cells = []
        for target in ("class", "hue", "rotation"):
            for space in ("backbone", "head"):
                cells.append(f"{knn(r['untrained'], target, space):.3f}->{knn(r['trained'], target, space):.3f}")
        print(f"{name:8s} " + " ".join(f"{c:>14s}" for c in cells))


def cifar(overrides: list[str], epochs: int) -> None:
    base = [f'data.name="{SHARED / "cifar10_train_10k.npz"}"', f'data.test="{SHARED / "cifar10_test.npz"}"',
            "data.n_train=10000", "probe.n_train=10000", "probe.n_test=10000", "probe.factors=false",
            f"optim.epochs={epochs}", "track.monitor_every=100"]
    rows = []
    for smooth in (True, False):
        with tempfile.TemporaryDirectory() as tmp:
            r = run(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", base + [f"head.smooth={str(smooth).lower()}"] + overrides,
                    Path(tmp) / "run")
        rows.append(("SiLU GeometricHead" if smooth else "ReLU (standard)", r))
        print(f"{rows[-1][0]}: {r['steps']} steps in {r['seconds']:.0f} s, final loss {r['final_loss']:.4f}", flush=True)
    print(f"\nBarlow Twins, CIFAR-10 10k train -> 10k test, resnet18_w16, {epochs} epochs: kNN / linear accuracy")
    print(f"{'head':20s} {'untrained bb':>13s} {'trained bb':>11s} {'trained head':>13s} {'lin bb':>8s} {'lin head':>9s} {'min':>5s}")
    for name, r in rows:
        u, t = r["untrained"]["targets"]["class"], r["trained"]["targets"]["class"]
        print(f"{name:20s} {u['backbone']['knn']:13.3f} {t['backbone']['knn']:11.3f} {t['head']['knn']:13.3f} "
              f"{t['backbone']['linear']:8.3f} {t['head']['linear']:9.3f} {r['seconds'] / 60:5.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", action="store_true")
    ap.add_argument("--cifar", action="store_true")
    ap.add_argument("--epochs", type=int, default=50)
    ap.add_argument("--set", dest="overrides", action="append", default=[])
    args = ap.parse_args()
    if not (args.shapes or args.cifar):
        ap.error("choose --shapes and/or --cifar")
    if args.shapes:
        shapes(args.overrides)
    if args.cifar:
        cifar(args.overrides, args.epochs)


if __name__ == "__main__":
    main()
