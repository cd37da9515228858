"""A Barlow Twins LightningModule, trained by Lightning, watched by geohead's callback, then
exported and diagnosed from the ``.ckpt`` Lightning writes.

The pipeline is ordinary Lightning: torchvision transforms make two views per image in the
``Dataset`` (geohead's built-in "shapes" images by default, or the images of an .npz given with
``--data PATH.npz``, e.g. CIFAR-10 arrays; normalised with their own channel statistics),
a timm ResNet-18 backbone, a ``GeometricHead`` projection head, geohead's Barlow Twins loss,
``trainer.save_checkpoint`` (``OUT/barlow.ckpt``; ``save_hyperparameters`` records the method,
the head's spec and the normalisation, so the commands below need no flags for them).

``GeometryCallback`` finds the module's ``backbone`` and ``projection_head``, records RankMe,
α-ReQ and the std of normalised embeddings of both every ``--every`` optimiser steps (counted
from 1, as ``GeometryMonitor`` counts; by default six records over the run) and logs them through ``self.log`` as ``geometry/<key>``
(here to a CSV logger; ``prog_bar=True`` shows them in the progress bar). It ends with
``geohead export OUT/barlow.ckpt``, ``geohead diagnose OUT/barlow.ckpt`` (on the data it trained on:
``--data shapes``, or ``--data PATH.npz`` and ``--data-test`` when given) and ``geohead report OUT``
(the callback's records, ``OUT/geometry.jsonl``, and the diagnosis on one page).

Reading the head's RankMe: see ``examples/lightly_barlow.py`` (a value far below the head's
width means its outputs span few directions: collapse, or a run too short to tell).

Run (``OMP_NUM_THREADS=1``; on 2 CPU cores the quick command took 11 s and 1.07 GB peak memory, the default
command, the same sizes on CIFAR-10 images, about 5 min)::

    python examples/lightning_monitor.py --out runs/lightning_barlow
    python examples/lightning_monitor.py --n 32 --steps 2 --batch 8 --width 8 --quick --out runs/lightning_quick
    python examples/lightning_monitor.py --data cifar10_train.npz --data-test cifar10_test.npz   # your own images
"""
from __future__ import annotations

import argparse
import csv
import warnings
from pathlib import Path

import lightning as L
import timm
import torch
from torch import nn
from lightning.pytorch.loggers import CSVLogger
from PIL import Image
from torch.utils.data import DataLoader
from torchvision.transforms import v2 as T

from geohead import GeometricHead
from example_data import ImageDataset, diagnose_data, load_images  # beside this file
from geohead.data import ImageData
from geohead.integrations.lightning import GeometryCallback
from geohead.objectives import get_objective

# Lightning 2.6 calls a pytree API that recent torch deprecates (Lightning's call, not this script's)
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning,
                        module=r"lightning\.pytorch\.utilities\._pytree")


