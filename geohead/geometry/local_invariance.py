"""The head's gain on augmentation tangents against its gain on between-image directions, both
within the backbone's effective span (Chaudhry 2026, Prop. 5.2 and Thm 5.3, without the rank
artefact).

:func:`~geohead.geometry.tangents.tangent_invariance` normalises the tangent gain ‖J_h v‖²/‖v‖² by
the gain of a random direction of all of R^d, ‖J_h‖_F²/d. A trained backbone uses few of its d
dimensions (RankMe 4–16 of 128 in the head search), so that baseline is dominated by directions
the backbone never takes, and the ratio mostly measures the backbone's rank. Prop. 5.2's
condition, vᵀ G v = 0 along augmentation tangents, is only informative *against meaningful
directions*: the head should squeeze the tangents more than it squeezes the differences between
images. So, with S (d × s) an orthonormal basis of the backbone's effective span
(:func:`effective_span`: the principal directions of the features whose variance is at least
``span_rtol`` = 1e-4 of the largest, i.e. the directions the backbone uses, small ones such as
augmentation directions included, dead ones excluded) and P_S = S Sᵀ,

    gain(w; z) = ‖J_h(z) P_S w‖² / ‖P_S w‖²,
    local invariance = mean_m gain(v_m; z_m) / mean_m gain(u_m; z_m),

with v_m the augmentation tangents and u_m = z_{n'} − z_n between-image directions at the same
base points (:func:`between_image_directions`: each orbit point to the same sweep position of
the next image). < 1: the head squeezes augmentation directions more than image differences;
→ 0: invariant. It does not change with an isometry after the head, the head's output width, or
extra null dimensions of the features (none of which change what the head does on the data).

The Fisher rank of Thm 5.3 as a *soft* count: with T the span of the projected tangents
P_S v_m (orthonormal basis Q, d × r, numerical rank at ``rtol``) and the head's Fisher
information on it, F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q (r × r), the entropy effective rank
(Roy & Vetterli 2007)

    erank(F_T) = exp(−Σ_i p_i log p_i),   p_i = λ_i(F_T) / Σ_j λ_j(F_T),

is r when the head keeps every tangent direction equally and tends to the number it keeps when
it destroys the others; r − erank(F_T) ≥ 0 is the soft Fisher-rank loss (the thresholded count
rank_backbone − rank_head is 0 for most heads: few kill a direction to rounding level).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch
from torch import Tensor, nn

from geohead.errors import NonFiniteError
from geohead.geometry.operators import functional_module
from geohead.geometry.orbits import Orbits
from geohead.geometry.tangents import _jvp_rows


def effective_span(features: Tensor, rtol: float = 1e-4) -> Tensor:
    """Orthonormal basis S (d, s) of the backbone's effective span: the principal directions of
    the centred features (N, d) whose variance is at least ``rtol`` times the largest (s = 0
    columns when the features do not vary)."""
    if features.dim() != 2 or features.shape[0] < 2:
        raise ValueError(f"features must be (N >= 2, d), got shape {tuple(features.shape)}")
    if not 0 < rtol < 1:
        raise ValueError(f"rtol must be in (0, 1), got {rtol}")
    x = features.detach().to(torch.float64)
    if not torch.isfinite(x).all():
        raise NonFiniteError("features contain non-finite values")
    x = x - x.mean(0)
    _, sv, vh = torch.linalg.svd(x, full_matrices=False)
    var = sv.pow(2)
    if float(var.max()) == 0:
        return vh[:0].T
    return vh[var >= rtol * var.max()].T.contiguous()


def between_image_directions(orbits: Orbits) -> Tensor:
    """Between-image directions aligned with :func:`~geohead.geometry.tangents.orbit_tangents`'
    base points: for image n and interior sweep index j (2 … P−1), u = z_{n+1, j} − z_{n, j}
    (image N−1 pairs with image 0): (N·(P−2), d). Needs N ≥ 2 images and P ≥ 3."""
    z = orbits.backbone
    if z.shape[0] < 2 or z.shape[1] < 3:
        raise ValueError(f"between-image directions need >= 2 images and >= 3 sweep values, got {tuple(z.shape[:2])}")
    base = z[:, 1:-1]
    return (torch.roll(base, -1, dims=0) - base).reshape(-1, z.shape[-1])


def effective_rank(eigenvalues: Tensor) -> float:
    """exp(entropy) of the normalised non-negative eigenvalues (negatives from rounding count as
    0); 0 when they are all 0."""
    lam = eigenvalues.detach().to(torch.float64).clamp_min(0)
    total = float(lam.sum())
    if total == 0:
        return 0.0
    p = lam[lam > 0] / total
    return float(torch.exp(-(p * p.log()).sum()))


@dataclasses.dataclass
class LocalInvariance:
    """The head's gains within the backbone's effective span (see the module docstring).

    Attributes:
        ratio: local invariance, tangent_gain / between_gain (< 1: the head squeezes
            augmentation tangents more than image differences).
        tangent_gain, between_gain: mean over base points of ‖J_h P_S w‖²/‖P_S w‖² for the
            tangents and the between-image directions.
        span_rank: s, the dimension of the effective span.
        tangent_in_span: mean over tangents of ‖P_S v‖²/‖v‖² (how much of the augmentation
            directions the span holds).
        tangent_rank: r, the numerical rank of the projected tangents (σ > rtol·σ_max).
        fisher_effective_rank: erank(F_T) ∈ [1, r] (0 when the head kills every tangent).
        fisher_soft_rank_loss: r − erank(F_T) ≥ 0.
        n_tangents: base points with a non-zero projected tangent and between-image direction.
    """

    ratio: float
    tangent_gain: float
    between_gain: float
    span_rank: int
    tangent_in_span: float
    tangent_rank: int
    fisher_effective_rank: float
    fisher_soft_rank_loss: float
    n_tangents: int

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def local_invariance(
    head: nn.Module,
    z: Tensor,
    v: Tensor,
    u: Tensor,
    *,
    span: Tensor | None = None,
    span_rtol: float = 1e-4,
    rtol: float = 1e-3,
    bn_mode: str = "eval",
    max_batch: int = 4096,
) -> LocalInvariance:
    """:class:`LocalInvariance` of ``head`` at base points z (M, d) with tangents v (M, d) and
    between-image directions u (M, d).

    Args:
        span: an orthonormal basis S (d, s) of the backbone's effective span; default
            :func:`effective_span` of z (pass one from more features when you have them).
        span_rtol: the relative variance threshold of the default span.
        rtol: relative singular-value tolerance of the tangent span T.
        bn_mode: BatchNorm mode of the head (``"eval"``: per-point Jacobians; ``"train"``: each
            product sees the M points as its batch).
        max_batch: rows per forward-mode call (eval mode).

    Cost: 2 forward-mode products per base point for the gains and r per base point for F_T,
    batched into calls of ``max_batch`` rows.
    """
    if z.dim() != 2 or v.shape != z.shape or u.shape != z.shape:
        raise ValueError(f"z, v and u must all have shape (M, d); got {tuple(z.shape)}, {tuple(v.shape)}, {tuple(u.shape)}")
    if not (torch.isfinite(z).all() and torch.isfinite(v).all() and torch.isfinite(u).all()):
        raise NonFiniteError("z, v or u contains non-finite values")
    dtype = z.dtype if z.is_floating_point() else torch.float32
    m, d = z.shape
    basis = effective_span(z, span_rtol) if span is None else span.detach().to(torch.float64)
    if basis.dim() != 2 or basis.shape[0] != d:
        raise ValueError(f"span must be a (d={d}, s) basis, got shape {tuple(basis.shape)}")
    h = functional_module(head, dtype=dtype, device=z.device, bn_mode=bn_mode)
    rows = m if bn_mode == "train" else max_batch
    b = basis.to(device=z.device)

    def project(w: Tensor) -> Tensor:
        return (w.to(torch.float64) @ b) @ b.T

    pv, pu = project(v), project(u)
    nv, nu = pv.pow(2).sum(1), pu.pow(2).sum(1)
    jv = _jvp_rows(h, z, pv.to(dtype), rows).to(torch.float64)
    ju = _jvp_rows(h, z, pu.to(dtype), rows).to(torch.float64)
    ok = (nv > 0) & (nu > 0)
    gain_t = float((jv.pow(2).sum(1)[ok] / nv[ok]).mean()) if bool(ok.any()) else float("nan")
    gain_b = float((ju.pow(2).sum(1)[ok] / nu[ok]).mean()) if bool(ok.any()) else float("nan")
    ratio = gain_t / gain_b if gain_b > 0 else (float("nan") if not gain_t > 0 else float("inf"))
    vn = v.to(torch.float64).pow(2).sum(1)
    in_span = float((nv[vn > 0] / vn[vn > 0]).mean()) if bool((vn > 0).any()) else float("nan")

    _, sv, wh = torch.linalg.svd(pv, full_matrices=False)
    smax = float(sv.max()) if sv.numel() else 0.0
    r = int((sv > rtol * smax).sum()) if smax > 0 else 0
    erank = 0.0
    if r > 0:
        q = wh[:r]  # (r, d) orthonormal rows spanning T
        dirs = q.to(dtype).repeat_interleave(m, 0)  # direction j at every point
        jq = _jvp_rows(h, z.repeat(r, 1), dirs, rows).to(torch.float64).view(r, m, -1)
        erank = effective_rank(torch.linalg.eigvalsh(torch.einsum("rmk,smk->rs", jq, jq) / m))
    return LocalInvariance(
        ratio=ratio, tangent_gain=gain_t, between_gain=gain_b, span_rank=int(basis.shape[1]),
        tangent_in_span=in_span, tangent_rank=r,
        fisher_effective_rank=erank, fisher_soft_rank_loss=r - erank, n_tangents=int(ok.sum()),
    )


__all__ = ["LocalInvariance", "between_image_directions", "effective_rank", "effective_span", "local_invariance"]
