"""Generation speed of the built-in shapes dataset: 10,000 images at 32x32, goal < 2 s on 2 cores.

Side by side in one run:

* ``make_shapes(10000)`` - geohead's vectorised renderer (one batch of tensor ops per class);
* baseline: the same renderer called one image at a time (what a per-sample ``Dataset.__getitem__``
  would do), timed on ``--loop-n`` images and reported per 10,000.

Run (in the project's environment, ``pip install -e .``)::

    python benchmarks/shapes_speed.py

Measured 2026-12-03 (2-core CPU shared with other jobs, load ~3, torch 2.14.1, 2 threads):
make_shapes 0.18 s best / 0.20 s median (55,700 images/s); one image per call 3.09 s per 10,000;
ratio 17.2x; goal met.
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from geohead.data.shapes import make_shapes, render_shapes


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=10_000)
    p.add_argument("--img-size", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--loop-n", type=int, default=300, help="images rendered one by one for the baseline")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    make_shapes(100, img_size=args.img_size)  # warm-up (allocator, kernels)
    sec = []
    for r in range(args.repeats):
        t = time.perf_counter()
        d = make_shapes(args.n, img_size=args.img_size, seed=r)
        sec.append(time.perf_counter() - t)
    assert d.images.shape == (args.n, 3, args.img_size, args.img_size)
    # baseline: one image per call, same factors
    q = d.subset(torch.arange(args.loop_n))
    g = torch.Generator().manual_seed(0)
    t = time.perf_counter()
    for i in range(args.loop_n):
        render_shapes(q.labels[i : i + 1], {k: v[i : i + 1] for k, v in q.factors.items()}, args.img_size, g)
    loop = (time.perf_counter() - t) / args.loop_n * args.n
    best, med = min(sec), statistics.median(sec)
    print(f"shapes: {args.n} images {args.img_size}x{args.img_size}, torch {torch.__version__}, "
          f"{args.threads} threads, {args.repeats} repeats")
    print(f"{'renderer':36s} {'s best':>8s} {'s median':>9s} {'images/s':>10s} {'x baseline':>11s}")
    print(f"{'make_shapes (vectorised)':36s} {best:8.2f} {med:9.2f} {args.n / best:10.0f} {loop / best:11.1f}")
    print(f"{'one image per call (baseline)':36s} {loop:8.2f} {'':9s} {args.n / loop:10.0f} {1.0:11.1f}")
    print(f"goal < 2 s: {'met' if best < 2 else 'NOT met'} (best), {'met' if med < 2 else 'NOT met'} (median)")


if __name__ == "__main__":
    main()
