"""lightly's Barlow Twins example with its projection head replaced by a GeometricHead, and
geohead's collapse monitors attached with forward hooks: nothing else in the loop changes.

lightly's model (https://docs.lightly.ai, "Barlow Twins")::

    self.projection_head = BarlowTwinsProjectionHead(512, 2048, 2048)

becomes, with the same shape (Linear-BN-act twice, then Linear) and SiLU instead of ReLU::

    self.projection_head = GeometricHead(512, 2048, hidden_dim=2048)

The loss stays lightly's ``BarlowTwinsLoss``; the monitor's H_eff records use it too. Data: the
built-in shapes, with geohead's on-device Barlow Twins views (lightly's torchvision transforms
work the same, slower on a CPU). Needs ``pip install "geohead[lightly]"``.

Run (25 s with OMP_NUM_THREADS=1 on a 2-core machine shared with other jobs; with two threads
there, contention made it 2.5 minutes)::

    python examples/lightly_barlow.py
    python examples/lightly_barlow.py --n 64 --steps 4 --batch 32 --every 2   # a few seconds
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from lightly.loss import BarlowTwinsLoss
from torch import nn

from geohead import GeometricHead
from geohead.backbones import create_backbone, feature_dim
from geohead.data import make_shapes, make_view_fn
from geohead.features import extract
from geohead.monitor import GeometryMonitor
from geohead.probes.knn import knn_accuracy


class BarlowTwins(nn.Module):
    """lightly's ``BarlowTwins`` module, head swapped."""

    def __init__(self, backbone: nn.Module, feat_dim: int, hidden_dim: int, out_dim: int) -> None:
        super().__init__()
        self.backbone = backbone
        # was: BarlowTwinsProjectionHead(feat_dim, hidden_dim, out_dim)
        self.projection_head = GeometricHead(feat_dim, out_dim, hidden_dim=hidden_dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.projection_head(self.backbone(x).flatten(start_dim=1))


def knn(backbone: nn.Module, train, test, mean, std) -> float:
    f_train, _ = extract(backbone, None, train.images, mean, std)
    f_test, _ = extract(backbone, None, test.images, mean, std)
    return knn_accuracy(f_train, train.labels, f_test, test.labels, k=min(20, len(train.labels)))


def main(argv: list[str] | None = None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, default=4000, help="shapes training images")
    p.add_argument("--n-test", type=int, default=1000, help="shapes images for the kNN check")
    p.add_argument("--steps", type=int, default=80)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--every", type=int, default=20, help="steps between monitor records")
    p.add_argument("--hessian-every", type=int, default=2, help="H_eff on every K-th record (0: off)")
    p.add_argument("--backbone", default="resnet18_w16")
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--out-dim", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.06)
    p.add_argument("--log", type=Path, default=None, help="also write the records here (.jsonl or .csv)")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    torch.manual_seed(args.seed)
    train, test = make_shapes(args.n, seed=args.seed), make_shapes(args.n_test, seed=args.seed + 1)
    views = make_view_fn("barlow", 32, train.mean, train.std, hue=0.5, crop_scale=(0.3, 1.0))
    backbone = create_backbone(args.backbone, channels_last=False)
    model = BarlowTwins(backbone, feature_dim(backbone), args.hidden, args.out_dim)
    criterion = BarlowTwinsLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed)
    knn_before = knn(backbone, train, test, train.mean, train.std)

    monitor = GeometryMonitor(model.backbone, model.projection_head, every=args.every, calls_per_step=2,
                              objective=criterion, hessian_every=args.hessian_every, log_file=args.log)
    t0 = time.perf_counter()
    with monitor:
        model.train()
        for step in range(args.steps):
            idx = torch.randint(0, len(train.images), (args.batch,), generator=g)
            x0, x1 = views(train.images[idx], generator=g)
            z0, z1 = model(x0), model(x1)
            loss = criterion(z0, z1)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
    seconds = time.perf_counter() - t0

    print(f"{'step':>5s} {'RankMe bb':>9s} {'RankMe head':>11s} {'std head':>8s} {'α-ReQ head':>10s} "
          f"{'λ_min H_eff':>11s} {'‖M‖/‖H‖':>8s}")
    for r in monitor.history:
        hess = (f"{r['hessian_lambda_min']:11.3g} {r['m_over_h']:8.3f}" if "m_over_h" in r else f"{'':11s} {'':8s}")
        print(f"{r['step']:5d} {r['rankme_backbone']:9.1f} {r['rankme_head']:11.1f} {r['std_head']:8.4f} "
              f"{r['alpha_req_head']:10.2f} {hess}")
    print(f"{args.steps} steps in {seconds:.1f} s, final loss {loss.item():.2f}; backbone kNN accuracy "
          f"(shape class, chance {1 / len(train.class_names):.2f}): {knn_before:.3f} -> "
          f"{knn(backbone, train, test, train.mean, train.std):.3f}")
    return monitor.history


if __name__ == "__main__":
    main()
