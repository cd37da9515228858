"""Worker for tests/test_distributed.py, run under torchrun with the gloo backend.

Each rank takes its half of a fixed global batch, runs every objective through a DDP-wrapped
linear head, and writes its loss and the (DDP-averaged) parameter gradients to OUT/rank{r}.json.
"""
from __future__ import annotations

import json
import os
import sys

import torch
import torch.distributed as dist
from torch import nn

from geohead import GeometricHead
from geohead.objectives import get_objective

GLOBAL_B, D, K = 8, 6, 5


def batch() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(123)
    return [torch.randn(GLOBAL_B, D, generator=g, dtype=torch.float64) for _ in range(4)]


def make_head(seed: int) -> GeometricHead:
    torch.manual_seed(seed)
    return GeometricHead(D, K, hidden_dim=7, depth=2, activation="silu", norm=None).double()


def run(name: str, views: list[torch.Tensor], wrap) -> tuple[float, dict[str, list[float]]]:
    """One forward/backward of objective ``name``; ``wrap`` turns the head into DDP or not."""
    objective = get_objective(name, **({"out_dim": K, "warmup_teacher_temp_epochs": 0} if name == "dino" else {})).double()
    head = make_head(0)
    model = wrap(head)
    x1, x2, x3, x4 = views
    e1, e2 = model(x1), model(x2)
    if name in ("byol", "simsiam"):
        with torch.no_grad():
            t1, t2 = model(x3), model(x4)
        loss = objective([e1, e2], [t1, t2])
    elif name == "dino":
        with torch.no_grad():
            t1, t2 = model(x3), model(x4)
        objective.train()
        loss = objective([e1, e2], [t1, t2])
    else:
        loss = objective([e1, e2])
    loss.backward()
    grads = {n: p.grad.flatten().tolist() for n, p in head.named_parameters()}
    extra = {"center": objective.center.flatten().tolist()} if name == "dino" else {}
    return loss.item(), {**grads, **extra}


def main() -> None:
    out = sys.argv[1]
    names = sys.argv[2].split(",")
    # the process group meets through a file in OUT rather than the TCP port torchrun hands out
    # (MASTER_PORT): one less port to race for on a busy machine
    dist.init_process_group("gloo", init_method=f"file://{os.path.join(out, 'pg_store')}",
                            rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
    rank, world = dist.get_rank(), dist.get_world_size()
    per = GLOBAL_B // world
    local = [v[rank * per:(rank + 1) * per] for v in batch()]
    result = {}
    for name in names:
        loss, grads = run(name, local, lambda h: nn.parallel.DistributedDataParallel(h))
        t = torch.tensor([loss], dtype=torch.float64)
        dist.all_reduce(t)
        result[name] = {"loss_mean": float(t) / world, "loss": loss, "grads": grads}
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
