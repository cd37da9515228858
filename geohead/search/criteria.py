"""The search's measurements: the screen of a head at init, the criteria of a trained run, the score.

Screen (no training; :func:`screen`): on a batch of real backbone features of two views (the
backbone at its initial weights, BatchNorm statistics calibrated on those views), the candidate
head at init (BatchNorm calibrated the same way, whitening applied when the spec asks for it):

* escape curvature at the objective's collapsed state (Thm 4.1; :func:`escape_curvature` in its
  fast screening mode), the collapsed state drawn around the *real* feature mean with a spread of
  1e-2 of the real per-dimension std: ``screen_escape_lambda_min`` (λ_min of H_eff there),
  ``screen_escape_negative`` (negative Ritz values found), ``screen_head_escape`` (the head's own
  share of the negative curvature along the escape direction, ``head_negative_curvature``: 0 for
  linear/ReLU heads without LayerNorm) and ``screen_m_over_h`` (‖M‖_F/‖H_eff‖_F); for
  scale-invariant (cosine) objectives all of these in the sphere-tangent frame (H_tan = G_tan + M);
  ``screen_escape_gradient_relative`` (‖∇_Z f‖/(max|λ|·‖Z‖), recorded: the drawn state is no
  equilibrium, so its negative curvature is no saddle);
* conditioning of H_eff at the real features (:func:`geohead.geometry.heff_conditioning` on the
  first :data:`H_EFF_BATCH` samples of the batch): ``screen_heff_stable_rank`` (‖H‖_F²/max|λ|²) and
  ``screen_heff_spread`` (its log over log(B·d)), ``screen_heff_lambda_min/max`` and
  ``screen_heff_condition`` (within-rank condition number of the 10-step Lanczos run: often
  undefined, kept for reference);
  isotropy of the head's outputs: ``screen_output_condition`` (within-rank condition number of
  their covariance) and ``screen_output_rank`` (its numerical rank / k);
* Jacobian rank on augmentation tangents (central differences of backbone features along each
  orbit family): ``screen_fisher_rank_loss`` (directions the head destroys, summed over the
  families) and ``screen_tangent_invariance`` (mean gain of tangents relative to a random
  direction; < 1: the head already squeezes augmentation directions).

Trained criteria (:func:`trained_criteria`), on frozen features of held-out images in eval mode:
backbone RankMe (``rankme_backbone``, and divided by d), std of normalised backbone/head
features relative to the healthy 1/√width, within-rank condition number of the backbone
features, orbit compression through the head (width- and scale-invariant ``relative`` formula,
geometric mean over the families; recorded, not scored) with tangent invariance and Fisher-rank
loss, ``local_invariance`` (the tangent gain over the between-image gain within the backbone's
effective span) and ``fisher_effective_rank`` / ``fisher_soft_rank_loss`` / ``fisher_tangent_rank``
(the soft Fisher rank; :mod:`geohead.geometry.local_invariance`; they are components of the score whose
default weight is 0: see :data:`~geohead.search.score.SCORE_WEIGHTS`), H_eff at the
trained features of two views (stable rank and spread, λ_min, λ_max, within-rank condition
number), and, where the data has labels, kNN accuracy of backbone and head features (the ground
truth, never in the default score).

The label-free score of these criteria is :mod:`geohead.search.score`; the escape criterion (a
constraint where Thm 4.1's premise holds) is :mod:`geohead.search.escape`.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any, Callable, Sequence

import torch
from torch import Tensor, nn

from geohead.errors import NonFiniteError
from geohead.heads import GeometricHead, HeadSpec

#: Orbit families measured by default: the augmentations the standard recipes apply.
DEFAULT_FAMILIES: tuple[str, ...] = ("crop", "hue", "saturation")
#: Samples of the feature batch on which H_eff's spectrum is taken (its dimension is B·d, and a
#: product costs a double backward through the head on B samples).
H_EFF_BATCH = 64


class TrialDiverged(RuntimeError):
    """A trial produced NaN/inf (loss or criteria): Optuna records it as FAIL and the study goes on."""


# ---------------------------------------------------------------------- helpers
@torch.no_grad()
def calibrate_batchnorm(module: nn.Module, batches: Sequence[Tensor]) -> nn.Module:
    """Set every BatchNorm's running statistics to the exact mean/variance of ``batches``
    (``torch.optim.swa_utils.update_bn``: cumulative average), then put the module in eval mode.
    Returns ``module``."""
    torch.optim.swa_utils.update_bn(batches, module)
    return module.eval()


#: Criteria that may be inf/NaN without failing the trial (H_eff products that overflowed, a
#: condition number without a converged bottom end, the orbit compression 0/0 of a head constant
#: on a family's orbits); the score counts them as worst.
_MAY_BE_UNDEFINED = ("condition", "stable_rank", "lambda_min", "lambda_max", "spread", "compression")


def _finite(d: dict[str, Any], stage: str) -> dict[str, Any]:
    bad = [k for k, v in d.items() if isinstance(v, float) and not math.isfinite(v)
           and not any(part in k for part in _MAY_BE_UNDEFINED)]
    if bad:
        raise TrialDiverged(f"{stage}: non-finite {', '.join(bad)}")
    return d


def _float(x: Any) -> float:
    return float("nan") if x is None else float(x)


# ---------------------------------------------------------------------- screen
@dataclasses.dataclass
class ScreenInputs:
    """What the screen needs, computed once per worker from the initial backbone.

    Attributes:
        objective: the SSL objective (loss and collapsed state).
        z1, z2: backbone features (B, d) of two views of one batch (float32, eval-mode BN).
        collapsed: (z1, z2) of the collapsed state around the real feature mean, (Bc, d) each.
        tangents: orbit family -> (base points (M, d), tangents (M, d)) in backbone space.
        predictor_spec: callable output_dim -> predictor HeadSpec or None (BYOL, SimSiam).
        seed: seed of head init and of every random probe.
    """

    objective: nn.Module
    z1: Tensor
    z2: Tensor
    collapsed: tuple[Tensor, Tensor]
    tangents: dict[str, tuple[Tensor, Tensor]]
    predictor_spec: Callable[[int], HeadSpec | None]
    seed: int = 0
    spread: float = 1e-2


def build_head(spec: HeadSpec, features: Tensor, seed: int, predictor_spec: HeadSpec | None = None):
    """The candidate (and predictor) at init: seeded, whitened when asked, BN calibrated on ``features``."""
    torch.manual_seed(seed)
    head = GeometricHead.from_spec(spec)
    if spec.whiten is not None:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # rank warnings: the screen batch may be narrower than d
            head.whiten_(features, mode=spec.whiten)
    calibrate_batchnorm(head, [features])
    predictor = None
    if predictor_spec is not None:
        predictor = GeometricHead.from_spec(predictor_spec)
        with torch.no_grad():
            calibrate_batchnorm(predictor, [head(features)])
    return head, predictor


def screen(spec: HeadSpec, inputs: ScreenInputs) -> dict[str, float]:
    """Screen criteria of ``spec`` at init (see the module docstring); ~1 s on 2 CPU cores for
    d = 512, B = 256 (``benchmarks/search_screen.py``). Raises :class:`TrialDiverged` on NaN/inf."""
    from geohead.geometry import (
        EscapeSettings, escape_curvature, heff_conditioning, tangent_invariance, within_rank_condition,
    )
    from geohead.objectives import CollapsedState

    t0 = time.perf_counter()
    obj = inputs.objective
    head, predictor = build_head(spec, inputs.z1, inputs.seed, inputs.predictor_spec(spec.output_dim))
    out: dict[str, float] = {}
    g = torch.Generator().manual_seed(inputs.seed)
    c1, c2 = inputs.collapsed
    state = CollapsedState(c1, c2, "complete", 0, inputs.spread)
    try:
        fast = EscapeSettings(mode="fast", dtype=torch.float32, pullback=False, objective_spectrum=False, m_over_h=True)
        esc = escape_curvature(head, obj, settings=fast, predictor=predictor, state=state, generator=g)
        out.update(screen_escape_lambda_min=esc.lambda_min_H, screen_escape_negative=float(esc.num_negative_H),
                   screen_head_escape=esc.head_negative_curvature, screen_m_over_h=_float(esc.m_over_h))
        if math.isfinite(esc.gradient_relative):  # inf only where H = 0 and the gradient is not
            out["screen_escape_gradient_relative"] = esc.gradient_relative
        nb = min(H_EFF_BATCH, inputs.z1.shape[0])
        hc = heff_conditioning(head, obj, inputs.z1[:nb], inputs.z2[:nb], predictor=predictor, seed=inputs.seed, probes=4)
        out.update(screen_heff_lambda_min=hc["lambda_min"], screen_heff_lambda_max=hc["lambda_max"],
                   screen_heff_condition=hc["condition"], screen_heff_stable_rank=hc["stable_rank"],
                   screen_heff_spread=hc["spread"])
        with torch.no_grad():
            e = head(inputs.z1)
        wr = within_rank_condition(e)
        out.update(screen_output_condition=wr.condition, screen_output_rank=wr.rank / wr.dim)
        inv, lost = [], 0
        for _, (z, v) in inputs.tangents.items():
            ti = tangent_invariance(head, z, v, num_probes=4, generator=torch.Generator().manual_seed(inputs.seed))
            inv.append(ti.invariance)
            lost += ti.fisher_rank_loss
        if inv:
            out.update(screen_tangent_invariance=sum(inv) / len(inv), screen_fisher_rank_loss=float(lost))
    except NonFiniteError as exc:  # the geometry code refuses non-finite values
        raise TrialDiverged(f"screen: {exc}") from None
    out["screen_seconds"] = time.perf_counter() - t0
    return _finite(out, "screen")


# ---------------------------------------------------------------------- trained criteria
@dataclasses.dataclass
class EvalInputs:
    """Held-out images for the trained criteria (shared by all trials of a worker).

    Attributes:
        train_images, train_labels: probe train split, uint8 (N, 3, H, W) and (N,) (labels may be None).
        test_images, test_labels: probe test split.
        orbit_images: float [0, 1] (No, 3, H, W) for the orbits (compression).
        tangent_images: the first this many orbits give the tangents (tangent invariance, Fisher rank).
        view_batch: two normalised views (B, 3, H, W) of one batch, for H_eff at trained features.
        mean, std: normalisation of the training set.
        families: orbit families (names in ``geohead.data.ORBIT_FAMILIES``).
        knn_k, knn_t: kNN probe settings.
    """

    train_images: Tensor
    train_labels: Tensor | None
    test_images: Tensor
    test_labels: Tensor | None
    orbit_images: Tensor
    view_batch: tuple[Tensor, Tensor]
    mean: tuple[float, ...]
    std: tuple[float, ...]
    families: tuple[str, ...] = DEFAULT_FAMILIES
    knn_k: int = 20
    knn_t: float = 0.07
    seed: int = 0
    tangent_images: int = 8


def trained_criteria(backbone: nn.Module, head: nn.Module, objective: nn.Module, inputs: EvalInputs,
                     predictor: nn.Module | None = None, teacher_head: nn.Module | None = None,
                     device: torch.device | str = "cpu") -> dict[str, float]:
    """Criteria of a trained (backbone, head) pair (see the module docstring); modes are restored.
    Raises :class:`TrialDiverged` on NaN/inf."""
    from geohead.features import extract

    modes = [(m, m.training) for m in (backbone, head, predictor, teacher_head) if m is not None]
    t0 = time.perf_counter()
    out: dict[str, float] = {}
    try:
        cl = bool(getattr(backbone, "geohead_config", {}).get("channels_last"))
        fb_tr, fh_tr = extract(backbone, head, inputs.train_images, inputs.mean, inputs.std, device, channels_last=cl)
        fb_te, fh_te = extract(backbone, head, inputs.test_images, inputs.mean, inputs.std, device, channels_last=cl)
        out.update(_feature_criteria(fb_tr, fh_tr))
        # orbits and H_eff through the trained backbone and head, in eval mode
        backbone.eval()
        head.eval()
        out.update(_orbit_criteria(backbone, head, inputs, device, cl))
        out.update(_trained_heff(backbone, head, objective, inputs, predictor, teacher_head, device, cl))
        if inputs.train_labels is not None and inputs.test_labels is not None:
            out.update(_knn_criteria(fb_tr, fh_tr, fb_te, fh_te, inputs))
    except NonFiniteError as exc:
        raise TrialDiverged(f"criteria: {exc}") from None
    finally:
        for m, mode in modes:
            m.train(mode)
    out["eval_seconds"] = time.perf_counter() - t0
    return _finite(out, "criteria")


def _feature_criteria(fb: Tensor, fh: Tensor) -> dict[str, float]:
    """The collapse record (:func:`geohead.geometry.collapse_record`, without α-ReQ) of the
    probe-train features of backbone and head, RankMe as a fraction of the width, and the
    backbone's within-rank condition number."""
    from geohead.geometry import collapse_record, within_rank_condition

    if not (torch.isfinite(fb).all() and torch.isfinite(fh).all()):
        raise TrialDiverged("trained features are not finite")
    d, k = fb.shape[1], fh.shape[1]
    out = {"dim_backbone": float(d), **collapse_record(fb, fh, alpha=False)}
    out["rankme_backbone_frac"] = out["rankme_backbone"] / d
    out["rankme_head_frac"] = out["rankme_head"] / k
    out["condition_backbone"] = within_rank_condition(fb).condition
    return out


