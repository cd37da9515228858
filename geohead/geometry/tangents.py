"""The head's Jacobian along augmentation tangents: invariance and Fisher-rank loss (Chaudhry 2026,
Prop. 5.2 and Thm 5.3).

For orbit tangents v (central differences along the sweep, in backbone space, see
:func:`orbit_tangents`) at base points z, :func:`tangent_invariance` measures

* the gain ‖J_h v‖²/‖v‖² of a tangent, normalised by ‖J_h‖_F²/d, the gain of a random direction
  (< 1: the head squeezes augmentation directions more than average; 0: the pullback metric
  G = J_hᵀ (∇²_e L) J_h is singular along them, vᵀ G v = 0, which Prop. 5.2 says invariance needs);
* the numerical rank of the head's Fisher information on the tangent span against the span's own
  dimension: the Fisher-rank loss of Thm 5.3 (tangent directions the head destroys and the
  backbone keeps, the reason the head is discarded after pretraining).

All Jacobian products are forward-mode (``torch.func.jvp``), and every product of one kind runs
as one batched call over stacked (point, probe) rows (docs/theory.md, "Invariance and the
guillotine").
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import warnings
from typing import Any, Callable, Iterator

import torch
from torch import Tensor, nn

from geohead.errors import NonFiniteError
from geohead.geometry.operators import functional_module
from geohead.geometry.orbits import Orbits


def orbit_tangents(orbits: Orbits) -> tuple[Tensor, Tensor]:
    """Central-difference tangents of the backbone orbits at the interior sweep points.

    Returns (z, v), each (N·(P−2), d): base points z_{nj} and v_{nj} = (z_{n,j+1} − z_{n,j−1}) /
    (θ_{j+1} − θ_{j−1}) for j = 2 … P−1. Needs P ≥ 3.
    """
    z, p = orbits.backbone, orbits.params
    if z.shape[1] < 3:
        raise ValueError(f"tangents need at least 3 sweep values, got {z.shape[1]}")
    dp = (p[2:] - p[:-2]).to(z.dtype)
    if bool((dp == 0).any()):
        raise ValueError("the sweep has repeated parameter values; tangents need distinct neighbours")
    v = (z[:, 2:] - z[:, :-2]) / dp[None, :, None]
    base = z[:, 1:-1]
    d = z.shape[-1]
    return base.reshape(-1, d), v.reshape(-1, d)


@dataclasses.dataclass
class TangentInvariance:
    """How the head's Jacobian treats augmentation tangents.

    Attributes:
        tangent_gain: mean over tangents of ‖J_h v‖²/‖v‖².
        jacobian_gain: mean over base points of ‖J_h‖_F²/d (the gain of a random direction).
        invariance: mean over tangents of (‖J_h v‖²/‖v‖²) / (‖J_h‖_F²/d): 1 = the head treats
            tangents like any direction, → 0 = the head is invariant along them.
        killed_fraction: fraction of tangents with ‖J_h v‖ < rtol·‖v‖·sqrt(‖J_h‖_F²/d).
        rank_backbone: numerical rank r of [v_1 … v_m] (σ > rtol·σ_max): the dimension of the
            tangent span T (orthonormal basis Q, d × r).
        rank_head: numerical rank of the head's Fisher information on T, the r × r matrix
            F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q (the pullback metric averaged over the base
            points, restricted to T): eigenvalues above rtol²·mean(‖J_h‖_F²/d), i.e. tangent
            directions whose average gain is not below rtol² of a random direction's. By
            construction rank_head ≤ rank_backbone. (The rank of the pooled [J_h(z_m) v_m] is not
            used: with a different Jacobian at every point it can exceed rank_backbone.)
        fisher_rank_loss: rank_backbone − rank_head ≥ 0 (Thm 5.3): tangent directions the head's
            outputs carry no information about, on average over the data. (F_T is an average of
            per-point matrices of rank ≤ k, so a head narrower than r can still keep r directions
            when its Jacobian varies from point to point.)
        n_tangents, rtol, jacobian_exact (‖J_h‖_F² exact or by Hutchinson with n probes).
    """

    tangent_gain: float
    jacobian_gain: float
    invariance: float
    killed_fraction: float
    rank_backbone: int
    rank_head: int
    fisher_rank_loss: int
    n_tangents: int
    rtol: float
    jacobian_exact: bool

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@contextlib.contextmanager
def _quiet_forward_ad() -> Iterator[None]:
    """torch's first forward-mode product imports torch._decomp.decompositions_for_jvp, which
    builds its decompositions with torch.jit.script and so warns "`torch.jit.script` is
    deprecated" (recent torch; torch's own call, nothing geohead can change). Only that warning
    of that module is silenced, only here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`torch\.jit\.script` is deprecated", category=FutureWarning,
                                module=r"torch\.jit\._script")
        yield


def _jvp_rows(h: Callable[[Tensor], Tensor], z: Tensor, u: Tensor, rows: int) -> Tensor:
    """J_h(z_i) u_i for stacked rows z, u (N, d) → (N, k), ``rows`` rows per forward-mode call."""
    with _quiet_forward_ad():
        if z.shape[0] == 0:
            return torch.func.jvp(h, (z,), (u,))[1]
        return torch.cat([torch.func.jvp(h, (z[i:i + rows],), (u[i:i + rows],))[1] for i in range(0, z.shape[0], rows)])


