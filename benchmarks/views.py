"""Views per second of the SimCLR recipe: geohead's on-device views vs kornia vs lightly.

Three ways to turn a batch of 256 CIFAR-10 images into SimCLR's two views (RandomResizedCrop
0.08-1, flip, colour jitter (0.4, 0.4, 0.4, 0.1) p=0.8, grayscale p=0.2, no blur, normalise),
measured side by side in one run on the same images:

* ``geohead fused``  - ``make_view_fn("simclr")`` (default backend): the uint8 batch is indexed
  from memory and augmented as one tensor (one ``grid_sample`` for crop + flip, batched colour
  ops with per-sample factors), in the main process, on its device;
* ``geohead kornia`` - the same recipe through ``kornia.augmentation`` (backend="kornia");
* ``lightly``        - ``lightly.transforms.SimCLRTransform(input_size=32, cj_strength=0.5,
  gaussian_blur=0.0)`` on PIL images in a ``DataLoader`` with 2 worker processes (the usual
  per-image pipeline), baseline of the ratio column.

Run (lightly is not a geohead dependency; the ``bench`` extra installs it)::

    pip install -e ".[bench]"
    python benchmarks/views.py

Without lightly importable the lightly row is skipped (with the reason). Data:
``../shared/data/cifar10_train_10k.npz`` (relative to the repo root).

Measured 2026-12-03 on this project's 2-core CPU (shared with other sessions' jobs, load average
~2-3; torch 2.14.1, kornia 0.9.0, lightly 1.6.0; defaults: batch 256, 20 batches x 5 interleaved
rounds), views/s best / median of the rounds:

    --threads 2:  geohead fused 32,554 / 24,015   kornia 13,017 / 12,538   lightly 6,224 / 4,440
                  fused = 5.2x / 5.4x lightly, 2.5x / 1.9x kornia
    --threads 1:  geohead fused 23,590 / 22,140   kornia 11,731 / 11,136   lightly 6,121 / 5,986
                  fused = 3.9x / 3.7x lightly, 2.0x / 2.0x kornia

so the fused path meets the >= 3x goal against lightly and is ~2x kornia, which is why it is the
default (besides drawing every parameter from the caller's generator). Timings on this shared
machine vary by 2x between runs; run under the lock and compare within one run only.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "cifar10_train_10k.npz"


def _time(step, batches: int) -> float:
    """Seconds per batch over ``batches`` consecutive steps."""
    t = time.perf_counter()
    for _ in range(batches):
        step()
    return (time.perf_counter() - t) / batches


def geohead_step(images: torch.Tensor, backend: str, batch: int, device: str):
    from geohead.data.views import CIFAR10_MEAN, CIFAR10_STD, make_view_fn

    views = make_view_fn("simclr", img_size=32, mean=CIFAR10_MEAN, std=CIFAR10_STD, backend=backend)
    data = images.to(device)
    g = torch.Generator().manual_seed(0)

    def step():
        idx = torch.randint(0, data.shape[0], (batch,), generator=g)
        v = views(data[idx.to(device)], g)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        return v

    for _ in range(3):
        step()
    return step, (lambda: None), (lambda: None)


class _PILDataset(torch.utils.data.Dataset):
    def __init__(self, arr: np.ndarray, transform) -> None:
        self.arr, self.transform = arr, transform

    def __len__(self) -> int:
        return len(self.arr)

    def __getitem__(self, i: int):
        from PIL import Image

        return self.transform(Image.fromarray(self.arr[i])), 0


def lightly_step(arr: np.ndarray, batch: int, workers: int):
    """Step = next batch of a persistent 2-worker DataLoader over PIL images.

    Workers prefetch ``2 * workers`` batches while other pipelines are timed; ``before`` drains
    them untimed (so lightly gets no head start) and ``after`` waits for the refill (so the
    workers do not steal the cores from the next pipeline's timing).
    """
    from lightly.transforms import SimCLRTransform

    from geohead.data.views import CIFAR10_MEAN, CIFAR10_STD

    tf = SimCLRTransform(
        input_size=32, cj_strength=0.5, gaussian_blur=0.0, min_scale=0.08,
        normalize={"mean": list(CIFAR10_MEAN), "std": list(CIFAR10_STD)},
    )
    prefetch = 2
    loader = torch.utils.data.DataLoader(
        _PILDataset(arr, tf), batch_size=batch, shuffle=True, num_workers=workers,
        persistent_workers=workers > 0, drop_last=True, prefetch_factor=prefetch if workers else None,
    )
    it = iter(loader)

    def step():
        nonlocal it
        try:
            return next(it)
        except StopIteration:
            it = iter(loader)
            return next(it)

    def before():
        for _ in range(prefetch * workers):
            step()

    def after():
        time.sleep(0.5 * prefetch)

    for _ in range(3):  # workers started and warm
        (v1, v2), _ = step()
    assert v1.shape == (batch, 3, 32, 32) and v2.shape == (batch, 3, 32, 32)
    after()
    return step, before, after


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--batches", type=int, default=20, help="batches per repeat")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds over the pipelines")
    p.add_argument("--threads", type=int, default=2, help="torch threads of the main process")
    p.add_argument("--workers", type=int, default=2, help="DataLoader workers for lightly")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = p.parse_args(argv)
    if not DATA.is_file():
        sys.exit(f"skipped: {DATA} not found (real CIFAR-10 arrays, see ../shared/data/README.md)")
    torch.set_num_threads(args.threads)
    with np.load(DATA) as z:
        arr = z["images"]
    images = torch.from_numpy(arr).permute(0, 3, 1, 2).contiguous()
    print(f"SimCLR views, batch {args.batch} CIFAR-10 images (2 views each), {args.batches} batches x "
          f"{args.repeats} repeats, torch {torch.__version__}, {args.threads} threads, device {args.device}")
    pipes = {}
    pipes["geohead fused"] = geohead_step(images, "fused", args.batch, args.device)
    pipes["geohead kornia"] = geohead_step(images, "kornia", args.batch, args.device)
    lightly_name = f"lightly DataLoader({args.workers} workers)"
    try:
        pipes[lightly_name] = lightly_step(arr, args.batch, args.workers)
    except ImportError as e:
        print(f"lightly: skipped ({e}); see the module docstring for how to install it")
    # interleaved rounds: load from other processes hits every pipeline alike
    sec: dict[str, list[float]] = {k: [] for k in pipes}
    for _ in range(args.repeats):
        for name, (step, before, after) in pipes.items():
            before()
            sec[name].append(_time(step, args.batches))
            after()
    rows = [(k, 2 * args.batch / min(v), 2 * args.batch / statistics.median(v)) for k, v in sec.items()]
    base = rows[-1][1] if rows and rows[-1][0].startswith("lightly") else None
    print(f"{'pipeline':34s} {'views/s best':>13s} {'views/s median':>15s} {'x lightly (best/median)':>24s}")
    for name, best, med in rows:
        ratio = f"{best / base:11.2f} / {med / rows[-1][2]:.2f}" if base else f"{'-':>11s}"
        print(f"{name:34s} {best:13.0f} {med:15.0f} {ratio:>24s}")
    print(f"fused / kornia: {rows[0][1] / rows[1][1]:.2f}x (best), {rows[0][2] / rows[1][2]:.2f}x (median)")


if __name__ == "__main__":
    main()
