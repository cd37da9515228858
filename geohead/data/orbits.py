"""Deterministic "orbit" transforms: one augmentation family, one explicit parameter.

The orbit of an image under a family is the set ``{fn(x, p) : p in params}``; the geometry code
measures how much a backbone or a head compresses these orbits relative to the spread between
images, and estimates tangents ``d fn(x, p) / dp`` at the identity parameter (Chaudhry 2026,
Sec. 5: the pullback metric must be singular along an augmentation's tangent for the loss to be
invariant to it).

Every transform has the signature ``fn(images, param) -> images``:

* ``images``: float Tensor (N, 3, H, W) with values in [0, 1] (any float dtype, any device);
* ``param``: a Python float (same for every image) or a float Tensor of shape (N,) (one per
  image); tensor parameters are differentiated through (every op is torch arithmetic);
* returns a float Tensor of the same shape, dtype and device, values in [0, 1].

``fn(x, family.identity)`` returns ``x`` (up to float rounding for the resampling ones).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Union

import torch
from torch import Tensor

from geohead.data import functional as Fn

Param = Union[float, Tensor]
OrbitFn = Callable[[Tensor, Param], Tensor]


def _param_vec(p: Param, x: Tensor) -> Tensor:
    """(N,) parameter vector in ``x``'s dtype and device."""
    t = p.to(device=x.device, dtype=x.dtype) if isinstance(p, Tensor) else torch.tensor(float(p), device=x.device, dtype=x.dtype)
    if t.ndim == 0:
        return t.expand(x.shape[0])
    if t.shape != (x.shape[0],):
        raise ValueError(f"param must be a float or a tensor of shape ({x.shape[0]},), got shape {tuple(t.shape)}")
    return t


def _check(x: Tensor) -> None:
    Fn.check_images(x)
    if not x.dtype.is_floating_point:
        raise TypeError(
            f"orbit transforms take float images in [0, 1], got {x.dtype}; "
            "convert uint8 with images.float() / 255"
        )


def rotate(images: Tensor, degrees: Param) -> Tensor:
    """Rotate about the image centre, counter-clockwise on screen by ``degrees`` (torchvision's sign).

    Bilinear resampling; corners that leave the image are filled by reflection (no black
    wedges whose size would itself depend on the angle).
    """
    _check(images)
    n, _, h, w = images.shape
    a = _param_vec(degrees, images)
    zero = torch.zeros_like(a)
    one = torch.ones_like(a)
    theta = Fn.affine_matrices(zero, zero, one, one, a, torch.zeros(n, dtype=torch.bool, device=images.device), h, w)
    return Fn.affine_resample(images, theta, (h, w), padding_mode="reflection")


def hue_shift(images: Tensor, delta: Param) -> Tensor:
    """Shift the hue by ``delta`` turns in HSV (torchvision ``adjust_hue``; 0.5 = complementary)."""
    _check(images)
    return Fn.adjust_hue(images, _param_vec(delta, images))


def saturation(images: Tensor, factor: Param) -> Tensor:
    """Scale the saturation: blend with the grayscale image by ``factor`` (1 = identity, 0 = gray)."""
    _check(images)
    return Fn.adjust_saturation(images, _param_vec(factor, images))


def blur(images: Tensor, sigma: Param) -> Tensor:
    """Gaussian blur of standard deviation ``sigma`` pixels (0 = identity), reflect padding.

    The kernel radius is ``ceil(3·max σ)``, read from the parameter's value (so tensor ``sigma`` is
    differentiable under autograd but not under ``torch.func`` transforms). Blur is even in σ
    (≈ x + σ²/2 · Δx), so its tangent in σ vanishes at the identity σ = 0: take tangents with
    respect to σ² or at a base point σ > 0.
    """
    _check(images)
    s = _param_vec(sigma, images)
    if bool((s < 0).any()):
        raise ValueError(f"blur sigma must be >= 0 pixels, got min {float(s.min()):.3g}")
    return Fn.gaussian_blur(images, s)


def crop_scale(images: Tensor, scale: Param) -> Tensor:
    """Centre crop covering ``scale`` of the image's area, resized back to (H, W) (bilinear).

    ``scale`` > 0 is an area fraction (RandomResizedCrop's convention): 1 is the identity, 0.25
    keeps the central half of each side; values above 1 zoom out, replicating the border, so the
    orbit is smooth through the identity.
    """
    _check(images)
    n, _, h, w = images.shape
    s = _param_vec(scale, images)
    if bool((s <= 0).any()):
        raise ValueError(f"crop scale must be > 0 (an area fraction; 1 = identity), got min {float(s.min()):.3g}")
    half = torch.sqrt(s)
    zero = torch.zeros_like(s)
    theta = Fn.affine_matrices(zero, zero, half, half, zero, torch.zeros(n, dtype=torch.bool, device=images.device), h, w)
    return Fn.affine_resample(images, theta, (h, w), padding_mode="border")


@dataclasses.dataclass(frozen=True)
class OrbitFamily:
    """An augmentation family with its default parameter sweep.

    Attributes:
        name: key in :data:`ORBIT_FAMILIES`.
        fn: ``fn(images (N, 3, H, W) float in [0, 1], param float | Tensor (N,)) -> same shape``.
        params: default sweep (sorted, contains ``identity``), spanning the range the standard SSL
            recipes sample at CIFAR scale.
        description: what the parameter means, with units.
        identity: the parameter value for which ``fn`` is the identity (tangents are taken there).
    """

    name: str
    fn: OrbitFn
    params: tuple[float, ...]
    description: str
    identity: float

    def __call__(self, images: Tensor, param: Param) -> Tensor:
        return self.fn(images, param)

    def orbit(self, images: Tensor, params: tuple[float, ...] | None = None) -> Tensor:
        """All views: float (P, N, 3, H, W) for the P parameters (default ``self.params``)."""
        return torch.stack([self.fn(images, p) for p in (params or self.params)])


def _sweep(lo: float, hi: float, k: int = 7) -> tuple[float, ...]:
    return tuple(round(lo + (hi - lo) * i / (k - 1), 6) for i in range(k))


#: The orbit families the geometry code measures, each with a 7-point default sweep.
ORBIT_FAMILIES: dict[str, OrbitFamily] = {
    f.name: f
    for f in (
        OrbitFamily(
            "rotate", rotate, _sweep(-30.0, 30.0),
            "rotation about the centre, degrees counter-clockwise", 0.0,
        ),
        OrbitFamily(
            "hue", hue_shift, _sweep(-0.1, 0.1),
            "hue shift in turns (SimCLR's CIFAR jitter draws from ±0.1)", 0.0,
        ),
        OrbitFamily(
            "saturation", saturation, _sweep(0.6, 1.4),
            "saturation factor (1 = identity; SimCLR's CIFAR jitter draws from 0.6..1.4)", 1.0,
        ),
        OrbitFamily(
            "blur", blur, (0.0, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0),
            "Gaussian blur standard deviation in pixels (0 = identity; below ~0.4 px a blur is invisible)", 0.0,
        ),
        OrbitFamily(
            "crop", crop_scale, tuple(sorted(_sweep(0.4, 1.0))),
            "centre crop area fraction, resized back (1 = identity)", 1.0,
        ),
    )
}


__all__ = [
    "ORBIT_FAMILIES", "OrbitFamily", "blur", "crop_scale", "hue_shift", "rotate", "saturation",
]
