"""Training throughput of backbone candidates on CPU: which one is the fast default, and channels_last.

One training step = forward + backward + SGD step of ``backbone(x).pow(2).mean()`` on a batch of
``--batch`` 32x32 views; reported as views/s, with and without ``channels_last``, side by side in
one run. Baseline: a 3-conv CNN (widths 16-32-64, stride-1 convs with max-pools, global pool;
the kind of network the project guide timed at ~1,200 views/s), which is not a timm model and so
cannot be exported as one; ``cnn3-s2`` is its cheaper stride-2 variant.

Run (in the project's environment, ``pip install -e .``)::

    python benchmarks/backbones.py            # all candidates
    python benchmarks/backbones.py --quick    # skip the slow ones
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch
from torch import nn

from geohead.backbones import create_backbone


def cnn3(pool: bool = True) -> nn.Module:
    """Baseline: three 3x3 convs of width 16-32-64 with BN/ReLU and a global average pool.

    ``pool=True``: stride-1 convs with 2x2 max-pools between them (full resolution first layer);
    ``pool=False``: stride-2 convs (cheaper).
    """
    layers: list[nn.Module] = []
    c = 3
    for i, w in enumerate((16, 32, 64)):
        if pool and i:
            layers.append(nn.MaxPool2d(2))
        layers += [nn.Conv2d(c, w, 3, stride=1 if pool else 2, padding=1, bias=False), nn.BatchNorm2d(w),
                   nn.ReLU(inplace=True)]
        c = w
    m = nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten())
    m.num_features = 64
    return m


CANDIDATES = {
    "cnn3-pool (baseline)": (lambda: cnn3(True), False),
    "cnn3-s2": (lambda: cnn3(False), False),
    "resnet18_w16 (default)": (lambda cl: create_backbone("resnet18_w16", channels_last=cl), False),
    "resnet18_w32": (lambda cl: create_backbone("resnet18_w32", channels_last=cl), False),
    "vit 96-d x4, patch 4": (
        lambda cl: create_backbone("vit_tiny_cifar", embed_dim=96, depth=4, num_heads=3, channels_last=cl), False),
    "convnext 16-128, patch 2": (
        lambda cl: create_backbone("convnext_atto", patch_size=2, depths=[1, 1, 1, 1], dims=[16, 32, 64, 128],
                                   channels_last=cl), False),
    "vit_tiny_cifar": (lambda cl: create_backbone("vit_tiny_cifar", channels_last=cl), True),
    "resnet18_cifar": (lambda cl: create_backbone("resnet18_cifar", channels_last=cl), True),
}


def throughput(model: nn.Module, batch: int, steps: int, repeats: int, channels_last: bool) -> list[float]:
    x = torch.randn(batch, 3, 32, 32)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step():
        loss = model(x).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    out = []
    for _ in range(repeats):
        t = time.perf_counter()
        for _ in range(steps):
            step()
        out.append(batch * steps / (time.perf_counter() - t))
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--quick", action="store_true", help="skip the slow candidates (ResNet-18 CIFAR, ViT-Ti)")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"train step (fwd+bwd+SGD), batch {args.batch} at 32x32, torch {torch.__version__}, {args.threads} threads")
    print(f"{'backbone':26s} {'params':>8s} {'d':>5s} {'layout':>14s} {'views/s best':>13s} {'median':>8s} {'x base':>7s}")
    base = None
    for name, (make, slow) in CANDIDATES.items():
        if slow and args.quick:
            continue
        for cl in (False, True):
            torch.manual_seed(0)
            model = make() if name.startswith("cnn3") else make(cl)
            if name.startswith("cnn3") and cl:
                model = model.to(memory_format=torch.channels_last)
            steps = 1 if slow else args.steps
            v = throughput(model, args.batch, steps, args.repeats, cl)
            best = max(v)
            if base is None:
                base = best
            n = sum(q.numel() for q in model.parameters()) / 1e6
            layout = "channels_last" if cl else "contiguous"
            print(f"{name:26s} {n:7.2f}M {model.num_features:5d} {layout:>14s} {best:13.0f} "
                  f"{statistics.median(v):8.0f} {best / base:7.2f}", flush=True)


if __name__ == "__main__":
    main()
