""":class:`ImageData`: one in-memory image set, whatever its source (shapes, CIFAR, .npz, folder).

Images stay uint8 and channels-first so that a batch is an index away from the device, where
:mod:`geohead.data.views` converts and augments it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Literal, Sequence, Union

import torch
from torch import Tensor

FactorKind = Literal["continuous", "circular", "categorical"]
Index = Union[Tensor, Sequence[int], slice]


@dataclasses.dataclass
class ImageData:
    """Images, labels and (optionally) the nuisance factors that generated them.

    Attributes:
        images: uint8 (N, 3, H, W), RGB, channels first, values 0..255.
        labels: int64 (N,), class indices in ``0 .. len(class_names) - 1``.
        class_names: names of the classes, ``class_names[label]``.
        factors: optional ``{name: Tensor (N,)}`` of per-sample nuisance values (float32 for
            continuous/circular factors, int64 for categorical ones), e.g. the hue and rotation
            each shapes image was rendered with. ``None`` for real data.
        factor_kinds: ``{name: "continuous" | "circular" | "categorical"}`` for the factors;
            circular factors have period 1 unless ``factor_periods`` says otherwise.
        factor_periods: period of each circular factor (e.g. 360.0 for degrees).
        mean, std: per-channel statistics of ``images / 255`` (3 floats each) for normalisation;
            computed from ``images`` when not given. Pipelines should normalise a test split
            with its training split's statistics.
        name: where the data came from ("shapes", "cifar10", a file path, …).
    """

    images: Tensor
    labels: Tensor
    class_names: list[str]
    factors: dict[str, Tensor] | None = None
    factor_kinds: dict[str, FactorKind] | None = None
    factor_periods: dict[str, float] | None = None
    mean: tuple[float, float, float] | None = None
    std: tuple[float, float, float] | None = None
    name: str = ""

    def __post_init__(self) -> None:
        x, y = self.images, self.labels
        if not isinstance(x, Tensor) or x.dtype != torch.uint8 or x.ndim != 4 or x.shape[1] != 3:
            desc = f"{x.dtype} {tuple(x.shape)}" if isinstance(x, Tensor) else type(x).__name__
            raise ValueError(
                f"ImageData.images must be a uint8 tensor (N, 3, H, W); got {desc}. Convert "
                "float images in [0, 1] with (x * 255).round().to(torch.uint8) and channels-last "
                "arrays with x.permute(0, 3, 1, 2)."
            )
        if not isinstance(y, Tensor) or y.ndim != 1 or y.shape[0] != x.shape[0]:
            desc = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"ImageData.labels must be a tensor of shape ({x.shape[0]},); got {desc}")
        if y.dtype != torch.int64:
            if y.dtype.is_floating_point or y.dtype == torch.bool:
                raise ValueError(f"ImageData.labels must be integers (int64), got {y.dtype}")
            self.labels = y = y.long()
        self.class_names = [str(c) for c in self.class_names]
        if len(y) and (int(y.min()) < 0 or int(y.max()) >= len(self.class_names)):
            raise ValueError(
                f"labels span {int(y.min())}..{int(y.max())} but there are "
                f"{len(self.class_names)} class names; labels must lie in 0..{len(self.class_names) - 1}"
            )
        if self.factors is not None:
            for k, v in self.factors.items():
                if not isinstance(v, Tensor) or v.shape != (x.shape[0],):
                    shape = tuple(v.shape) if isinstance(v, Tensor) else type(v).__name__
                    raise ValueError(f"factor {k!r} must be a tensor of shape ({x.shape[0]},); got {shape}")
            kinds = dict(self.factor_kinds or {})
            for k, v in self.factors.items():
                kinds.setdefault(k, "continuous" if v.dtype.is_floating_point else "categorical")
            self.factor_kinds = kinds
        if self.mean is None or self.std is None:
            mean, std = channel_stats(x)
            self.mean = self.mean if self.mean is not None else mean
            self.std = self.std if self.std is not None else std
        self.mean = tuple(float(m) for m in self.mean)  # type: ignore[assignment]
        self.std = tuple(float(s) for s in self.std)  # type: ignore[assignment]

    def __len__(self) -> int:
        return int(self.images.shape[0])

    def __repr__(self) -> str:
        f = f", factors={sorted(self.factors)}" if self.factors else ""
        return (
            f"ImageData(name={self.name!r}, n={len(self)}, img_size={tuple(self.images.shape[-2:])}, "
            f"classes={self.num_classes}{f})"
        )

    @property
    def num_classes(self) -> int:
        return len(self.class_names)

    @property
    def img_size(self) -> tuple[int, int]:
        """(H, W) of the stored images."""
        return int(self.images.shape[-2]), int(self.images.shape[-1])

    def subset(self, idx: Index) -> "ImageData":
        """The samples ``idx`` (index tensor/list, boolean mask or slice) as a new ImageData.

        Keeps the parent's ``mean``/``std`` (normalisation belongs to the full training set).
        """
        if isinstance(idx, slice):
            sel = idx
        else:
            sel = torch.as_tensor(idx)
            if sel.dtype == torch.bool:
                if sel.shape != (len(self),):
                    raise ValueError(f"boolean mask must have shape ({len(self)},), got {tuple(sel.shape)}")
                sel = sel.nonzero().squeeze(1)
            elif sel.dtype.is_floating_point:
                raise ValueError(f"subset indices must be integers, got {sel.dtype}")
            sel = sel.long()
        return dataclasses.replace(
            self,
            images=self.images[sel],
            labels=self.labels[sel],
            factors=None if self.factors is None else {k: v[sel] for k, v in self.factors.items()},
        )

    def to(self, device: torch.device | str) -> "ImageData":
        """A copy with images, labels and factors on ``device``."""
        return dataclasses.replace(
            self,
            images=self.images.to(device),
            labels=self.labels.to(device),
            factors=None if self.factors is None else {k: v.to(device) for k, v in self.factors.items()},
        )

    def class_counts(self) -> Tensor:
        """int64 (num_classes,): number of samples per class."""
        return torch.bincount(self.labels.cpu(), minlength=self.num_classes)


def channel_stats(images: Tensor) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Exact per-channel mean and std of uint8 ``images`` (N, 3, H, W) / 255.

    Computed from each channel's 256-bin histogram (one ``bincount`` pass, float64 moments).
    """
    if images.shape[0] == 0:
        return (0.5, 0.5, 0.5), (0.25, 0.25, 0.25)
    levels = torch.arange(256, dtype=torch.float64) / 255.0
    means, stds = [], []
    for c in range(images.shape[1]):
        counts = torch.bincount(images[:, c].reshape(-1).cpu(), minlength=256).to(torch.float64)
        p = counts / counts.sum()
        m = float((p * levels).sum())
        var = float((p * (levels - m) ** 2).sum())
        means.append(m)
        stds.append(max(var, 1e-12) ** 0.5)
    return tuple(means), tuple(stds)


def normalisation_problem(name: str, values: object, channels: tuple[int, ...] | None = None) -> str | None:
    """Why ``values`` cannot be the per-channel ``name`` (``"mean"`` or ``"std"``) of a
    normalisation: not numbers, not finite, a std not above 0, or (with ``channels``) a count not
    in it; None when they can be."""
    try:
        vals = [float(v) for v in values]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return f"{name} {values!r} is not a list of numbers"
    if channels is not None and len(vals) not in channels:
        return f"{name} {vals} must be {' or '.join(str(c) for c in channels)} numbers"
    if not all(math.isfinite(v) for v in vals) or (name == "std" and not all(v > 0 for v in vals)):
        return f"{name} {vals} must be finite numbers{' above 0' if name == 'std' else ''}"
    return None

