"""Images per second of a Barlow Twins training step on CPU: geohead vs lightly vs a bare loop.

One step = two views of a batch + backbone + head + loss + backward + optimiser step. Three
pipelines on the same CIFAR-10 images, the same backbone (geohead's CPU default
``resnet18_w16``, identical initial weights), the same head shape (Linear-BN-ReLU x2 + Linear,
512 wide), the same loss (Barlow Twins, λ = 0.005) and the same optimiser (timm's LARS):

* ``lightly``  - lightly's ``BYOLTransform`` (Barlow Twins' augmentation in lightly's examples;
  blur off, solarisation 0 / 0.2 as geohead's CIFAR recipe) on PIL images in a ``DataLoader``
  with 2 worker processes, ``BarlowTwinsProjectionHead`` and ``BarlowTwinsLoss``: the baseline of
  the ratio column;
* ``bare``     - a plain PyTorch loop over the same tensors geohead uses: uint8 images in memory,
  geohead's on-device views, the GeometricHead and objective, nothing else;
* ``geohead``  - ``geohead.training.loop.train`` (the real pipeline: schedule, logging, NaN check,
  checkpoint, tracking off), throughput read from its metrics (monitors and checkpoints are
  excluded from its timing windows).

Run (lightly is not a geohead dependency; the ``bench`` extra installs it)::

    pip install -e ".[bench]"
    python benchmarks/train_step.py

Goals (issue #5): geohead >= 1.3x lightly, and <= 5 % slower than the bare loop.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "cifar10_train_10k.npz"
LAMBDA = 0.005


def make_parts(seed: int = 0):
    from geohead import GeometricHead
    from geohead.backbones import create_backbone

    torch.manual_seed(seed)
    backbone = create_backbone("resnet18_w16", img_size=32)
    head = GeometricHead.preset("barlow", backbone.num_features, smooth=False, hidden_dim=512, out_dim=512)
    return backbone, head


def lars(modules, lr: float):
    from geohead.training.config import OptimConfig
    from geohead.training.optim import build_optimizer

    return build_optimizer(OptimConfig(name="lars", lr=lr, weight_decay=1e-4), modules)


def bare_loop(images: torch.Tensor, steps: int, warmup: int, batch: int, parts) -> float:
    """A plain loop over geohead's tensors; returns images/s over the timed steps."""
    from geohead.data import channel_stats, make_view_fn
    from geohead.objectives import BarlowTwins

    backbone, head = parts
    mean, std = channel_stats(images)
    views = make_view_fn("barlow", 32, mean, std)
    loss_fn = BarlowTwins(lambd=LAMBDA)
    opt = lars([backbone, head], 0.3)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(images), generator=g)
    t0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        idx = perm[(step * batch) % (len(images) - batch):][:batch]
        v1, v2 = views(images[idx], g)
        loss = loss_fn([head(backbone(v1)), head(backbone(v2))])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps * batch / (time.perf_counter() - t0)


def geohead_pipeline(npz: Path, steps: int, warmup: int, batch: int, parts) -> float:
    """``geohead.training.loop.train`` on the same data; images/s from its metrics after warm-up."""
    from geohead.training.config import config_from_dict
    from geohead.training.loop import train

    backbone, head = parts
    with tempfile.TemporaryDirectory() as tmp:
        cfg = config_from_dict({
            "objective": "barlow", "objective_args": {"lambd": LAMBDA}, "out": tmp,
            "data": {"name": str(npz)},
            "backbone": {"name": "resnet18_w16"},
            "head": {"smooth": False, "spec": {"hidden_dim": 512, "out_dim": 512}},
            "optim": {"name": "lars", "lr": 0.3, "batch_size": batch, "max_steps": warmup + steps, "warmup_epochs": 0},
            "track": {"log_every": 1, "monitor_every": 0, "progress": False, "ckpt_every": 10_000},
            "probe": {"enabled": False},
        })
        train(cfg)
        rows = [json.loads(x) for x in (Path(tmp) / "metrics.jsonl").read_text().splitlines()]
    timed = [r for r in rows if "img_per_s" in r and r["step"] > warmup]
    seconds = sum(batch / r["img_per_s"] for r in timed)
    return len(timed) * batch / seconds


