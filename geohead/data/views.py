"""Per-sample random augmentation of a whole uint8 batch, on the batch's device: :class:`Views`.

``views = make_view_fn("simclr", img_size=32, mean=data.mean, std=data.std)`` builds a callable

    views(images, generator=None) -> list[Tensor]

* ``images``: uint8 (B, 3, H, W) channels-first (or float in [0, 1]) on any device;
* ``generator``: an optional seeded :class:`torch.Generator`; the same seed gives bit-identical
  views (all random parameters are drawn from it, on its device, in a fixed order, then moved to
  the images' device: so a CPU generator also gives the same parameters for CUDA batches);
  ``None`` draws a seed from torch's global RNG (``torch.manual_seed`` then reproduces);
* returns one float32 tensor (B, 3, h, w) per view, normalised with ``(x - mean) / std``; ``h = w
  = round(size · img_size)`` (1.0 for global views, 0.5 for DINO's local crops).

Each view is drawn from a :class:`~geohead.data.view_recipes.ViewSpec` of the recipe
(:mod:`geohead.data.view_recipes`: crop, flip, rotation, colour jitter, grayscale, blur,
solarisation, in the papers' order).

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

import math
from typing import Callable, Literal, Sequence

import torch
from torch import Tensor

from geohead.data import functional as Fn
from geohead.data.view_recipes import ViewRecipe, ViewSpec, get_recipe, sample_params

#: Per-channel statistics of CIFAR-10's training images (the usual constants).
CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)

Backend = Literal["fused", "kornia"]
BACKENDS: tuple[str, ...] = ("fused", "kornia")


def _blur_radius(spec: ViewSpec) -> int:
    """Half-width in pixels of the Gaussian blur kernel: 3 sigma of the largest sigma, >= 1."""
    return max(1, math.ceil(3 * spec.blur_sigma[1]))


def _repeat(x: Tensor, count: int) -> Tensor:
    """(B, 3, H, W) -> (count·B, 3, H, W): ``count`` copies of the batch, one per view."""
    return x if count == 1 else x.repeat(count, 1, 1, 1)


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
            src = _repeat(x, spec.count)
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
                v = v.index_copy(0, idx, Fn.gaussian_blur(v[idx], p["sigma"][idx], _blur_radius(spec)))
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
                k = 2 * _blur_radius(spec) + 1
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
                src = _repeat(x, spec.count)
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