def _orbit_criteria(backbone: nn.Module, head: nn.Module, inputs: EvalInputs, device: torch.device | str,
                    cl: bool) -> dict[str, float]:
    """Orbit compression per family (and their geometric mean), tangent invariance, Fisher-rank
    loss, local invariance and soft Fisher rank (mean or sum over the families) of the eval-mode
    backbone and head: geometry's :func:`~geohead.geometry.orbit_invariance` per family, its
    tangents from the first ``inputs.tangent_images`` orbits (one forward-mode product per
    tangent direction)."""
    from geohead.data import ORBIT_FAMILIES
    from geohead.features import image_encoder
    from geohead.geometry import orbit_invariance

    to_device = image_encoder(backbone, inputs.mean, inputs.std, device, channels_last=cl)

    def encode(x01: Tensor) -> Tensor:
        return to_device(x01).cpu()

    out: dict[str, float] = {}
    comps, invs, lost, local, erank, soft, trank = [], [], 0, [], [], 0.0, 0
    nt = min(inputs.tangent_images, inputs.orbit_images.shape[0])
    for name in inputs.families:
        fam = ORBIT_FAMILIES[name]
        rep = orbit_invariance(encode, head, inputs.orbit_images, fam.fn, fam.params, num_probes=8,
                               generator=torch.Generator().manual_seed(inputs.seed), tangent_orbits=nt, local=nt >= 2)
        out[f"compression_{name}"] = rep.compression
        comps.append(rep.compression)
        if rep.tangents is not None:
            invs.append(rep.tangents.invariance)
            lost += rep.tangents.fisher_rank_loss
        if rep.local is not None:
            if math.isfinite(rep.local.ratio):  # 0/0 for a head dead on the data: not recorded
                local.append(rep.local.ratio)
            erank.append(rep.local.fisher_effective_rank)
            soft += rep.local.fisher_soft_rank_loss
            trank += rep.local.tangent_rank
    if comps:
        out["compression"] = math.exp(sum(math.log(max(c, 1e-12)) for c in comps) / len(comps))
    if invs:
        out["tangent_invariance"] = sum(invs) / len(invs)
        out["fisher_rank_loss"] = float(lost)
    if local:
        out["local_invariance"] = sum(local) / len(local)
    if erank:
        out["fisher_effective_rank"] = sum(erank) / len(erank)
        out["fisher_soft_rank_loss"] = soft
        out["fisher_tangent_rank"] = float(trank)  # Σ r: the soft loss as a fraction of the tangent directions
    return out