def tangent_invariance(
    head: nn.Module,
    z: Tensor,
    v: Tensor,
    *,
    rtol: float = 1e-3,
    num_probes: int = 16,
    exact: bool | None = None,
    bn_mode: str = "eval",
    generator: torch.Generator | None = None,
    max_batch: int = 4096,
) -> TangentInvariance:
    """Head Jacobian along tangents v at base points z (both (M, d)): :class:`TangentInvariance`.

    J_h v is exact. ‖J_h(z_m)‖_F² is exact (d products per point: J_h e_i) when ``exact`` or
    d ≤ ``num_probes``, else Hutchinson with ``num_probes`` Rademacher probes per point
    (E‖J u‖² = ‖J‖_F²), unbiased per point and averaged over the M points. The Fisher
    information on the tangent span, F_T = mean_m Qᵀ J_h(z_m)ᵀ J_h(z_m) Q for an orthonormal
    basis Q (d, r) of span{v_m}, comes from J_h(z_m) q_j for all M·r (point, direction) pairs.

    Every product of one kind (tangents, probes, basis directions) is one forward-mode call on
    the stacked rows, at most ``max_batch`` rows at a time: products of a wide head are bound by
    reading its weights, so this is what keeps the search's screen within its budget (measured
    16x faster than one call per probe/direction for a 512 → 2048 x 3 head, r = 10, M = 10, one
    CPU thread). With ``bn_mode="eval"`` the head acts on each point separately, so these are
    per-point Jacobians and the batching changes nothing but rounding. With ``bn_mode="train"``
    the batch statistics couple the points, so every call is exactly the M points with one probe
    or direction each (``max_batch`` is not used): each product sees the M points as its batch.
    """
    if z.dim() != 2 or v.shape != z.shape:
        raise ValueError(f"z and v must both have shape (M, d); got {tuple(z.shape)} and {tuple(v.shape)}")
    if not (torch.isfinite(z).all() and torch.isfinite(v).all()):
        raise NonFiniteError("z or v contains non-finite values")
    dtype = z.dtype if z.is_floating_point() else torch.float32
    h = functional_module(head, dtype=dtype, device=z.device, bn_mode=bn_mode)
    m, d = z.shape
    rows = m if bn_mode == "train" else max_batch
    jv = _jvp_rows(h, z, v.to(dtype), rows)
    exact = d <= num_probes if exact is None else exact
    if exact:
        u = torch.eye(d, dtype=dtype, device=z.device).repeat_interleave(m, 0)  # probe i: e_i at every point
        n_probes = d
    else:
        g = generator if generator is not None else torch.Generator().manual_seed(0)
        u = torch.cat([(torch.randint(0, 2, (m, d), generator=g) * 2 - 1).to(device=z.device, dtype=dtype)
                       for _ in range(num_probes)])
        n_probes = num_probes
    ju = _jvp_rows(h, z.repeat(n_probes, 1), u, rows).to(torch.float64).pow(2).sum(1).view(n_probes, m)
    jf = torch.zeros(m, dtype=torch.float64, device=z.device)
    for row in ju:  # one probe at a time, in drawing order
        jf += row
    if not exact:
        jf /= num_probes

    def fisher(q: Tensor) -> Tensor:  # q (d, r) -> F_T (r, r): one jvp on the M·r stacked (point, direction) rows
        r = q.shape[1]
        dirs = q.T.to(dtype).repeat_interleave(m, 0)  # (r·m, d): direction j at every point
        jq = _jvp_rows(h, z.repeat(r, 1), dirs, rows).to(torch.float64).view(r, m, -1)
        return torch.einsum("rmk,smk->rs", jq, jq) / m

    return summarise_tangents(v, jv, jf, d, rtol, bool(exact), fisher)


def summarise_tangents(v: Tensor, jv: Tensor, jf: Tensor, d: int, rtol: float, exact: bool,
                       fisher: Callable[[Tensor], Tensor]) -> TangentInvariance:
    """The :class:`TangentInvariance` of tangents v (M, d), their images J_h v (M, k), the
    per-point ‖J_h(z_m)‖_F² jf (M,) (exact or Hutchinson) and ``fisher(Q)`` -> F_T (r, r) for an
    orthonormal basis Q (d, r) of the tangent span (float64): the gains, the invariance ratio,
    the killed fraction and the two numerical ranks (see :class:`TangentInvariance`).
    """
    v64, jv64 = v.to(torch.float64), jv.to(torch.float64)
    vn2 = v64.pow(2).sum(1)
    ok = vn2 > 0
    gain_t = jv64.pow(2).sum(1)[ok] / vn2[ok]
    gain_j = jf / d
    inv = gain_t / gain_j[ok].clamp_min(1e-300)
    rms_gain = math.sqrt(float(gain_j.mean()))
    killed = (gain_t.sqrt() < rtol * gain_j[ok].sqrt()).to(torch.float64)
    _, sv_b, wh = torch.linalg.svd(v64, full_matrices=False)
    smax = float(sv_b.max()) if sv_b.numel() else 0.0
    rank_b = int((sv_b > rtol * smax).sum()) if smax > 0 else 0
    rank_h = 0
    if rank_b > 0:
        evals = torch.linalg.eigvalsh(fisher(wh[:rank_b].T))
        rank_h = int((evals > rtol**2 * rms_gain**2).sum())
    return TangentInvariance(
        tangent_gain=float(gain_t.mean()) if gain_t.numel() else float("nan"),
        jacobian_gain=float(gain_j.mean()),
        invariance=float(inv.mean()) if inv.numel() else float("nan"),
        killed_fraction=float(killed.mean()) if killed.numel() else float("nan"),
        rank_backbone=rank_b,
        rank_head=rank_h,
        fisher_rank_loss=rank_b - rank_h,
        n_tangents=int(ok.sum()),
        rtol=rtol,
        jacobian_exact=exact,
    )


__all__ = ["TangentInvariance", "orbit_tangents", "summarise_tangents", "tangent_invariance"]
