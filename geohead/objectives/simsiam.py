"""SimSiam (Chen & He 2021, "Exploring Simple Siamese Representation Learning")."""
from __future__ import annotations

from typing import Sequence

from torch import Tensor
from torch.nn import functional as F

from geohead.objectives.base import Objective, check_pair
from geohead.objectives.byol import DISTANCES


class SimSiam(Objective):
    """SimSiam, paper Eq. (1)–(4): D(p, z) = −(p/‖p‖)·(z/‖z‖) with stop-gradient on z,
    L = ½ D(p1, stopgrad(z2)) + ½ D(p2, stopgrad(z1)); p = h(z) from a bottleneck predictor.

    Args:
        distance: ``"cosine"`` (the paper) or ``"mse"`` (½‖p − z‖², positive semi-definite in p:
            the premise of Thm 4.1; the "MSE to target" rows of docs/theory.md, "Measured facts").

    Collapse: a constant output with p = z minimises the loss (D = −1), gradient zero; the
    stop-gradient and the predictor are what prevent it (paper Sec. 4).
    """

    name = "simsiam"
    head_preset = "simsiam"
    predictor_preset = "simsiam_predictor"
    stop_gradient = True

    def __init__(self, distance: str = "cosine") -> None:
        super().__init__()
        if distance not in DISTANCES:
            raise ValueError(f"unknown SimSiam distance {distance!r}; valid values are {list(DISTANCES)}")
        self.distance = distance
        self.cosine = distance == "cosine"

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        check_pair(a, b, "SimSiam")
        b = b.detach()
        if self.distance == "cosine":
            return -F.cosine_similarity(a, b, dim=-1).mean()
        return 0.5 * (a - b).pow(2).sum(-1).mean()

    def forward(self, online: Sequence[Tensor], target: Sequence[Tensor] | None = None) -> Tensor:
        """``online = [p1, p2]`` predictions, ``target = [z1, z2]`` projections (detached here)."""
        if len(online) != 2 or target is None or len(target) != 2:
            raise ValueError("SimSiam takes online=[p1, p2] (predictions) and target=[z1, z2] (projections)")
        return 0.5 * self.loss(online[0], target[1]) + 0.5 * self.loss(online[1], target[0])

    def hparams(self) -> dict[str, str]:
        return {"distance": self.distance}
