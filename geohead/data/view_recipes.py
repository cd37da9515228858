"""View recipes: what random views to draw (:class:`ViewSpec`, :class:`ViewRecipe`, :data:`RECIPES`).

Each view is drawn from a :class:`ViewSpec`: random resized crop (area ``crop_scale``, aspect
``crop_ratio``, torchvision's 10-try rule), horizontal flip, optional rotation, colour jitter
(brightness, contrast, saturation, hue; applied with probability ``jitter_p``, the four in a random
order), grayscale, Gaussian blur, solarisation, in that order (the papers' order). A
:class:`ViewRecipe` is a method's list of view kinds; :data:`RECIPES` holds the six methods'
recipes at CIFAR scale and :func:`get_recipe` looks one up.

:func:`sample_params` draws all random parameters of ``n`` views of one kind from a
:class:`torch.Generator`, in a fixed order, so the same seed gives the same views;
:class:`geohead.data.views.Views` applies them to a batch.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch
from torch import Tensor

#: Views of one kind per image (DINO's multi-crop uses 10 in all); a bound on what a recipe may ask for.
MAX_VIEW_COUNT = 64
#: The widest blur in output pixels (the recipes' is 2; its kernel spans 6 sigma).
MAX_BLUR_SIGMA = 64.0


@dataclasses.dataclass(frozen=True)
class ViewSpec:
    """How to draw one kind of view (``count`` independent views of this kind per image).

    Attributes:
        size: output side relative to the recipe's ``img_size`` (1.0 global, 0.5 DINO local).
        count: number of views of this kind.
        crop_scale: (min, max) fraction of the image area kept by the random resized crop.
        crop_ratio: (min, max) aspect ratio w/h of the crop, sampled log-uniformly.
        flip_p: probability of a horizontal flip.
        rotation: maximum |angle| in degrees of a uniform random rotation (0 = none).
        jitter_p: probability of applying colour jitter.
        brightness, contrast, saturation: jitter strengths; factors ~ U(max(0, 1 - s), 1 + s).
        hue: hue jitter; shift ~ U(-hue, hue) turns.
        gray_p: probability of converting to grayscale.
        blur_p: probability of a Gaussian blur with sigma ~ U(blur_sigma) in output pixels.
        blur_sigma: (min, max) blur standard deviation in output pixels.
        solarize_p: probability of solarisation (invert pixels >= 0.5).
        interpolation: "bilinear" or "bicubic" resampling of the crop.
    """

    size: float = 1.0
    count: int = 1
    crop_scale: tuple[float, float] = (0.08, 1.0)
    crop_ratio: tuple[float, float] = (3 / 4, 4 / 3)
    flip_p: float = 0.5
    rotation: float = 0.0
    jitter_p: float = 0.8
    brightness: float = 0.4
    contrast: float = 0.4
    saturation: float = 0.4
    hue: float = 0.1
    gray_p: float = 0.2
    blur_p: float = 0.0
    blur_sigma: tuple[float, float] = (0.1, 2.0)
    solarize_p: float = 0.0
    interpolation: str = "bilinear"

    def __post_init__(self) -> None:
        for name in ("flip_p", "jitter_p", "gray_p", "blur_p", "solarize_p"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"ViewSpec.{name} is a probability in [0, 1], got {p}")
        lo, hi = _pair("crop_scale", self.crop_scale)
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"ViewSpec.crop_scale must satisfy 0 < min <= max <= 1, got {self.crop_scale}")
        lo, hi = _pair("crop_ratio", self.crop_ratio)
        if not 0.0 < lo <= hi:
            raise ValueError(f"ViewSpec.crop_ratio must satisfy 0 < min <= max, got {self.crop_ratio}")
        if not 1 <= self.count <= MAX_VIEW_COUNT or self.size <= 0:
            raise ValueError(f"ViewSpec needs 1 <= count <= {MAX_VIEW_COUNT} and size > 0, got count={self.count}, "
                             f"size={self.size}")
        if not 0.0 <= self.hue <= 0.5:
            raise ValueError(f"ViewSpec.hue must lie in [0, 0.5] turns, got {self.hue}")
        if min(self.brightness, self.contrast, self.saturation, self.rotation) < 0 or self.rotation > 180:
            raise ValueError(f"ViewSpec jitter strengths must be >= 0 and rotation in [0, 180] degrees, got "
                             f"{(self.brightness, self.contrast, self.saturation)} and {self.rotation}")
        lo, hi = _pair("blur_sigma", self.blur_sigma)
        if not 0.0 <= lo <= hi <= MAX_BLUR_SIGMA:  # 3 sigma is the kernel's half-width
            raise ValueError(f"ViewSpec.blur_sigma must satisfy 0 <= min <= max <= {MAX_BLUR_SIGMA} pixels, got "
                             f"{self.blur_sigma}")
        if self.interpolation not in ("bilinear", "bicubic"):
            raise ValueError(f"ViewSpec.interpolation must be 'bilinear' or 'bicubic', got {self.interpolation!r}")


def _pair(name: str, value: Any) -> tuple[float, float]:
    """``value`` as (min, max): two real numbers, else a ValueError naming ``ViewSpec.<name>``."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)):
        raise ValueError(f"ViewSpec.{name} must be two numbers (min, max), got {value!r}")
    return float(value[0]), float(value[1])


