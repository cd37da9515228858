"""What GeometryMonitor costs a training loop: step time with vs without the monitor.

The setting of ``geohead/recipes/barlow_shapes_cpu.toml``: Barlow Twins on the built-in shapes data,
``resnet18_w16`` (channels-last), the recipe's 512-512 SiLU head, batch 256 (two views, one
concatenated forward), SGD; the monitor on the backbone and the head with the recipe's
``monitor_every`` = 20. The loop is a plain PyTorch loop (what the monitor is for).

Two measurements, because a shared CPU makes wall-clock ratios noisy:

* end to end: ``--rounds`` pairs of adjacent blocks of ``every`` steps, without then with the
  monitor (a fresh one per block: one record each; same model, the next batches); the ratio of
  each pair's block times, with / without, in wall-clock and process CPU time, and their median;
* direct: the time a record's measurements take (``monitor_seconds`` of each record: RankMe,
  α-ReQ and the std of normalised embeddings of backbone and head, two SVDs and two
  eigendecompositions in float64), divided by ``every`` and by the median step time without:
  the overhead per step.

With ``--hessian-every K`` the H_eff records (32 rows of each view, 10 Lanczos steps, float64)
are timed too (``hessian_seconds`` of each record).

Run (a few minutes on 2 CPU cores; ``pip install -e .``, nothing else)::

    python benchmarks/monitor_overhead.py --threads 1 --rounds 10
    python benchmarks/monitor_overhead.py --threads 1 --rounds 2 --every 10 --hessian-every 1
    python benchmarks/monitor_overhead.py --rounds 1 --every 2 --batch 32   # a smoke run

Measured 2026-12-03 on the reference machine (2 cores shared with other jobs, load ~4, torch
2.14.1, one thread: two threads on the loaded machine made every step 3-5x slower and the block
times too noisy to compare):

    batch 256, every 20, 10 pairs of 20-step blocks, 1 threads; step without monitor: 0.423 s median
    block ratio with / without    1.040  1.268  1.007  0.995  1.021  1.107  0.985  0.969  1.035  0.953   (wall clock)
                                  1.109  0.995  1.003  1.018  1.013  1.119  0.985  0.981  1.040  0.947   (process CPU time)
    ratio, median of the pairs: wall 1.014, CPU 1.008
    one record's measurements: 82 ms median = 0.97 % of a step at every=20

    (--every 10 --hessian-every 1) H_eff record: 0.19 s median = 0.46 steps
"""
from __future__ import annotations

import argparse
import statistics
import time

import torch

from geohead import GeometricHead
from geohead.backbones import create_backbone
from geohead.data import make_shapes, make_view_fn
from geohead.monitor import GeometryMonitor
from geohead.objectives import get_objective


def parser() -> argparse.ArgumentParser:
    """The command line of :func:`main`."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=4, help="pairs of blocks (without, with), each of --every steps")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--every", type=int, default=20)
    p.add_argument("--hessian-every", type=int, default=0, choices=(0, 1),
                   help="1: time an H_eff on each block's record (a fresh monitor per block makes one record); 0: off")
    p.add_argument("--n", type=int, default=4096, help="shapes images")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--verbose", action="store_true", help="print every step's wall time")
    return p


def training_step(n: int, batch: int):
    """The recipe's setting, seeded: ``(step, backbone, head, objective)``, where ``step()`` runs one
    SGD step on ``batch`` random images of ``n`` shapes (two views, one concatenated forward) and
    returns its (wall-clock, process CPU) seconds."""
    torch.manual_seed(0)
    data = make_shapes(n, seed=0)
    views = make_view_fn("barlow", 32, data.mean, data.std, hue=0.5, crop_scale=(0.3, 1.0))
    backbone = create_backbone("resnet18_w16")
    head = GeometricHead.preset("barlow", backbone.geohead_config["num_features"], hidden_dim=512, out_dim=512)
    objective = get_objective("barlow")
    opt = torch.optim.SGD([*backbone.parameters(), *head.parameters()], lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(0)

    def step() -> tuple[float, float]:
        t0, c0 = time.perf_counter(), time.process_time()
        idx = torch.randint(0, n, (batch,), generator=g)
        x0, x1 = views(data.images[idx], generator=g)
        x = torch.cat([x0, x1]).contiguous(memory_format=torch.channels_last)
        z = head(backbone(x))
        loss = objective(list(z.chunk(2)))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        return time.perf_counter() - t0, time.process_time() - c0

    return step, backbone, head, objective


def measure_blocks(step, backbone, head, objective, rounds: int, every: int, hessian_every: int) -> tuple[list, list]:
    """Two warm-up steps, then ``rounds`` pairs of adjacent blocks of ``every`` steps, without then
    with a fresh monitor (one record per block), so a change of load on a shared machine hits both
    arms alike. Returns (pairs of the blocks' step times, the monitors' records)."""
    for _ in range(2):  # warm-up
        step()
    pairs, records = [], []
    for _ in range(rounds):
        without = [step() for _ in range(every)]
        with GeometryMonitor(backbone, head, every=every, objective=objective,
                             hessian_every=hessian_every) as monitor:
            with_monitor = [step() for _ in range(every)]
        records += monitor.history
        pairs.append((without, with_monitor))
    return pairs, records


def report(args: argparse.Namespace, pairs: list, records: list) -> dict[str, float]:
    """Print the block ratios and a record's cost per step; return :func:`main`'s numbers."""
    def total(block, i):
        return sum(t[i] for t in block)

    wall = [total(b, 0) / total(a, 0) for a, b in pairs]
    cpu = [total(b, 1) / total(a, 1) for a, b in pairs]
    per_step = statistics.median(t[0] for a, _ in pairs for t in a)
    record_s = statistics.median(r["monitor_seconds"] for r in records)
    print(f"batch {args.batch}, every {args.every}, {args.rounds} pairs of {args.every}-step blocks, "
          f"{torch.get_num_threads()} threads; step without monitor: {per_step:.3f} s median")
    print(f"{'block ratio with / without':28s} " + " ".join(f"{x:6.3f}" for x in wall) + "   (wall clock)")
    print(f"{'':28s} " + " ".join(f"{x:6.3f}" for x in cpu) + "   (process CPU time)")
    print(f"ratio, median of the pairs: wall {statistics.median(wall):.3f}, CPU {statistics.median(cpu):.3f}")
    if args.verbose:
        for i, (a, b) in enumerate(pairs):
            print(f"pair {i} without:", " ".join(f"{t[0]:.2f}" for t in a))
            print(f"pair {i} with:   ", " ".join(f"{t[0]:.2f}" for t in b))
    print(f"one record's measurements: {record_s * 1e3:.0f} ms median = {record_s / args.every / per_step * 100:.2f} % "
          f"of a step at every={args.every}")
    out = {"ratio_wall": statistics.median(wall), "ratio_cpu": statistics.median(cpu), "record_seconds": record_s,
           "step_seconds": per_step}
    hessian = [r["hessian_seconds"] for r in records if "hessian_seconds" in r]
    if hessian:
        h = statistics.median(hessian)
        print(f"H_eff record: {h:.2f} s median = {h / per_step:.2f} steps")
        out["hessian_seconds"] = h
    return out


def main(argv: list[str] | None = None) -> dict[str, float]:
    args = parser().parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    step, backbone, head, objective = training_step(args.n, args.batch)
    pairs, records = measure_blocks(step, backbone, head, objective, args.rounds, args.every, args.hessian_every)
    return report(args, pairs, records)


if __name__ == "__main__":
    main()
