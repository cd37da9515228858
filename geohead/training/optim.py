"""Optimisers (LARS from timm, SGD, AdamW) and the warm-up + cosine learning-rate schedule."""
from __future__ import annotations

import math

import torch
from torch import nn

from geohead.training.config import OptimConfig


def param_groups(modules: list[nn.Module], weight_decay: float) -> list[dict]:
    """Two groups: weights (decayed, LARS-adapted) and biases/normalisation parameters (neither).

    Excluding 1-d parameters from weight decay and from LARS' trust ratio is the practice of
    SimCLR, BYOL and Barlow Twins' official code and solo-learn.
    """
    decay, no_decay, seen = [], [], set()
    for module in modules:
        for p in module.parameters():
            if not p.requires_grad or id(p) in seen:
                continue
            seen.add(id(p))
            (no_decay if p.ndim <= 1 else decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def build_optimizer(cfg: OptimConfig, modules: list[nn.Module], device_type: str = "cpu") -> torch.optim.Optimizer:
    """The optimiser named by ``cfg.name`` at the scaled learning rate ``lr * batch / 256``.

    LARS is timm's implementation (``timm.optim.Lars``): it applies the trust ratio only to groups
    with non-zero weight decay, i.e. not to biases and normalisation parameters.
    """
    groups = param_groups(modules, cfg.weight_decay)
    lr = scaled_lr(cfg)
    if cfg.name == "lars":
        from timm.optim import Lars

        return Lars(groups, lr=lr, momentum=cfg.momentum, trust_coeff=cfg.lars_trust_coeff)
    if cfg.name == "sgd":
        return torch.optim.SGD(groups, lr=lr, momentum=cfg.momentum)
    fused = device_type == "cuda"
    return torch.optim.AdamW(groups, lr=lr, betas=tuple(cfg.betas), fused=fused or None)


def scaled_lr(cfg: OptimConfig) -> float:
    return cfg.lr * cfg.batch_size / 256


def lr_at(step: int, total_steps: int, warmup_steps: int, base_lr: float, final_ratio: float = 0.0) -> float:
    """Linear warm-up from 0 over ``warmup_steps``, then cosine decay to ``final_ratio * base_lr``."""
    if warmup_steps > 0 and step < warmup_steps:
        return base_lr * (step + 1) / warmup_steps
    span = max(1, total_steps - warmup_steps)
    t = min(1.0, (step - warmup_steps) / span)
    final = base_lr * final_ratio
    return final + (base_lr - final) * 0.5 * (1 + math.cos(math.pi * t))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