@dataclasses.dataclass(frozen=True)
class ViewRecipe:
    """A named list of view kinds, e.g. SimCLR's two identical views or DINO's multi-crop."""

    name: str
    views: tuple[ViewSpec, ...]
    reference: str = ""

    @property
    def num_views(self) -> int:
        return sum(v.count for v in self.views)

    def replace(self, **changes) -> "ViewRecipe":
        """The same recipe with ``changes`` (ViewSpec fields) applied to every view kind."""
        fields = {f.name for f in dataclasses.fields(ViewSpec)}
        bad = sorted(set(changes) - fields)
        if bad:
            raise ValueError(f"unknown ViewSpec fields {bad}; valid fields are {sorted(fields)}")
        return dataclasses.replace(self, views=tuple(dataclasses.replace(v, **changes) for v in self.views))


_BYOL_JITTER = dict(brightness=0.4, contrast=0.4, saturation=0.2, hue=0.1, jitter_p=0.8, gray_p=0.2)

#: The standard recipes at CIFAR scale. Gaussian blur is off in all of them: SimCLR's CIFAR-10
#: setting leaves it out (its blur is 10 % of a 224 px image; at 32 px it would be sub-pixel),
#: and the CIFAR set-ups of the other methods (e.g. solo-learn's) do the same; set ``blur_p``
#: with :meth:`ViewRecipe.replace` to restore it. Crops are resized bilinearly (the ImageNet
#: recipes use bicubic; ``interpolation="bicubic"`` is available).
RECIPES: dict[str, ViewRecipe] = {
    "simclr": ViewRecipe(
        "simclr",
        (ViewSpec(count=2, crop_scale=(0.08, 1.0), brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1,
                  jitter_p=0.8, gray_p=0.2),),
        "Chen et al. 2020 (SimCLR), App. B.9 (CIFAR-10): the ImageNet crop (scale 0.08-1, ratio 3/4-4/3) "
        "with flip, 'color distortion (strength=0.5), leaving out Gaussian blur'; strength s gives "
        "ColorJitter(0.8s, 0.8s, 0.8s, 0.2s) = (0.4, 0.4, 0.4, 0.1) applied with p=0.8, grayscale p=0.2.",
    ),
    "byol": ViewRecipe(
        "byol",
        (ViewSpec(solarize_p=0.0, **_BYOL_JITTER), ViewSpec(solarize_p=0.2, **_BYOL_JITTER)),
        "Grill et al. 2020 (BYOL), Table 6: crop scale 0.08-1, flip 0.5, colour jitter p=0.8 with "
        "brightness 0.4, contrast 0.4, saturation 0.2, hue 0.1, grayscale 0.2, blur 1.0 / 0.1 and "
        "solarisation 0.0 / 0.2 for the two views (blur off at CIFAR scale).",
    ),
    "simsiam": ViewRecipe(
        "simsiam",
        (ViewSpec(count=2, crop_scale=(0.2, 1.0), brightness=0.4, contrast=0.4, saturation=0.4, hue=0.1,
                  jitter_p=0.8, gray_p=0.2),),
        "Chen & He 2021 (SimSiam), Sec. 4 / App. A: MoCo v2's augmentation, RandomResizedCrop scale "
        "0.2-1, ColorJitter(0.4, 0.4, 0.4, 0.1) with p=0.8, grayscale 0.2, flip (its blur p=0.5 is "
        "off at CIFAR scale).",
    ),
    "barlow": ViewRecipe(
        "barlow",
        (ViewSpec(solarize_p=0.0, **_BYOL_JITTER), ViewSpec(solarize_p=0.2, **_BYOL_JITTER)),
        "Zbontar et al. 2021 (Barlow Twins), App. / Sec. 3: 'the same as BYOL': crop 0.08-1, flip, jitter "
        "(0.4, 0.4, 0.2, 0.1) p=0.8, grayscale 0.2, blur 1.0 / 0.1, solarisation 0.0 / 0.2 (blur off at "
        "CIFAR scale).",
    ),
    "vicreg": ViewRecipe(
        "vicreg",
        (ViewSpec(solarize_p=0.0, **_BYOL_JITTER), ViewSpec(solarize_p=0.2, **_BYOL_JITTER)),
        "Bardes et al. 2022 (VICReg), App. C and the official augmentations.py: BYOL's protocol, crop "
        "0.08-1, flip, jitter (0.4, 0.4, 0.2, 0.1) p=0.8, grayscale 0.2, blur 1.0 / 0.1, solarisation "
        "0.0 / 0.2 (blur off at CIFAR scale).",
    ),
    "dino": ViewRecipe(
        "dino",
        (
            ViewSpec(crop_scale=(0.4, 1.0), solarize_p=0.0, **_BYOL_JITTER),
            ViewSpec(crop_scale=(0.4, 1.0), solarize_p=0.2, **_BYOL_JITTER),
            ViewSpec(size=0.5, count=8, crop_scale=(0.05, 0.4), **_BYOL_JITTER),
        ),
        "Caron et al. 2021 (DINO), Sec. 3.1 and main_dino.py: 2 global crops (scale 0.4-1, 224 px) and 8 "
        "local crops (scale 0.05-0.4, 96 px), flip, jitter (0.4, 0.4, 0.2, 0.1) p=0.8, grayscale 0.2, "
        "blur 1.0 / 0.1 / 0.5 (off at CIFAR scale), solarisation 0.2 on the second global crop. At "
        "CIFAR scale: global 32 px, local 16 px (96/224 of 32 px, rounded up to a patch-4 multiple).",
    ),
}


