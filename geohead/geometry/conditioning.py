"""How H_eff's curvature is spread: fast extremes and the stable rank of the effective Hessian.

Used by the search's screen (at init) and trained criteria, and by anyone who wants one number
for the conditioning of a head's loss geometry at given features.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def heff_conditioning(head: nn.Module, objective: nn.Module, z1: Tensor, z2: Tensor, *, predictor: nn.Module | None = None,
                      teacher: nn.Module | None = None, seed: int = 0, probes: int = 6) -> dict[str, float]:
    """Conditioning of H_eff at features (z1, z2) (B, d): fast Lanczos extremes and the stable rank.

    ``stable_rank`` = ‖H_eff‖_F² / max|λ|² ∈ [1, B·d] (Hutch++ with ``probes`` products for the
    Frobenius norm, the extremes from :func:`~geohead.geometry.spectrum_summary`'s fast mode): the
    number of directions over which the curvature is spread. It is robust where the within-rank
    condition number of a 10-step Lanczos run is not (an indefinite H_eff, unconverged bottom end),
    and ``spread`` = log(stable_rank) / log(B·d) ∈ [0, 1] is 1 for perfectly spread curvature.
    Products run in float32, and once more in float64 when float32 overflows (Barlow Twins'
    batch standardisation of nearly constant embedding dimensions); if both fail the values are
    inf/NaN, ``spread`` 0 and ``error`` says why.

    Returns ``lambda_min``, ``lambda_max``, ``condition`` (within rank), ``stable_rank``,
    ``spread`` and ``dtype64`` (1.0 when float64 was needed).
    """
    from geohead.geometry.hessian import EffectiveHessian
    from geohead.geometry.summary import spectrum_summary
    from geohead.geometry.trace import frobenius_norm

    last: Exception | None = None
    for dtype in (torch.float32, torch.float64):
        try:
            eh = EffectiveHessian(head, objective, z1, z2, predictor=predictor, teacher=teacher, dtype=dtype)
            s = spectrum_summary(eh.H, mode="fast", generator=torch.Generator().manual_seed(seed))
            fro = frobenius_norm(eh.H, num_probes=probes, generator=torch.Generator().manual_seed(seed)).value
        except (FloatingPointError, ValueError) as exc:  # non-finite products or outputs
            last = exc
            continue
        if not (math.isfinite(fro) and math.isfinite(s.scale)):
            last = FloatingPointError("non-finite H_eff estimates")
            continue
        sr = fro ** 2 / s.scale ** 2 if s.scale > 0 else float("nan")
        sr = min(max(sr, 1.0), float(eh.dim)) if math.isfinite(sr) else sr
        return {"lambda_min": s.lambda_min, "lambda_max": s.lambda_max, "condition": s.condition_within_rank,
                "stable_rank": sr, "spread": math.log(sr) / math.log(eh.dim) if math.isfinite(sr) and eh.dim > 1 else 0.0,
                "dtype64": float(dtype == torch.float64)}
    return {"lambda_min": float("nan"), "lambda_max": float("nan"), "condition": float("inf"),
            "stable_rank": float("nan"), "spread": 0.0, "dtype64": 1.0, "error": str(last)[:200]}


__all__ = ["heff_conditioning"]
