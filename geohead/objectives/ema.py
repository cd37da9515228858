"""EMA teachers (BYOL's target network, DINO's teacher) and their momentum schedule."""
from __future__ import annotations

import copy
import math

import torch
from torch import nn


def cosine_momentum(step: int, total_steps: int, base: float = 0.996, final: float = 1.0) -> float:
    """BYOL Sec. 3.2 / DINO Sec. 3.1: τ = 1 − (1 − τ_base)(cos(πk/K) + 1)/2, from ``base`` at
    k = 0 to ``final`` at k = K (generalised to any final value)."""
    if total_steps <= 0:
        return final
    k = min(max(step, 0), total_steps)
    return final - (final - base) * (math.cos(math.pi * k / total_steps) + 1) / 2


def make_teacher(module: nn.Module) -> nn.Module:
    """A frozen copy of ``module`` (no gradients) to be updated by :func:`ema_update_`."""
    teacher = copy.deepcopy(module)
    for p in teacher.parameters():
        p.requires_grad_(False)
    return teacher


@torch.no_grad()
def ema_update_(teacher: nn.Module, student: nn.Module, momentum: float) -> None:
    """ξ ← τ ξ + (1 − τ) θ for every parameter; buffers (BatchNorm statistics) are copied."""
    t_params = list(teacher.parameters())
    s_params = list(student.parameters())
    if len(t_params) != len(s_params):
        raise ValueError("teacher and student have different parameter lists")
    if t_params:
        torch._foreach_lerp_(t_params, [s.detach() for s in s_params], 1.0 - momentum)
    for tb, sb in zip(teacher.buffers(), student.buffers()):
        tb.copy_(sb)
