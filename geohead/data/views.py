"""Per-sample random augmentation of a whole uint8 batch, on the batch's device.

``views = make_view_fn("simclr", img_size=32, mean=data.mean, std=data.std)`` builds a callable

    views(images, generator=None) -> list[Tensor]

* ``images``: uint8 (B, 3, H, W) channels-first (or float in [0, 1]) on any device;
* ``generator``: an optional seeded :class:`torch.Generator`; the same seed gives bit-identical
  views (all random parameters are drawn from it, on its device, in a fixed order, then moved to
  the images' device: so a CPU generator also gives the same parameters for CUDA batches);
  ``None`` draws a seed from torch's global RNG (``torch.manual_seed`` then reproduces);
* returns one float32 tensor (B, 3, h, w) per view, normalised with ``(x - mean) / std``; ``h = w
  = round(size · img_size)`` (1.0 for global views, 0.5 for DINO's local crops).

Each view is drawn from a :class:`ViewSpec`: random resized crop (area ``crop_scale``, aspect
``crop_ratio``, torchvision's 10-try rule), horizontal flip, optional rotation, colour jitter
(brightness, contrast, saturation, hue; applied with probability ``jitter_p``, the four in a random
order), grayscale, Gaussian blur, solarisation, in that order (the papers' order).

Two backends implement the same specs:

* ``"fused"`` (default): geohead's own path. Crop, flip and rotation become one affine matrix per
  sample and one ``grid_sample`` call per view kind; colour ops are batched tensor arithmetic
  with per-sample factors (:mod:`geohead.data.functional`). Parameters come from the generator.
* ``"kornia"``: the same pipeline with ``kornia.augmentation``. kornia draws its parameters from
  torch's global RNG (``torch.distributions`` ``rsample``) and has no generator argument, so
  each call runs inside ``torch.random.fork_rng`` seeded from the generator: reproducible, and
  the caller's global RNG state is left untouched.

Why fused is the default (``benchmarks/views.py``, SimCLR recipe, batch 256 CIFAR-10 images,
2-core CPU): 32.6k views/s (2 threads; 23.6k on 1 thread) against kornia's 13.0k (11.7k), i.e.
2.0-2.5x, and 5.2x (3.9x) lightly's SimCLRTransform in a 2-worker DataLoader; in addition its
parameters come from the caller's generator on the generator's device, so CPU and CUDA batches
get the same views, with no global-RNG fork. kornia stays available as the reference.
Differences to the papers' per-image pipelines: crops are continuous (sub-pixel) boxes and
the order of the four jitter operations is drawn once per call (as kornia and one torchvision
call do), not once per image.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Literal, Sequence

import torch
from torch import Tensor

from geohead.data import functional as Fn

#: Per-channel statistics of CIFAR-10's training images (the usual constants).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

Backend = Literal["fused", "kornia"]
BACKENDS: tuple[str, ...] = ("fused", "kornia")


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
        lo, hi = self.crop_scale
        if not 0.0 < lo <= hi <= 1.0:
            raise ValueError(f"ViewSpec.crop_scale must satisfy 0 < min <= max <= 1, got {self.crop_scale}")
        if not 0.0 < self.crop_ratio[0] <= self.crop_ratio[1]:
            raise ValueError(f"ViewSpec.crop_ratio must satisfy 0 < min <= max, got {self.crop_ratio}")
        if self.count < 1 or self.size <= 0:
            raise ValueError(f"ViewSpec needs count >= 1 and size > 0, got count={self.count}, size={self.size}")
        if not 0.0 <= self.hue <= 0.5:
            raise ValueError(f"ViewSpec.hue must lie in [0, 0.5] turns, got {self.hue}")
        if min(self.brightness, self.contrast, self.saturation, self.rotation) < 0:
            raise ValueError("ViewSpec jitter strengths and rotation must be >= 0")
        if self.interpolation not in ("bilinear", "bicubic"):
            raise ValueError(f"ViewSpec.interpolation must be 'bilinear' or 'bicubic', got {self.interpolation!r}")


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
# parameter sampling (shared by both backends' tests; the fused path applies these directly)


def _uniform(n: int, lo: float, hi: float, g: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=g, device=g.device)


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
    ux, uy = torch.rand(n, generator=g, device=g.device), torch.rand(n, generator=g, device=g.device)
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
    rand = lambda: torch.rand(n, generator=g, device=g.device)  # noqa: E731
    flip = rand() < spec.flip_p
    angle = _uniform(n, -spec.rotation, spec.rotation, g) if spec.rotation > 0 else torch.zeros(n, device=g.device)
    jit = rand() < spec.jitter_p
    b = _uniform(n, max(0.0, 1 - spec.brightness), 1 + spec.brightness, g)
    c = _uniform(n, max(0.0, 1 - spec.contrast), 1 + spec.contrast, g)
    s = _uniform(n, max(0.0, 1 - spec.saturation), 1 + spec.saturation, g)
    h = _uniform(n, -spec.hue, spec.hue, g)
    one = torch.ones(n, device=g.device)
    order = torch.randperm(4, generator=g, device=g.device)
    gray = rand() < spec.gray_p
    blur_on = rand() < spec.blur_p
    sigma = torch.where(blur_on, _uniform(n, *spec.blur_sigma, g), torch.zeros(n, device=g.device))
    solar = rand() < spec.solarize_p
    return dict(
        cx=cx, cy=cy, half_w=hw, half_h=hh, flip=flip, angle=angle,
        brightness=torch.where(jit, b, one), contrast=torch.where(jit, c, one),
        saturation=torch.where(jit, s, one), hue=torch.where(jit, h, 0 * one),
        order=order, gray=gray, sigma=sigma, solarize=solar,
    )


# ---------------------------------------------------------------------------------------------
# the callable


class Views:
    """Random views of a uint8 batch, on its device. See the module docstring.

    Args:
        recipe: name in :data:`RECIPES` or a :class:`ViewRecipe`.
        img_size: side of a ``size=1.0`` view in pixels.
        mean, std: per-channel normalisation statistics (of images / 255); pass your data's
            (``ImageData.mean``/``.std``); default CIFAR-10's.
        backend: "fused" (default) or "kornia".
    """

    def __init__(
        self,
        recipe: str | ViewRecipe = "simclr",
        img_size: int = 32,
        mean: Sequence[float] = CIFAR10_MEAN,
        std: Sequence[float] = CIFAR10_STD,
        backend: Backend = "fused",
    ) -> None:
        self.recipe = get_recipe(recipe)
        if int(img_size) != img_size or img_size < 4:
            raise ValueError(f"img_size must be an integer >= 4, got {img_size!r}")
        self.img_size = int(img_size)
        if len(mean) != 3 or len(std) != 3 or min(std) <= 0:
            raise ValueError(f"mean and std need 3 values each (std > 0), got mean={mean}, std={std}")
        self.mean = tuple(float(m) for m in mean)
        self.std = tuple(float(s) for s in std)
        if backend not in BACKENDS:
            raise ValueError(f"unknown views backend {backend!r}; valid backends are {list(BACKENDS)}")
        self.backend = backend
        self._kornia: list[Callable[[Tensor], Tensor]] | None = None

    def __repr__(self) -> str:
        return (
            f"Views(recipe={self.recipe.name!r}, img_size={self.img_size}, views={self.view_sizes}, "
            f"backend={self.backend!r})"
        )

    @property
    def view_sizes(self) -> list[int]:
        """Output side (pixels) of each returned view, in order."""
        return [self._side(s) for s in self.recipe.views for _ in range(s.count)]

    def _side(self, spec: ViewSpec) -> int:
        return max(1, int(round(spec.size * self.img_size)))

    def __call__(
        self, images: Tensor, generator: torch.Generator | None = None, shard: tuple[int, int] | None = None
    ) -> list[Tensor]:
        """Views of ``images`` (B, 3, H, W).

        ``shard=(rank, world)``: ``images`` is rank's contiguous part of a global batch of
        ``B * world`` images; the random parameters are drawn for the whole global batch (cheap)
        and rank's slice applied, so the union of the ranks' views equals the views one process
        would make of the global batch with the same generator (fused backend only).
        """
        x = self._to_float(images)
        if generator is None:
            seed = int(torch.randint(0, 2**62, (1,)).item())
            generator = torch.Generator().manual_seed(seed)
        if shard is not None:
            rank, world = shard
            if not (isinstance(world, int) and world >= 1 and 0 <= rank < world):
                raise ValueError(f"shard must be (rank, world) with 0 <= rank < world, got {shard!r}")
            if self.backend != "fused" and world > 1:
                raise ValueError("sharded views need backend='fused' (kornia draws from the global RNG)")
        if self.backend == "kornia":
            return self._kornia_views(x, generator)
        return self._fused_views(x, generator, shard or (0, 1))

    # -- input --------------------------------------------------------------------------------
    @staticmethod
    def _to_float(images: Tensor) -> Tensor:
        Fn.check_images(images)
        if images.dtype == torch.uint8:
            return images.float().div_(255.0)
        if images.dtype.is_floating_point:
            return images.float()
        raise TypeError(
            f"views take uint8 images (0..255) or float images in [0, 1], got {images.dtype}; "
            "convert with images.to(torch.uint8)"
        )

    def _normalise(self, x: Tensor) -> Tensor:
        inv = torch.tensor([1.0 / s for s in self.std], device=x.device).view(1, 3, 1, 1)
        shift = torch.tensor([-m / s for m, s in zip(self.mean, self.std)], device=x.device).view(1, 3, 1, 1)
        return torch.addcmul(shift, x, inv)

    # -- fused backend ----------------------------------------------------------------------
    def _fused_views(self, x: Tensor, g: torch.Generator, shard: tuple[int, int] = (0, 1)) -> list[Tensor]:
        b, _, in_h, in_w = x.shape
        rank, world = shard
        out: list[Tensor] = []
        for spec in self.recipe.views:
            n = b * spec.count
            p = sample_params(spec, n * world, in_h, in_w, g)
            if world > 1:  # global layout (count, b * world): keep this rank's columns
                p = {k: v if k == "order" else v.view(spec.count, b * world)[:, rank * b:(rank + 1) * b].reshape(n)
                     for k, v in p.items()}
            p = {k: v.to(x.device) for k, v in p.items()}
            side = self._side(spec)
            src = x if spec.count == 1 else x.repeat(spec.count, 1, 1, 1)
            theta = Fn.affine_matrices(p["cx"], p["cy"], p["half_w"], p["half_h"], p["angle"], p["flip"], in_h, in_w)
            grid = torch.nn.functional.affine_grid(theta, [n, 3, side, side], align_corners=False)
            # crops lie inside the image, where "border" equals "reflection" and is cheaper; rotated
            # windows reach outside it and are filled by reflection
            pad = "reflection" if spec.rotation > 0 else "border"
            v = torch.nn.functional.grid_sample(src, grid, mode=spec.interpolation, padding_mode=pad, align_corners=False)
            if spec.interpolation == "bicubic":
                v = v.clamp_(0.0, 1.0)
            v = self._colour(v, spec, p)
            out.extend(self._normalise(v).split(b))
        return out

    @staticmethod
    def _colour(v: Tensor, spec: ViewSpec, p: dict[str, Tensor]) -> Tensor:
        if spec.jitter_p > 0:
            ops = {
                0: (spec.brightness > 0, lambda t: Fn.adjust_brightness(t, p["brightness"])),
                1: (spec.contrast > 0, lambda t: Fn.adjust_contrast(t, p["contrast"])),
                2: (spec.saturation > 0, lambda t: Fn.adjust_saturation(t, p["saturation"])),
                3: (spec.hue > 0, lambda t: Fn.adjust_hue(t, p["hue"])),
            }
            for k in p["order"].tolist():
                active, op = ops[int(k)]
                if active:
                    v = op(v)
        if spec.gray_p > 0:
            v = torch.where(p["gray"].view(-1, 1, 1, 1), Fn.rgb_to_gray(v).expand_as(v), v)
        if spec.blur_p > 0:
            idx = (p["sigma"] > 0).nonzero().squeeze(1)
            if idx.numel():
                radius = max(1, math.ceil(3 * spec.blur_sigma[1]))
                v = v.index_copy(0, idx, Fn.gaussian_blur(v[idx], p["sigma"][idx], radius))
        if spec.solarize_p > 0:
            v = torch.where(p["solarize"].view(-1, 1, 1, 1) & (v >= 0.5), 1.0 - v, v)
        return v

    # -- kornia backend ---------------------------------------------------------------------
    def _build_kornia(self) -> list[Callable[[Tensor], Tensor]]:
        import kornia.augmentation as K

        pipes = []
        for spec in self.recipe.views:
            side = self._side(spec)
            ops: list = [
                K.RandomResizedCrop((side, side), scale=spec.crop_scale, ratio=spec.crop_ratio,
                                    resample=spec.interpolation.upper()),
                K.RandomHorizontalFlip(p=spec.flip_p),
            ]
            if spec.rotation > 0:
                ops.append(K.RandomRotation(degrees=spec.rotation, p=1.0))  # zero fill (kornia has no reflection here)
            if spec.jitter_p > 0:
                ops.append(K.ColorJitter(spec.brightness, spec.contrast, spec.saturation, spec.hue, p=spec.jitter_p))
            if spec.gray_p > 0:
                ops.append(K.RandomGrayscale(p=spec.gray_p))
            if spec.blur_p > 0:
                k = 2 * max(1, math.ceil(3 * spec.blur_sigma[1])) + 1
                ops.append(K.RandomGaussianBlur((k, k), spec.blur_sigma, p=spec.blur_p, border_type="reflect"))
            if spec.solarize_p > 0:
                ops.append(K.RandomSolarize(thresholds=0.0, additions=0.0, p=spec.solarize_p))
            ops.append(K.Normalize(mean=torch.tensor(self.mean), std=torch.tensor(self.std)))
            pipes.append(K.AugmentationSequential(*ops))
        return pipes

    def _kornia_views(self, x: Tensor, g: torch.Generator) -> list[Tensor]:
        if self._kornia is None:
            self._kornia = self._build_kornia()
        seed = int(torch.randint(0, 2**62, (1,), generator=g, device=g.device).item())
        devices = [x.device] if x.device.type == "cuda" else []
        out: list[Tensor] = []
        with torch.random.fork_rng(devices=devices, device_type=x.device.type if devices else "cuda"):
            torch.manual_seed(seed)
            for spec, pipe in zip(self.recipe.views, self._kornia):
                src = x if spec.count == 1 else x.repeat(spec.count, 1, 1, 1)
                out.extend(pipe(src).split(x.shape[0]))
        return out


def make_view_fn(
    recipe: str | ViewRecipe = "simclr",
    img_size: int = 32,
    mean: Sequence[float] = CIFAR10_MEAN,
    std: Sequence[float] = CIFAR10_STD,
    backend: Backend = "fused",
    **overrides,
) -> Views:
    """Build the view function of a recipe; ``overrides`` (ViewSpec fields) apply to every view.

    Example: ``make_view_fn("byol", 32, data.mean, data.std, blur_p=0.5)``.
    """
    r = get_recipe(recipe)
    if overrides:
        r = r.replace(**overrides)
    return Views(r, img_size=img_size, mean=mean, std=std, backend=backend)
