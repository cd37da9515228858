"""SimCLR's NT-Xent loss (Chen et al. 2020, "A Simple Framework for Contrastive Learning")."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from geohead import distributed
from geohead.objectives.base import Objective, check_pair


class SimCLR(Objective):
    """NT-Xent, SimCLR Eq. (1): for the 2N augmented samples,

        ℓ(i, j) = −log [ exp(sim(z_i, z_j)/τ) / Σ_{k≠i} exp(sim(z_i, z_k)/τ) ],
        L = 1/(2N) Σ_k [ℓ(2k−1, 2k) + ℓ(2k, 2k−1)],   sim(u, v) = uᵀv / (‖u‖‖v‖).

    Args:
        temperature: τ. Default 0.5, the CIFAR-10 setting of SimCLR App. B.9 (ImageNet used 0.1
            at batch 4096).

    Collapse: with all embeddings equal every logit is 1/τ, the loss is log(2N−1) and flat
    in the common direction. Under ``torch.distributed`` the negatives are gathered from every
    rank with gradient, so the loss is the global-batch NT-Xent.
    """

    name = "simclr"
    head_preset = "simclr"
    cosine = True

    def __init__(self, temperature: float = 0.5) -> None:
        super().__init__()
        if not temperature > 0:
            raise ValueError(f"SimCLR temperature must be > 0, got {temperature}")
        self.temperature = float(temperature)

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        check_pair(a, b, "SimCLR", min_batch=1)
        a, b = distributed.gather(a), distributed.gather(b)
        n = a.shape[0]
        z = F.normalize(torch.cat([a, b], dim=0), dim=1)
        logits = z @ z.T / self.temperature
        eye = torch.eye(2 * n, dtype=torch.bool, device=z.device)
        logits = logits.masked_fill(eye, float("-inf"))
        labels = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)]).to(z.device)
        return F.cross_entropy(logits, labels)

    def hparams(self) -> dict[str, float]:
        return {"temperature": self.temperature}
