"""DINO (Caron et al. 2021, "Emerging Properties in Self-Supervised Vision Transformers")."""
from __future__ import annotations

from typing import Any, Sequence

import torch
from torch import Tensor
from torch.nn import functional as F

from geohead import distributed
from geohead.objectives.base import Objective, check_pair
from geohead.objectives.ema import cosine_momentum


class DINO(Objective):
    """DINO self-distillation, paper Eq. (2)–(3) and Alg. 1:

        P_t = softmax((g_t(x) − c)/τ_t),   P_s = softmax(g_s(x')/τ_s),
        L = Σ_{x ∈ {x^g_1, x^g_2}} Σ_{x' ∈ V, x' ≠ x} H(P_t(x), P_s(x')),   H(a, b) = −a·log b,

    averaged over the pairs (as the official code does); the centre c follows
    c ← m c + (1 − m) mean(g_t(x)) over the (global) batch after each step.

    Args:
        out_dim: K, the number of prototypes (size of the centre).
        student_temp: τ_s = 0.1.
        teacher_temp: final τ_t = 0.07, reached by a linear warm-up from ``warmup_teacher_temp``
            = 0.04 over ``warmup_teacher_temp_epochs`` = 30 epochs (paper, App. "Implementation").
        center_momentum: m = 0.9.
        momentum_base: teacher EMA τ from 0.996 to 1 on a cosine schedule.

    ``loss(s, t)`` is one pair's H with the current centre and temperature, ``t`` the teacher's
    raw logits. Collapse: a constant teacher output is removed by centring (uniform P_t) and
    counteracted by sharpening (small τ_t); the two balance collapse modes (paper Sec. 5.3).
    """

    name = "dino"
    concat_views = True
    target_views = 2
    head_preset = "dino"
    uses_teacher = True
    stop_gradient = True

    def __init__(
        self,
        out_dim: int = 65536,
        student_temp: float = 0.1,
        teacher_temp: float = 0.07,
        warmup_teacher_temp: float = 0.04,
        warmup_teacher_temp_epochs: float = 30,
        center_momentum: float = 0.9,
        momentum_base: float = 0.996,
    ) -> None:
        super().__init__()
        if not (isinstance(out_dim, int) and out_dim >= 1):
            raise ValueError(f"DINO out_dim must be a positive integer, got {out_dim!r}")
        for key, value in dict(student_temp=student_temp, teacher_temp=teacher_temp, warmup_teacher_temp=warmup_teacher_temp).items():
            if not value > 0:
                raise ValueError(f"DINO {key} must be > 0, got {value}")
        if not 0.0 <= center_momentum <= 1.0:
            raise ValueError(f"DINO center_momentum must be in [0, 1], got {center_momentum}")
        if not 0.0 <= momentum_base <= 1.0:
            raise ValueError(f"DINO momentum_base must be in [0, 1], got {momentum_base}")
        if warmup_teacher_temp_epochs < 0:
            raise ValueError(f"DINO warmup_teacher_temp_epochs must be >= 0, got {warmup_teacher_temp_epochs}")
        self.out_dim = out_dim
        self.student_temp = float(student_temp)
        self.final_teacher_temp = float(teacher_temp)
        self.warmup_teacher_temp = float(warmup_teacher_temp)
        self.warmup_teacher_temp_epochs = float(warmup_teacher_temp_epochs)
        self.center_momentum = float(center_momentum)
        self.momentum_base = float(momentum_base)
        self.teacher_temp = self.warmup_teacher_temp if warmup_teacher_temp_epochs > 0 else self.final_teacher_temp
        self.register_buffer("center", torch.zeros(1, out_dim))

    @classmethod
    def args_for_head(cls, args: dict[str, Any], head_out_dim: int) -> dict[str, Any]:
        """``out_dim`` (the prototypes) defaults to the head's output width and must equal it."""
        args = dict(args)
        args.setdefault("out_dim", head_out_dim)
        if args["out_dim"] != head_out_dim:
            raise ValueError(
                f"objective_args.out_dim={args['out_dim']} but the head has {head_out_dim} prototypes; "
                "make them equal (head.spec.prototypes)"
            )
        return args

    def set_epoch(self, epoch: float) -> None:
        """Linear teacher-temperature warm-up; ``epoch`` may be fractional."""
        w = self.warmup_teacher_temp_epochs
        if w > 0 and epoch < w:
            self.teacher_temp = self.warmup_teacher_temp + (self.final_teacher_temp - self.warmup_teacher_temp) * epoch / w
        else:
            self.teacher_temp = self.final_teacher_temp

    def momentum(self, step: int, total_steps: int) -> float:
        return cosine_momentum(step, total_steps, self.momentum_base)

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        """H(P_t(b), P_s(a)) averaged over the batch: ``a`` student logits, ``b`` teacher logits."""
        check_pair(a, b, "DINO")
        if a.shape[1] != self.out_dim:
            raise ValueError(f"DINO was built with out_dim={self.out_dim} but got logits of width {a.shape[1]}")
        p_t = F.softmax((b.detach() - self.center) / self.teacher_temp, dim=-1)
        return -(p_t * F.log_softmax(a / self.student_temp, dim=-1)).sum(-1).mean()

    def forward(self, online: Sequence[Tensor], target: Sequence[Tensor] | None = None) -> Tensor:
        """``online``: student logits of every crop (global crops first); ``target``: teacher
        logits of the global crops. Updates the centre when the module is in training mode."""
        if target is None or len(target) < 1 or len(online) < 2:
            raise ValueError("DINO takes online=[student logits per crop] (>= 2) and target=[teacher logits per global crop]")
        total, pairs = online[0].new_zeros(()), 0
        for iq, t in enumerate(target):
            for v, s in enumerate(online):
                if v == iq:
                    continue
                total = total + self.loss(s, t)
                pairs += 1
        if self.training:
            self.update_center(torch.cat([t.detach() for t in target]))
        return total / pairs

    @torch.no_grad()
    def update_center(self, teacher_logits: Tensor) -> None:
        """c ← m c + (1 − m) · mean over the global batch of the teacher logits (B, K)."""
        batch_center = distributed.all_reduce_mean(teacher_logits.mean(0, keepdim=True))
        self.center.mul_(self.center_momentum).add_(batch_center * (1 - self.center_momentum))

    def hparams(self) -> dict[str, float]:
        return {
            "out_dim": self.out_dim, "student_temp": self.student_temp, "teacher_temp": self.final_teacher_temp,
            "warmup_teacher_temp": self.warmup_teacher_temp,
            "warmup_teacher_temp_epochs": self.warmup_teacher_temp_epochs,
            "center_momentum": self.center_momentum, "momentum_base": self.momentum_base,
        }
