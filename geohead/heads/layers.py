"""Layer resolution for heads, in one place: names -> layer types (timm ``layers/create_act`` style).

A head's parts are chosen by name in a :class:`~geohead.heads.HeadSpec` (so that it stays
JSON-serialisable) and turned into layer *types* here; an absent part is ``nn.Identity``, so a
head's forward is the same flat chain whatever the configuration. Every type returned is called
as ``layer(dim)`` (activations: ``layer()``); ``nn.Identity`` ignores its arguments.
"""
from __future__ import annotations

import functools
import importlib
from typing import Any, Callable, Union

import torch
from torch import Tensor, nn
from torch.nn import functional as F

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "mish": nn.Mish,
    "softplus": nn.Softplus,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "identity": nn.Identity,
}
#: Activations whose second derivative vanishes almost everywhere (so ``M = 0`` a.e.).
PIECEWISE_LINEAR: frozenset[str] = frozenset({"relu", "identity"})

#: Normalisation after a Linear, by name: a type called as ``layer(dim)``; ``None`` = no norm.
NORM_LAYERS: dict[str | None, Callable[[int], nn.Module]] = {
    None: nn.Identity,
    "batch": nn.BatchNorm1d,
    "batch_noaffine": functools.partial(nn.BatchNorm1d, affine=False),
    "layer": nn.LayerNorm,
}
#: Norms allowed after the hidden Linears, and after the last one.
NORMS: tuple[str | None, ...] = ("batch", "layer", None)
LAST_NORMS: tuple[str | None, ...] = (None, "batch", "batch_noaffine", "layer")
#: Norms that subtract a per-feature batch mean, making a preceding Linear's bias redundant.
MEAN_REMOVING_NORMS: frozenset[str] = frozenset({"batch", "batch_noaffine"})

ActivationArg = Union[str, type[nn.Module]]


def activation_name(act: ActivationArg) -> str:
    """Canonical JSON name of an activation: a key of :data:`ACTIVATIONS` or ``"module:QualName"``.

    Accepts a name (case-insensitive; ``"swish"`` becomes ``"silu"``), a ``"module:QualName"``
    import path, or any ``nn.Module`` type.
    """
    if isinstance(act, str) and ":" in act:
        activation_layer(act)  # validates the import path
        return act
    if isinstance(act, str):
        key = act.lower()
        if key not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {act!r}; valid names are {sorted(ACTIVATIONS)} "
                "or any nn.Module type (e.g. activation=torch.nn.ELU)"
            )
        return "silu" if key == "swish" else key
    if isinstance(act, type) and issubclass(act, nn.Module):
        for name, cls in ACTIVATIONS.items():
            if cls is act and name != "swish":
                return name
        return f"{act.__module__}:{act.__qualname__}"
    raise TypeError(
        f"activation must be a name in {sorted(ACTIVATIONS)} or an nn.Module type, got {act!r}"
    )


def activation_layer(name: str) -> type[nn.Module]:
    """The activation type of a canonical name (inverse of :func:`activation_name`)."""
    if name in ACTIVATIONS:
        return ACTIVATIONS[name]
    if ":" in name:
        module, _, qual = name.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            return obj
    raise ValueError(
        f"unknown activation {name!r}; valid names are {sorted(ACTIVATIONS)} or 'module:Class'"
    )


def norm_layer(name: str | None) -> Callable[[int], nn.Module]:
    """The normalisation type of a name in :data:`NORM_LAYERS` (``None`` -> ``nn.Identity``)."""
    if name not in NORM_LAYERS:
        raise ValueError(f"unknown norm {name!r}; valid values are {list(NORM_LAYERS)}")
    return NORM_LAYERS[name]


def linear_bias(bias: bool | str, norm: str | None) -> bool:
    """Whether a Linear followed by ``norm`` has a bias: ``bias`` itself, or for ``"auto"``
    none before a mean-removing (batch) norm. LayerNorm only removes the mean over features,
    not a per-feature offset, so a Linear before it keeps its bias."""
    return bias if isinstance(bias, bool) else norm not in MEAN_REMOVING_NORMS


class L2Norm(nn.Module):
    """``x / ||x||_2`` along the last dimension (DINO's bottleneck normalisation).

    Shapes: (..., D) -> (..., D). ``eps`` is 1e-6 in half precision, 1e-12 otherwise.
    """

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1, eps=1e-6 if x.dtype in (torch.float16, torch.bfloat16) else 1e-12)


__all__ = [
    "ACTIVATIONS", "ActivationArg", "L2Norm", "LAST_NORMS", "MEAN_REMOVING_NORMS", "NORMS", "NORM_LAYERS",
    "PIECEWISE_LINEAR", "activation_layer", "activation_name", "linear_bias", "norm_layer",
]
