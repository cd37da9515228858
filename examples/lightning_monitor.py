"""A Barlow Twins LightningModule, trained by Lightning, watched by geohead's callback, then
exported and diagnosed from the ``.ckpt`` Lightning writes.

The pipeline is ordinary Lightning: torchvision transforms make two views per image in the
``Dataset`` (CIFAR-10 arrays of ``../shared/data`` when present, else torchvision's ``FakeData``),
a timm ResNet-18 backbone, a ``GeometricHead`` projection head, geohead's Barlow Twins loss,
``trainer.save_checkpoint`` (``OUT/barlow.ckpt``; ``save_hyperparameters`` records the method,
the head's spec and the normalisation, so the commands below need no flags for them).

``GeometryCallback`` finds the module's ``backbone`` and ``projection_head``, records RankMe,
α-ReQ and the std of normalised embeddings of both every ``--every`` optimiser steps (counted
from 1, as ``GeometryMonitor`` counts) and logs them through ``self.log`` as ``geometry/<key>``
(here to a CSV logger; ``prog_bar=True`` shows them in the progress bar). It ends with
``geohead export OUT/barlow.ckpt``, ``geohead diagnose OUT/barlow.ckpt`` and ``geohead report OUT``
(the callback's records, ``OUT/geometry.jsonl``, and the diagnosis on one page).

Reading the head's RankMe: see ``examples/lightly_barlow.py`` (a value far below the head's
width means its outputs span few directions: collapse, or a run too short to tell).

Run (``OMP_NUM_THREADS=1``; times in the README)::

    python examples/lightning_monitor.py --out runs/lightning_barlow
    python examples/lightning_monitor.py --n 32 --steps 2 --batch 8 --width 8 --every 1 --quick   # seconds
"""
from __future__ import annotations

import argparse
import csv
import warnings
from pathlib import Path

import lightning as L
import numpy as np
import timm
import torch
from lightning.pytorch.loggers import CSVLogger
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2 as T

from geohead import GeometricHead
from geohead.integrations.lightning import GeometryCallback
from geohead.objectives import get_objective

# Lightning 2.6 calls a pytree API that recent torch deprecates (Lightning's call, not this script's)
warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning,
                        module=r"lightning\.pytorch\.utilities\._pytree")

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
MEAN, STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)  # CIFAR-10's


class TwoViews:
    """Two independent draws of a torchvision transform: (view0, view1)."""

    def __init__(self, mean=MEAN, std=STD) -> None:
        self.t = T.Compose([T.RandomResizedCrop(32, scale=(0.3, 1.0)), T.RandomHorizontalFlip(),
                            T.RandomApply([T.ColorJitter(0.4, 0.4, 0.2, 0.1)], p=0.8), T.RandomGrayscale(0.2),
                            T.ToImage(), T.ToDtype(torch.float32, scale=True), T.Normalize(mean, std)])

    def __call__(self, img):
        return self.t(img), self.t(img)


class ArrayImages(Dataset):
    def __init__(self, path: Path, n: int, transform) -> None:
        with np.load(path) as z:
            self.images, self.labels = z["images"][:n], z["labels"][:n]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(Image.fromarray(self.images[i])), int(self.labels[i])