def get_recipe(recipe: str | ViewRecipe) -> ViewRecipe:
    """Look up a recipe by name (case-insensitive) or pass a :class:`ViewRecipe` through."""
    if isinstance(recipe, ViewRecipe):
        return recipe
    key = str(recipe).lower()
    if key not in RECIPES:
        raise ValueError(f"unknown view recipe {recipe!r}; valid recipes are {sorted(RECIPES)}")
    return RECIPES[key]


# ---------------------------------------------------------------------------------------------
# parameter sampling (the fused backend of Views applies these directly)


def _rand(n: int, g: torch.Generator) -> Tensor:
    """(n,) draws from U[0, 1) on ``g``'s device."""
    return torch.rand(n, generator=g, device=g.device)


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> Tensor:
    """(n,) draws from U[lo, hi) on ``g``'s device."""
    return lo + (hi - lo) * _rand(n, g)


def sample_crop_boxes(
    n: int, in_h: int, in_w: int, scale: tuple[float, float], ratio: tuple[float, float], g: torch.Generator
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Random resized crop boxes, torchvision's rule vectorised: (cx, cy, half_w, half_h) (n,).

    Up to 10 (area, log-ratio) draws per sample; the first that fits the image wins; samples with
    none fall back to the largest centred box of an allowed aspect ratio. Box sizes and centres
    are continuous (sub-pixel), in normalised coordinates ([-1, 1] spans the image).
    """
    area = in_h * in_w
    a = _uniform(n * 10, *scale, g).view(n, 10) * area
    log_r = _uniform(n * 10, math.log(ratio[0]), math.log(ratio[1]), g).view(n, 10)
    r = torch.exp(log_r)
    w = torch.sqrt(a * r)
    h = torch.sqrt(a / r)
    ok = (w <= in_w) & (h <= in_h)
    first = ok.to(torch.uint8).argmax(dim=1, keepdim=True)
    w1, h1 = w.gather(1, first).squeeze(1), h.gather(1, first).squeeze(1)
    in_ratio = in_w / in_h
    if in_ratio < ratio[0]:
        fw, fh = float(in_w), in_w / ratio[0]
    elif in_ratio > ratio[1]:
        fw, fh = in_h * ratio[1], float(in_h)
    else:
        fw, fh = float(in_w), float(in_h)
    any_ok = ok.any(dim=1)
    w1 = torch.where(any_ok, w1, torch.full_like(w1, fw))
    h1 = torch.where(any_ok, h1, torch.full_like(h1, fh))
    ux, uy = _rand(n, g), _rand(n, g)
    cx_px = w1 / 2 + ux * (in_w - w1)
    cy_px = h1 / 2 + uy * (in_h - h1)
    return cx_px / in_w * 2 - 1, cy_px / in_h * 2 - 1, w1 / in_w, h1 / in_h


def sample_params(spec: ViewSpec, n: int, in_h: int, in_w: int, g: torch.Generator) -> dict[str, Tensor]:
    """All random parameters of ``n`` views of kind ``spec``, drawn from ``g`` in a fixed order.

    Returns a dict of (n,) tensors on ``g``'s device: crop box (cx, cy, half_w, half_h), flip,
    angle, jitter factors (identity values where jitter is not applied), gray, blur sigma (0 where
    not applied), solarize; and ``order`` (4,), the jitter operations' order for this call.
    """
    cx, cy, hw, hh = sample_crop_boxes(n, in_h, in_w, spec.crop_scale, spec.crop_ratio, g)
    flip = _rand(n, g) < spec.flip_p
    angle = _uniform(n, -spec.rotation, spec.rotation, g) if spec.rotation > 0 else torch.zeros(n, device=g.device)
    jit = _rand(n, g) < spec.jitter_p
    b = _uniform(n, max(0.0, 1 - spec.brightness), 1 + spec.brightness, g)
    c = _uniform(n, max(0.0, 1 - spec.contrast), 1 + spec.contrast, g)
    s = _uniform(n, max(0.0, 1 - spec.saturation), 1 + spec.saturation, g)
    h = _uniform(n, -spec.hue, spec.hue, g)
    one = torch.ones(n, device=g.device)
    order = torch.randperm(4, generator=g, device=g.device)
    gray = _rand(n, g) < spec.gray_p
    blur_on = _rand(n, g) < spec.blur_p
    sigma = torch.where(blur_on, _uniform(n, *spec.blur_sigma, g), torch.zeros(n, device=g.device))
    solar = _rand(n, g) < spec.solarize_p
    return dict(
        cx=cx, cy=cy, half_w=hw, half_h=hh, flip=flip, angle=angle,
        brightness=torch.where(jit, b, one), contrast=torch.where(jit, c, one),
        saturation=torch.where(jit, s, one), hue=torch.where(jit, h, 0 * one),
        order=order, gray=gray, sigma=sigma, solarize=solar,
    )
