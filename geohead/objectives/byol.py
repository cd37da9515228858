"""BYOL (Grill et al. 2020, "Bootstrap Your Own Latent")."""
from __future__ import annotations

from typing import Sequence

from torch import Tensor
from torch.nn import functional as F

from geohead.objectives.base import Objective, check_pair
from geohead.objectives.ema import cosine_momentum

DISTANCES = ("cosine", "mse")


def prediction_loss(p: Tensor, t: Tensor, distance: str) -> Tensor:
    """Per-batch mean of ``‖p̂ − t̂‖² = 2 − 2 cos(p, t)`` ("cosine") or ``‖p − t‖²`` ("mse")."""
    if distance == "cosine":
        return (2 - 2 * F.cosine_similarity(p, t, dim=-1)).mean()
    return (p - t).pow(2).sum(-1).mean()


class BYOL(Objective):
    """BYOL, paper Eq. (2): L_θ,ξ = ‖q̄_θ(z_θ) − z̄'_ξ‖² = 2 − 2·⟨q_θ(z_θ), z'_ξ⟩/(‖q_θ(z_θ)‖‖z'_ξ‖),
    symmetrised as L + L̃ (the second view through the online network). The target z'_ξ comes
    from an EMA teacher (backbone + projector) with momentum τ = 1 − (1 − τ_base)(cos(πk/K)+1)/2,
    τ_base = 0.996; the online branch has a predictor q_θ of the projector's shape.

    Args:
        distance: ``"cosine"`` (the paper) or ``"mse"`` (unnormalised ‖p − t‖², whose Hessian in p
            is positive semi-definite: the premise of Thm 4.1).
        momentum_base: τ_base.

    Collapse: all predictions equal to the target gives zero loss and zero gradient; with
    ``distance="cosine"`` the loss is also flat along each embedding's own direction.
    """

    name = "byol"
    head_preset = "byol"
    predictor_preset = "byol_predictor"
    uses_teacher = True
    stop_gradient = True

    def __init__(self, distance: str = "cosine", momentum_base: float = 0.996) -> None:
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"unknown BYOL distance {distance!r}; valid values are {list(DISTANCES)}")
        if not 0.0 <= momentum_base <= 1.0:
            raise ValueError(f"BYOL momentum_base must be in [0, 1], got {momentum_base}")
        self.distance = distance
        self.cosine = distance == "cosine"
        self.momentum_base = float(momentum_base)

    def momentum(self, step: int, total_steps: int) -> float:
        return cosine_momentum(step, total_steps, self.momentum_base)

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        check_pair(a, b, "BYOL")
        return prediction_loss(a, b.detach(), self.distance)

    def forward(self, online: Sequence[Tensor], target: Sequence[Tensor] | None = None) -> Tensor:
        """``online = [p1, p2]`` predictions, ``target = [t1, t2]`` teacher projections."""
        if len(online) != 2 or target is None or len(target) != 2:
            raise ValueError("BYOL takes online=[p1, p2] and target=[t1, t2] (teacher projections)")
        return self.loss(online[0], target[1]) + self.loss(online[1], target[0])

    def hparams(self) -> dict[str, float | str]:
        return {"distance": self.distance, "momentum_base": self.momentum_base}