class TwoViews:
    """Two independent draws of a torchvision transform: (view0, view1), normalised with ``mean``/``std``
    (the training images' own statistics: shapes' are not CIFAR-10's)."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], size: int = 32) -> None:
        self.t = T.Compose([T.RandomResizedCrop(size, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), T.RandomGrayscale(0.2),
                            T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)])

    def __call__(self, img: Image.Image) -> tuple[torch.Tensor, torch.Tensor]:
        return self.t(img), self.t(img)


class BarlowTwins(L.LightningModule):
    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...], width: int = 64, hidden_dim: int = 512,
                 out_dim: int = 512, lr: float = 0.001, img_size: int = 32) -> None:
        super().__init__()
        w = width
        self.backbone = timm.create_model("resnet18", num_classes=0, channels=[w, 2 * w, 4 * w, 8 * w], stem_width=w)
        self.projection_head = GeometricHead(self.backbone.num_features, out_dim, hidden_dim=hidden_dim)
        self.criterion = get_objective("barlow")
        self.lr = lr
        # plain values only: what geohead reads back (weights_only) to name the method, head and preprocessing
        self.save_hyperparameters({"method": "barlow", "head_spec": self.projection_head.spec.to_dict(),
                                   "mean": list(mean), "std": list(std), "img_size": img_size, "width": width, "lr": lr})

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        (x0, x1), _ = batch
        # one forward of both views: the callback sees one batch per step (calls_per_step=1)
        z = self.projection_head(self.backbone(torch.cat([x0, x1])))
        loss = self.criterion(list(z.chunk(2)))
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def geohead_cli(args: list[str]) -> None:
    """``geohead ARGS`` in this process (what the shell command does), echoing the command line."""
    from geohead.cli import main

    print("\n$ geohead " + " ".join(args), flush=True)
    main.main(args, standalone_mode=False)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default="shapes", help="training images: 'shapes' (geohead's built-in) or an .npz file")
    p.add_argument("--data-test", type=Path, default=None, help="an .npz of test images for the diagnosis (with --data PATH.npz)")
    p.add_argument("--n", type=int, default=2048, help="training images")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=int, default=64, help="ResNet-18's first stage width (64: the standard ResNet-18)")
    # 0.001 with momentum 0.9 (a step of about 0.01, lightly_barlow.py's): on shapes, 60 steps at 0.06 or 0.004
    # end at a higher loss with the head's RankMe near 5, and at batch 8 0.02 diverges within 2 steps
    p.add_argument("--lr", type=float, default=0.001, help="SGD learning rate (momentum 0.9)")
    p.add_argument("--every", type=int, default=None, help="optimiser steps between records (default: steps // 6, at least 1)")
    p.add_argument("--hessian-every", type=int, default=2, help="H_eff on every K-th record (0: off)")
    p.add_argument("--out", type=Path, default=Path("runs/lightning_barlow"))
    p.add_argument("--quick", action="store_true", help="a small diagnosis (for tests)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.every = args.every or max(1, args.steps // 6)  # six records over the run, whatever its length
    if args.every > args.steps:
        p.error(f"--every {args.every} > --steps {args.steps}: the callback would record nothing")
    return args


def train(args: argparse.Namespace, data: ImageData) -> tuple[L.Trainer, GeometryCallback]:
    """Lightning's fit of Barlow Twins on ``data`` with the callback writing ``OUT/geometry.jsonl``."""
    L.seed_everything(args.seed, verbose=False)
    loader = DataLoader(ImageDataset(data, TwoViews(data.mean, data.std)), batch_size=args.batch, shuffle=True, drop_last=True)
    module = BarlowTwins(data.mean, data.std, width=args.width, lr=args.lr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geometry.jsonl").unlink(missing_ok=True)
    callback = GeometryCallback(every=args.every, objective="criterion", hessian_every=args.hessian_every,
                                log_file=args.out / "geometry.jsonl")  # also a JSONL that `geohead report` plots
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=CSVLogger(args.out, name="logs"),
                        callbacks=[callback], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(module, loader)
    # BatchNorm's running statistics recomputed from the trained weights (one pass over the first
    # views): after a short run they still hold mostly their initial values, and the eval-mode
    # backbone that export and diagnose read would scale its features without bound
    torch.optim.swa_utils.update_bn((x0 for (x0, _), _ in loader), nn.Sequential(module.backbone, module.projection_head))
    return trainer, callback


def print_records(trainer: L.Trainer, data: ImageData) -> None:
    """The geometry Lightning logged (its metrics.csv), one line per record."""
    metrics = Path(trainer.logger.log_dir) / "metrics.csv"
    with open(metrics) as f:
        rows = [r for r in csv.DictReader(f) if r.get("geometry/rankme_head")]
    print(f"trained on {data.name} ({len(data)} images); logged by Lightning to {metrics}")
    for r in rows:
        lam = r.get("geometry/hessian_lambda_min")
        print(f"  step {r['step']:>4s}: RankMe backbone {float(r['geometry/rankme_backbone']):6.1f}, head "
              f"{float(r['geometry/rankme_head']):6.1f}; std head {float(r['geometry/std_head']):.4f}"
              + (f"; λ_min H_eff {float(lam):.3g}" if lam else ""))


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    data = load_images(args.data, args.data_test, args.n, args.seed)
    trainer, callback = train(args, data)
    ckpt = args.out / "barlow.ckpt"
    trainer.save_checkpoint(ckpt, weights_only=False)  # the full checkpoint (optimizer, loops), as ModelCheckpoint writes it
    print_records(trainer, data)
    geohead_cli(["export", str(ckpt), "--out", str(args.out / "export"), "--overwrite", "--with-head"])
    geohead_cli(["diagnose", str(ckpt), "--json", str(args.out / "diagnose.json"), *diagnose_data(args.data, args.data_test, args.quick)])
    geohead_cli(["report", str(args.out)])
    return callback.monitor.history


if __name__ == "__main__":
    main()
