"""Frozen features: backbone and head outputs of a whole image set, computed once, in eval mode."""
from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import Tensor, nn


def to_float(images: Tensor, mean: Sequence[float], std: Sequence[float]) -> Tensor:
    """uint8 (B, 3, H, W) -> float32 normalised ``(x / 255 - mean) / std`` on the same device."""
    m = torch.tensor(mean, device=images.device, dtype=torch.float32).view(1, -1, 1, 1)
    s = torch.tensor(std, device=images.device, dtype=torch.float32).view(1, -1, 1, 1)
    return (images.float() / 255.0 - m) / s


def image_encoder(
    backbone: nn.Module,
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device | str = "cpu",
    channels_last: bool = False,
) -> Callable[[Tensor], Tensor]:
    """``encode(x)``: images in [0, 1] (N, 3, H, W) -> backbone features (N, d), float32 on
    ``device``: normalised ``(x - mean) / std``, channels-last when asked, without gradients. The
    backbone runs in whatever mode the caller left it (eval for frozen features); this is the
    ``encode`` that :func:`geohead.geometry.orbits.build_orbits` takes."""
    m = torch.tensor(mean, dtype=torch.float32, device=device).view(1, -1, 1, 1)
    s = torch.tensor(std, dtype=torch.float32, device=device).view(1, -1, 1, 1)

    @torch.no_grad()
    def encode(x: Tensor) -> Tensor:
        x = (x.to(device, torch.float32) - m) / s
        if channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return backbone(x).float()

    return encode


@torch.no_grad()
def extract(
    backbone: nn.Module,
    head: nn.Module | None,
    images: Tensor,
    mean: Sequence[float],
    std: Sequence[float],
    device: torch.device | str = "cpu",
    batch_size: int = 512,
    channels_last: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Backbone features (N, d) and head outputs (N, k) of uint8 ``images`` (N, 3, H, W).

    Both modules run in eval mode (BatchNorm uses running statistics); their modes are restored
    afterwards. Results are float32 on the CPU.
    """
    modes = [(m, m.training) for m in (backbone, head) if m is not None]
    for m, _ in modes:
        m.eval()
    feats, outs = [], []
    try:
        for i in range(0, len(images), batch_size):
            x = to_float(images[i:i + batch_size].to(device, non_blocking=True), mean, std)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            f = backbone(x)
            feats.append(f.float().cpu())
            if head is not None:
                outs.append(head(f).float().cpu())
    finally:
        for m, mode in modes:
            m.train(mode)
    return torch.cat(feats), (torch.cat(outs) if head is not None else None)
