"""lightly's Barlow Twins pipeline, as lightly's docs write it, with geohead watching and reading it.

Everything in the training loop is lightly's or torch's: lightly's ``BYOLTransform`` views
(Barlow Twins' own augmentations are BYOL's asymmetric pair) through a ``DataLoader``, a timm ResNet-18, lightly's
``BarlowTwinsProjectionHead`` and ``BarlowTwinsLoss``, SGD. Data: geohead's built-in "shapes"
images by default, or the images of an .npz given with ``--data PATH.npz`` (e.g. CIFAR-10 arrays).
geohead adds only:

1. ``GeometryMonitor`` (forward hooks, nothing in the loop changes): RankMe, α-ReQ, std of
   normalised outputs of backbone and head every ``--every`` steps (by default six records over
   the run), into ``OUT/geometry.jsonl``;
2. after training, the checkpoint lightly users write, ``torch.save(model.state_dict())``
   (``OUT/barlow.pt``: ``backbone.*`` + ``projection_head.layers.N.*``), then the command lines
   anyone can run on it: ``geohead export`` (the backbone for timm, with the normalisation used
   here), ``geohead diagnose`` (the head rebuilt as a GeometricHead, checked against lightly's
   module, its geometry measured on the data it trained on: ``--data shapes``, or ``--data
   PATH.npz`` and ``--data-test`` when given) and ``geohead report OUT`` (monitor curves + geometry).

Reading the head's RankMe: a Barlow Twins head's output is *meant* to have a high effective
rank (the loss decorrelates its dimensions); a head RankMe far below its width (say 4 of 512)
early in training, or on a tiny run like the test's, means the embeddings span a few
directions only: dimensional collapse, or simply too few steps/images to estimate (RankMe of
N samples is at most N). Compare it with the backbone's RankMe and watch the trend, not one value.

Run (``OMP_NUM_THREADS=1``; on 2 CPU cores the quick command took 7 s and 0.97 GB peak memory, the default
command, the same sizes on CIFAR-10 images, about 3 min)::

    python examples/lightly_barlow.py --out runs/lightly_barlow
    python examples/lightly_barlow.py --n 32 --steps 2 --batch 8 --width 8 --quick --out runs/lightly_quick
    python examples/lightly_barlow.py --data cifar10_train.npz --data-test cifar10_test.npz   # your own images
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import timm
import torch
from lightly.loss import BarlowTwinsLoss
from lightly.models.modules import BarlowTwinsProjectionHead
from lightly.transforms import BYOLTransform, BYOLView1Transform, BYOLView2Transform
from lightly.transforms.utils import IMAGENET_NORMALIZE
from torch import nn
from torch.utils.data import DataLoader

from example_data import ImageDataset, diagnose_data, load_images  # beside this file
from geohead.monitor import GeometryMonitor

class BarlowTwins(nn.Module):
    """lightly's ``BarlowTwins`` module (lightly's examples/pytorch/barlowtwins.py) with a timm backbone."""

    def __init__(self, backbone: nn.Module, hidden_dim: int, out_dim: int) -> None:
        super().__init__()
        self.backbone = backbone
        self.projection_head = BarlowTwinsProjectionHead(backbone.num_features, hidden_dim, out_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection_head(self.backbone(x).flatten(start_dim=1))


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
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--out-dim", type=int, default=512)
    p.add_argument("--every", type=int, default=None, help="steps between monitor records (default: steps // 6, at least 1)")
    # lightly's example uses 0.06 (on CIFAR-10, for epochs); on shapes, 60 steps at 0.06 or 0.02 end at a
    # higher loss with lower RankMe than at 0.01, and at batch 8 0.06 diverges within 2 steps
    p.add_argument("--lr", type=float, default=0.01, help="SGD learning rate")
    p.add_argument("--workers", type=int, default=0, help="DataLoader workers")
    p.add_argument("--out", type=Path, default=Path("runs/lightly_barlow"))
    p.add_argument("--quick", action="store_true", help="a small diagnosis (for tests)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    args.every = args.every or max(1, args.steps // 6)  # six records over the run, whatever its length
    if args.every > args.steps:
        p.error(f"--every {args.every} > --steps {args.steps}: the monitor would record nothing")
    return args


def train(args: argparse.Namespace, model: BarlowTwins, loader: DataLoader) -> list[dict]:
    """lightly's training loop, untouched, under a GeometryMonitor writing ``OUT/geometry.jsonl``; its records."""
    criterion, optimizer = BarlowTwinsLoss(), torch.optim.SGD(model.parameters(), lr=args.lr)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "geometry.jsonl").unlink(missing_ok=True)
    t0, step = time.perf_counter(), 0
    with GeometryMonitor(model.backbone, model.projection_head, every=args.every, calls_per_step=2,
                         log_file=args.out / "geometry.jsonl") as monitor:
        model.train()
        while step < args.steps:
            for (x0, x1), _ in loader:
                loss = criterion(model(x0), model(x1))
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
                monitor.log_loss(loss)  # the records hold the mean loss since the record before
                step += 1
                if step == args.steps:
                    break
    print(f"{args.steps} steps on {args.data} in {time.perf_counter() - t0:.1f} s, final loss {loss.item():.2f}")
    # BatchNorm's running statistics recomputed from the trained weights (one pass over the first
    # views): after a short run they still hold mostly their initial values, and the eval-mode
    # backbone that export and diagnose read would scale its features without bound
    torch.optim.swa_utils.update_bn((x0 for (x0, _), _ in loader), model)
    return monitor.history


def main(argv: list[str] | None = None) -> list[dict]:
    args = parse_args(argv)
    data = load_images(args.data, args.data_test, args.n, args.seed)
    torch.manual_seed(args.seed)
    transform = BYOLTransform(view_1_transform=BYOLView1Transform(input_size=32, gaussian_blur=0.0),
                              view_2_transform=BYOLView2Transform(input_size=32, gaussian_blur=0.0))
    loader = DataLoader(ImageDataset(data, transform), batch_size=args.batch, shuffle=True, drop_last=True,
                        num_workers=args.workers)
    w = args.width
    backbone = timm.create_model("resnet18", num_classes=0, channels=[w, 2 * w, 4 * w, 8 * w], stem_width=w)
    model = BarlowTwins(backbone, args.hidden, args.out_dim)
    history = train(args, model, loader)
    print(f"trained on {data.name} ({len(data)} images)")
    for r in history:
        print(f"  step {r['step']:4d}: RankMe backbone {r['rankme_backbone']:6.1f}, head {r['rankme_head']:6.1f} "
              f"of {args.out_dim}; std head {r['std_head']:.4f} (healthy {r['std_healthy_head']:.4f})")

    ckpt = args.out / "barlow.pt"
    torch.save(model.state_dict(), ckpt)  # the checkpoint a lightly user writes
    mean, std = (",".join(f"{v:g}" for v in IMAGENET_NORMALIZE[k]) for k in ("mean", "std"))
    geohead_cli(["export", str(ckpt), "--out", str(args.out / "export"), "--overwrite", "--with-head", "--method", "barlow",
                 "--mean", mean, "--std", std, "--img-size", "32"])
    geohead_cli(["diagnose", str(ckpt), "--method", "barlow", "--mean", mean, "--std", std, "--img-size", "32",
                 "--json", str(args.out / "diagnose.json"), *diagnose_data(args.data, args.data_test, args.quick)])
    geohead_cli(["report", str(args.out)])
    return history


if __name__ == "__main__":
    main()