class _PILData(torch.utils.data.Dataset):
    def __init__(self, arr: np.ndarray, transform) -> None:
        from PIL import Image

        self.images = [Image.fromarray(a) for a in arr]
        self.transform = transform

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int):
        return self.transform(self.images[i])


def lightly_pipeline(arr: np.ndarray, steps: int, warmup: int, batch: int, parts, workers: int) -> float:
    from lightly.loss import BarlowTwinsLoss
    from lightly.models.modules import BarlowTwinsProjectionHead
    from lightly.transforms import BYOLTransform, BYOLView1Transform, BYOLView2Transform

    backbone, _ = parts
    mean = (arr / 255.0).mean(axis=(0, 1, 2)).tolist()
    std = (arr / 255.0).std(axis=(0, 1, 2)).tolist()
    norm = {"mean": mean, "std": std}
    transform = BYOLTransform(
        view_1_transform=BYOLView1Transform(input_size=32, gaussian_blur=0.0, solarization_prob=0.0, normalize=norm),
        view_2_transform=BYOLView2Transform(input_size=32, gaussian_blur=0.0, solarization_prob=0.2, normalize=norm),
    )
    torch.manual_seed(0)
    head = BarlowTwinsProjectionHead(backbone.num_features, 512, 512)
    loss_fn = BarlowTwinsLoss(lambda_param=LAMBDA)
    opt = lars([backbone, head], 0.3)
    loader = torch.utils.data.DataLoader(_PILData(arr, transform), batch_size=batch, shuffle=True, drop_last=True,
                                         num_workers=workers, persistent_workers=workers > 0)
    it = iter(loader)
    t0 = 0.0
    for step in range(warmup + steps):
        if step == warmup:
            t0 = time.perf_counter()
        try:
            x0, x1 = next(it)
        except StopIteration:
            it = iter(loader)
            x0, x1 = next(it)
        loss = loss_fn(head(backbone(x0)), head(backbone(x1)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return steps * batch / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--images", type=int, default=4096)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if not DATA.exists():
        sys.exit(f"benchmark data {DATA} is missing (../shared/data/cifar10_train_10k.npz)")
    arr = np.load(DATA, allow_pickle=False)["images"][: args.images]
    with tempfile.TemporaryDirectory() as tmp:
        npz = Path(tmp) / "subset.npz"
        src = np.load(DATA, allow_pickle=False)
        np.savez(npz, images=arr, labels=src["labels"][: args.images], classes=src["classes"])
        images = torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()
        base = make_parts()
        results: dict[str, float] = {}
        try:
            import lightly  # noqa: F401

            results["lightly (DataLoader, 2 workers)"] = lightly_pipeline(
                arr, args.steps, args.warmup, args.batch, copy.deepcopy(base), args.workers)
        except ImportError as exc:
            print(f"lightly row skipped: {exc} (see the module docstring)")
        results["bare loop (geohead tensors)"] = bare_loop(images, args.steps, args.warmup, args.batch, copy.deepcopy(base))
        results["geohead train()"] = geohead_pipeline(npz, args.steps, args.warmup, args.batch, copy.deepcopy(base))
    ref = results.get("lightly (DataLoader, 2 workers)")
    bare = results["bare loop (geohead tensors)"]
    print(f"\nBarlow Twins step, batch {args.batch}, resnet18_w16, CPU {torch.get_num_threads()} threads, "
          f"{args.steps} timed steps after {args.warmup} warm-up")
    print(f"{'pipeline':34s} {'img/s':>8s} {'vs lightly':>11s} {'vs bare':>8s}")
    for name, ips in results.items():
        vs_l = f"{ips / ref:10.2f}x" if ref else "         -"
        print(f"{name:34s} {ips:8.1f} {vs_l:>11s} {ips / bare:7.3f}x")


if __name__ == "__main__":
    main()
