"""Cross-process helpers for losses that are defined over the global batch.

Every function is the identity (or a no-op) when ``torch.distributed`` is not initialised or
the world has one process, so single-process code pays nothing.

Gradient convention: :func:`gather` uses ``torch.distributed.nn.functional.all_gather``, whose
backward sums the incoming gradients of all ranks. When every rank computes the same global
loss from the gathered batch, each rank's local gradient is ``world_size ×`` the gradient of the
global loss; DDP's gradient averaging divides it back, so parameter gradients equal those of
one process on the whole batch.
"""
from __future__ import annotations

import torch
from torch import Tensor


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


def world_size() -> int:
    return torch.distributed.get_world_size() if is_distributed() else 1


def rank() -> int:
    return torch.distributed.get_rank() if is_distributed() else 0


def gather(x: Tensor) -> Tensor:
    """Concatenate ``x`` (B, ...) of every rank along dim 0 in rank order, carrying gradients."""
    if not is_distributed():
        return x
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(x.contiguous()), dim=0)


@torch.no_grad()
def all_reduce_mean(x: Tensor) -> Tensor:
    """Average of ``x`` over ranks (no gradient); ``x`` itself when not distributed."""
    if not is_distributed():
        return x
    y = x.clone()
    torch.distributed.all_reduce(y)
    return y / torch.distributed.get_world_size()
