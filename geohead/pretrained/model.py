"""Any ``nn.Module`` head, measured as found: its widths from a forward on real features, a
one-line description of its layers, and a diverged model named as such.

:func:`found_head` runs the backbone on a few real images and the head on those features; a
head without integer ``in_dim``/``out_dim`` (a plain ``nn.Sequential`` MLP, lightly's heads) is
wrapped in :class:`SizedHead`, which records the widths the forward found and computes exactly
what the head computes.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from geohead.errors import DivergedModelError

#: Features larger than this in magnitude overflow the float32 covariance (its square > 1e38 / N):
#: a model that produces them has diverged.
MAX_FEATURE = 1e15
#: Layers :func:`describe_module` lists before "…".
MAX_LAYERS = 8


class SizedHead(nn.Module):
    """``head`` with the widths a forward found: (B, in_dim) -> (B, out_dim), outputs unchanged."""

    def __init__(self, head: nn.Module, in_dim: int, out_dim: int) -> None:
        super().__init__()
        self.head, self.in_dim, self.out_dim = head, int(in_dim), int(out_dim)

    def forward(self, z: Tensor) -> Tensor:
        return self.head(z).flatten(1)


def _layer(m: nn.Module) -> str:
    if isinstance(m, nn.Linear):
        return f"Linear {m.in_features}→{m.out_features}" + ("" if m.bias is not None else " (no bias)")
    return type(m).__name__


def describe_module(module: nn.Module) -> str:
    """``"Sequential: Linear 128→64, BatchNorm1d, ReLU, Linear 64→32"``: the class, then its leaf
    layers in order (at most :data:`MAX_LAYERS`, then "…")."""
    leaves = [m for m in module.modules() if not list(m.children()) and m is not module]
    names = [_layer(m) for m in leaves]
    body = ", ".join(names[:MAX_LAYERS]) + (", …" if len(names) > MAX_LAYERS else "")
    return f"{type(module).__name__}: {body}" if body else _layer(module)


def check_finite_features(x: Tensor, what: str) -> None:
    """Raise :class:`DivergedModelError` when ``x`` (N, D) holds NaN/inf or values above
    :data:`MAX_FEATURE` (an ill-conditioned, diverged model)."""
    bad = ~torch.isfinite(x)
    if bool(bad.any()):
        rows = int(bad.flatten(1).any(1).sum())
        raise DivergedModelError(f"the model has diverged: its {what} are not finite (NaN/inf in {rows} of {x.shape[0]} "
                                 "rows); diagnose a checkpoint from before the divergence (lower the learning rate)")
    top = float(x.abs().max()) if x.numel() else 0.0
    if top > MAX_FEATURE:
        raise DivergedModelError(f"the model has diverged: its {what} reach {top:.3g} (above {MAX_FEATURE:.0e}), too "
                                 "ill-conditioned to measure; diagnose a checkpoint from before the divergence")


def found_head(encode: Callable[[Tensor], Tensor], head: nn.Module, images01: Tensor) -> tuple[nn.Module, dict[str, Any]]:
    """The head to measure and what a forward on ``images01`` ((B, C, S, S) in [0, 1]) found:
    ``{"in_dim", "out_dim", "head": description}``. Raises :class:`DivergedModelError` for
    non-finite or huge features, a ValueError naming the widths when the head does not take them."""
    with torch.no_grad():
        z = encode(images01).float()
        check_finite_features(z, "backbone features")
        try:
            e = head(z)
        except RuntimeError as exc:
            raise ValueError(f"the head does not take the backbone's features of shape {tuple(z.shape)} ({exc}); give "
                             f"a head whose input width is {z.shape[1]}") from None
        e = e.flatten(1).float()
        check_finite_features(e, "head outputs")
    d, k = int(z.shape[1]), int(e.shape[1])
    info = {"in_dim": d, "out_dim": k, "head": describe_module(head)}
    if isinstance(getattr(head, "in_dim", None), int) and isinstance(getattr(head, "out_dim", None), int):
        return head, info
    return SizedHead(head, d, k).eval(), info


__all__ = ["MAX_FEATURE", "SizedHead", "check_finite_features", "describe_module", "found_head"]
