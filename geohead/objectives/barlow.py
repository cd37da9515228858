"""Barlow Twins (Zbontar et al. 2021, "Barlow Twins: Self-Supervised Learning via Redundancy Reduction")."""
from __future__ import annotations

import torch
from torch import Tensor

from geohead import distributed
from geohead.objectives.base import Objective, check_pair


def standardize(x: Tensor, eps: float) -> Tensor:
    """Per-dimension batch standardisation, as ``nn.BatchNorm1d(affine=False)`` in train mode:
    ``(x − mean) / sqrt(var_biased + eps)`` over the batch (dim 0)."""
    mu = x.mean(0)
    var = (x - mu).pow(2).mean(0)
    return (x - mu) / torch.sqrt(var + eps)


class BarlowTwins(Objective):
    """Barlow Twins loss, Eq. (1)–(2) of the paper:

        C_ij = Σ_b z^A_{b,i} z^B_{b,j} / B   (z standardised along the batch),
        L_BT = Σ_i (1 − C_ii)² + λ Σ_i Σ_{j≠i} C_ij².

    Args:
        lambd: λ. Default 0.0051, the official implementation's value (the paper: "λ = 5·10⁻³").
        eps: variance regularisation of the standardisation (BatchNorm1d's 1e-5, as the official
            code standardises with ``nn.BatchNorm1d(affine=False)``).

    Collapse: with all embeddings equal (up to a perturbation of std s), the standardisation
    divides by ~sqrt(s² + eps), which makes ∇²_e L huge and strongly indefinite near collapse
    (see docs/theory.md, "Measured facts"). Under ``torch.distributed``, C is computed over the
    global batch (embeddings gathered with gradient).
    """

    name = "barlow"
    square_dim = True
    head_preset = "barlow"

    def __init__(self, lambd: float = 0.0051, eps: float = 1e-5) -> None:
        super().__init__()
        if not lambd >= 0:
            raise ValueError(f"Barlow Twins lambd must be >= 0, got {lambd}")
        if not eps >= 0:
            raise ValueError(f"Barlow Twins eps must be >= 0, got {eps}")
        self.lambd = float(lambd)
        self.eps = float(eps)

    def cross_correlation(self, a: Tensor, b: Tensor) -> Tensor:
        """C (k, k) of Eq. (2) over the (global) batch."""
        check_pair(a, b, "BarlowTwins", min_batch=2)
        a, b = distributed.gather(a), distributed.gather(b)
        return standardize(a, self.eps).T @ standardize(b, self.eps) / a.shape[0]

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        c = self.cross_correlation(a, b)
        diag = torch.diagonal(c)
        on = (1 - diag).pow(2).sum()
        off = c.pow(2).sum() - diag.pow(2).sum()
        return on + self.lambd * off

    def hparams(self) -> dict[str, float]:
        return {"lambd": self.lambd, "eps": self.eps}