class BarlowTwins(L.LightningModule):
    def __init__(self, width: int = 64, hidden_dim: int = 512, out_dim: int = 512, lr: float = 0.06,
                 mean: tuple = MEAN, std: tuple = STD, img_size: int = 32) -> None:
        super().__init__()
        w = width
        self.backbone = timm.create_model("resnet18", num_classes=0, channels=[w, 2 * w, 4 * w, 8 * w], stem_width=w)
        self.projection_head = GeometricHead(self.backbone.num_features, out_dim, hidden_dim=hidden_dim)
        self.criterion = get_objective("barlow")
        self.lr = lr
        # plain values only: what geohead reads back (weights_only) to name the method, head and preprocessing
        self.save_hyperparameters({"method": "barlow", "head_spec": self.projection_head.spec.to_dict(),
                                   "mean": list(mean), "std": list(std), "img_size": img_size, "width": width, "lr": lr})

    def training_step(self, batch, batch_idx):
        (x0, x1), _ = batch
        # one forward of both views: the callback sees one batch per step (calls_per_step=1)
        z = self.projection_head(self.backbone(torch.cat([x0, x1])))
        loss = self.criterion(list(z.chunk(2)))
        self.log("loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.lr, momentum=0.9)


def dataset(data: Path | None, n: int) -> tuple[Dataset, str]:
    if data is not None and not data.is_file():
        raise SystemExit(f"--data {data} does not exist")
    npz = data or (SHARED / "cifar10_train_10k.npz")
    if Path(npz).is_file():
        return ArrayImages(Path(npz), n, TwoViews()), str(npz)
    from torchvision.datasets import FakeData

    return FakeData(size=n, image_size=(3, 32, 32), num_classes=10, transform=TwoViews()), "FakeData"


def geohead_cli(args: list[str]) -> None:
    """``geohead ARGS`` in this process (what the shell command does), echoing the command line."""
    from geohead.cli import main

    print("\n$ geohead " + " ".join(args), flush=True)
    main.main(args, standalone_mode=False)


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", type=Path, default=None, help="an .npz of training images (default: ../shared/data's CIFAR-10)")
    p.add_argument("--n", type=int, default=2048, help="training images")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--width", type=int, default=64, help="ResNet-18's first stage width (64: the standard ResNet-18)")
    p.add_argument("--lr", type=float, default=0.06)
    p.add_argument("--every", type=int, default=10, help="optimiser steps between records")
    p.add_argument("--hessian-every", type=int, default=2, help="H_eff on every K-th record (0: off)")
    p.add_argument("--out", type=Path, default=Path("runs/lightning_barlow"))
    p.add_argument("--quick", action="store_true", help="a small diagnosis (for tests)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    L.seed_everything(args.seed, verbose=False)
    data, source = dataset(args.data, args.n)
    loader = DataLoader(data, batch_size=args.batch, shuffle=True, drop_last=True)
    module = BarlowTwins(width=args.width, lr=args.lr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geometry.jsonl").unlink(missing_ok=True)
    callback = GeometryCallback(every=args.every, objective="criterion", hessian_every=args.hessian_every,
                                log_file=args.out / "geometry.jsonl")  # also a JSONL that `geohead report` plots
    trainer = L.Trainer(max_steps=args.steps, accelerator="cpu", devices=1, logger=CSVLogger(args.out, name="logs"),
                        callbacks=[callback], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, log_every_n_steps=1)
    trainer.fit(module, loader)
    ckpt = args.out / "barlow.ckpt"
    trainer.save_checkpoint(ckpt, weights_only=False)  # the full checkpoint (optimizer, loops), as ModelCheckpoint writes it

    metrics = Path(trainer.logger.log_dir) / "metrics.csv"
    rows = [r for r in csv.DictReader(open(metrics)) if r.get("geometry/rankme_head")]
    print(f"trained on {source}; logged by Lightning to {metrics}")
    for r in rows:
        lam = r.get("geometry/hessian_lambda_min")
        print(f"  step {r['step']:>4s}: RankMe backbone {float(r['geometry/rankme_backbone']):6.1f}, head "
              f"{float(r['geometry/rankme_head']):6.1f}; std head {float(r['geometry/std_head']):.4f}"
              + (f"; λ_min H_eff {float(lam):.3g}" if lam else ""))
    test = SHARED / "cifar10_test.npz"
    data_args = ["--data", source, "--data-test", str(test)] if source != "FakeData" and test.is_file() else ["--data", "shapes"]
    small = ["--n-test", "32", "--n-train", "32", "--orbit-images", "4", "--hessian-samples", "4", "--collapse-batch", "4",
             "--mode", "fast", "--families", "rotate,crop", "--no-linear"] if args.quick else ["--n-test", "500", "--n-train", "1000"]
    geohead_cli(["export", str(ckpt), "--out", str(args.out / "export"), "--overwrite", "--with-head"])
    geohead_cli(["diagnose", str(ckpt), "--json", str(args.out / "diagnose.json"), *data_args, *small])
    geohead_cli(["report", str(args.out)])
    return callback.monitor.history


if __name__ == "__main__":
    main()
