"""Cross-process helpers for losses that are defined over the global batch.

Every function is the identity (or a no-op) when ``torch.distributed`` is not initialised or
the world has one process, so single-process code pays nothing.

Gradient convention: :func:`gather`'s backward sums the incoming gradients of all ranks (as
``torch.distributed.nn.functional.all_gather`` did; that function is deprecated and warns on
every call, so geohead has its own autograd function over the public ``all_gather`` and
``all_reduce``). When every rank computes the same global loss from the gathered batch, each
rank's local gradient is ``world_size ×`` the gradient of the global loss; DDP's gradient
averaging divides it back, so parameter gradients equal those of one process on the whole batch.
"""
from __future__ import annotations

import os

import torch
from torch import Tensor


def is_distributed() -> bool:
    """True inside an initialised process group of more than one process."""
    return torch.distributed.is_available() and torch.distributed.is_initialized() and torch.distributed.get_world_size() > 1


def join_from_env() -> bool:
    """Join the process group that torchrun describes (WORLD_SIZE > 1); gloo on CPU, NCCL on GPU.
    Returns whether this call initialised it (the caller then destroys it)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or torch.distributed.is_initialized():
        return False
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    torch.distributed.init_process_group(backend)
    return True


def world_size() -> int:
    return torch.distributed.get_world_size() if is_distributed() else 1


def rank() -> int:
    return torch.distributed.get_rank() if is_distributed() else 0


class _AllGather(torch.autograd.Function):
    """Forward: the ranks' (B, ...) tensors concatenated in rank order. Backward: the gradient of
    the gathered batch summed over ranks (all_reduce), this rank's rows of it."""

    @staticmethod
    def forward(ctx, x: Tensor) -> Tensor:  # type: ignore[override]
        x = x.contiguous()
        parts = [torch.empty_like(x) for _ in range(torch.distributed.get_world_size())]
        torch.distributed.all_gather(parts, x)
        ctx.rows, ctx.rank = x.shape[0], torch.distributed.get_rank()
        return torch.cat(parts, dim=0)

    @staticmethod
    def backward(ctx, grad: Tensor) -> Tensor:  # type: ignore[override]
        grad = grad.contiguous().clone()
        torch.distributed.all_reduce(grad)
        return grad[ctx.rank * ctx.rows:(ctx.rank + 1) * ctx.rows]


def gather(x: Tensor) -> Tensor:
    """Concatenate ``x`` (B, ...) of every rank along dim 0 in rank order, carrying gradients
    (every rank must pass the same B)."""
    if not is_distributed():
        return x
    return _AllGather.apply(x)


@torch.no_grad()
def all_reduce_mean(x: Tensor) -> Tensor:
    """Average of ``x`` over ranks (no gradient); ``x`` itself when not distributed."""
    if not is_distributed():
        return x
    y = x.clone()
    torch.distributed.all_reduce(y)
    return y / torch.distributed.get_world_size()
