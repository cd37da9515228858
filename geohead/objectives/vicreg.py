"""VICReg (Bardes, Ponce & LeCun 2022, "VICReg: Variance-Invariance-Covariance Regularization")."""
from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from geohead import distributed
from geohead.objectives.base import Objective, check_pair


def _variance_term(x: Tensor, gamma: float, eps: float) -> Tensor:
    """v(Z) = (1/d) Σ_j max(0, γ − S(z^j, ε)),  S = sqrt(Var + ε), Var unbiased (paper Eq. 1)."""
    std = torch.sqrt(x.var(dim=0) + eps)
    return F.relu(gamma - std).mean()


def _covariance_term(x: Tensor) -> Tensor:
    """c(Z) = (1/d) Σ_{i≠j} [C(Z)]²_ij,  C(Z) = (1/(n−1)) Σ (z − z̄)(z − z̄)ᵀ (paper Eq. 3–4)."""
    n, d = x.shape
    xc = x - x.mean(0)
    cov = xc.T @ xc / (n - 1)
    off = cov.pow(2).sum() - torch.diagonal(cov).pow(2).sum()
    return off / d


class VICReg(Objective):
    """VICReg, paper Eq. (6):  ℓ = λ s(Z, Z') + μ [v(Z) + v(Z')] + ν [c(Z) + c(Z')],

    with s the mean squared distance; the official code averages the two variance terms
    (``/2``), which is what this class (and the paper's released pseudocode) does.

    Args:
        sim_coeff: λ = 25;  std_coeff: μ = 25;  cov_coeff: ν = 1 (paper Sec. 4.1).
        gamma: target standard deviation γ = 1;  eps: ε = 1e-4.

    Collapse: at complete collapse the variance hinge is active in every dimension
    (S ≈ sqrt(ε) < γ), so ∇_e L ≠ 0 and the objective itself pushes representations apart.
    Under ``torch.distributed`` all three terms are computed over the global batch.
    """

    name = "vicreg"
    square_dim = True
    head_preset = "vicreg"

    def __init__(
        self,
        sim_coeff: float = 25.0,
        std_coeff: float = 25.0,
        cov_coeff: float = 1.0,
        gamma: float = 1.0,
        eps: float = 1e-4,
    ) -> None:
        super().__init__()
        for key, value in dict(sim_coeff=sim_coeff, std_coeff=std_coeff, cov_coeff=cov_coeff, gamma=gamma).items():
            if not value >= 0:
                raise ValueError(f"VICReg {key} must be >= 0, got {value}")
        if not eps > 0:
            raise ValueError(f"VICReg eps must be > 0, got {eps}")
        self.sim_coeff, self.std_coeff, self.cov_coeff = float(sim_coeff), float(std_coeff), float(cov_coeff)
        self.gamma, self.eps = float(gamma), float(eps)

    def loss(self, a: Tensor, b: Tensor) -> Tensor:
        check_pair(a, b, "VICReg", min_batch=2)
        a, b = distributed.gather(a), distributed.gather(b)
        inv = F.mse_loss(a, b)
        var = (_variance_term(a, self.gamma, self.eps) + _variance_term(b, self.gamma, self.eps)) / 2
        cov = _covariance_term(a) + _covariance_term(b)
        return self.sim_coeff * inv + self.std_coeff * var + self.cov_coeff * cov

    def hparams(self) -> dict[str, float]:
        return {
            "sim_coeff": self.sim_coeff, "std_coeff": self.std_coeff, "cov_coeff": self.cov_coeff,
            "gamma": self.gamma, "eps": self.eps,
        }