def _trained_heff(backbone: nn.Module, head: nn.Module, objective: nn.Module, inputs: EvalInputs,
                  predictor: nn.Module | None, teacher_head: nn.Module | None, device: torch.device | str,
                  cl: bool) -> dict[str, float]:
    """Conditioning of H_eff at the trained backbone's features of the two views of ``inputs``."""
    from geohead.geometry import heff_conditioning

    with torch.no_grad():
        v1, v2 = (v.to(device) for v in inputs.view_batch)
        if cl:
            v1, v2 = (v.contiguous(memory_format=torch.channels_last) for v in (v1, v2))
        z1, z2 = backbone(v1).float(), backbone(v2).float()
    nb = min(H_EFF_BATCH, z1.shape[0])
    hc = heff_conditioning(head, objective, z1[:nb], z2[:nb], predictor=predictor, teacher=teacher_head,
                           seed=inputs.seed)
    return {"heff_condition": hc["condition"], "heff_lambda_min": hc["lambda_min"], "heff_lambda_max": hc["lambda_max"],
            "heff_stable_rank": hc["stable_rank"], "heff_spread": hc["spread"]}


def _knn_criteria(fb_tr: Tensor, fh_tr: Tensor, fb_te: Tensor, fh_te: Tensor, inputs: EvalInputs) -> dict[str, float]:
    """kNN test accuracy of backbone and head features (the ground truth; labelled data only)."""
    from geohead.probes import knn_accuracy

    kw = {"k": inputs.knn_k, "temperature": inputs.knn_t}
    return {"knn_backbone": knn_accuracy(fb_tr, inputs.train_labels, fb_te, inputs.test_labels, **kw),
            "knn_head": knn_accuracy(fh_tr, inputs.train_labels, fh_te, inputs.test_labels, **kw)}


__all__ = ["DEFAULT_FAMILIES", "EvalInputs", "ScreenInputs", "TrialDiverged", "build_head", "calibrate_batchnorm",
           "screen", "trained_criteria"]
