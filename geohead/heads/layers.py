"""Layer resolution for heads, in one place: names -> layer types (timm ``layers/create_act`` style).

A head's parts are chosen by name in a :class:`~geohead.heads.HeadSpec` (so that it stays
JSON-serialisable) and turned into layer *types* here; an absent part is ``nn.Identity``, so a
head's forward is the same flat chain whatever the configuration. Every type returned is called
as ``layer(dim)`` (activations: ``layer()``); ``nn.Identity`` ignores its arguments.
"""
from __future__ import annotations

import functools
from typing import Callable, Union

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from geohead.errors import SpecError

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

#: Activations that Python code passed as types (``activation=MyAct``) or registered with
#: :func:`register_activation`, by their JSON name (``"module:QualName"`` or the registered name).
#: Only this process's code adds to it: a name read from a file is looked up, never imported.
_PYTHON_ACTIVATIONS: dict[str, type[nn.Module]] = {}


def register_activation(name: str, cls: type[nn.Module]) -> str:
    """Let head specs read from files name ``cls`` as ``name`` in this process; returns ``name``.

    Specs read from files (head.json, best_head.json, a checkpoint's head spec) name activations
    from a fixed registry: :data:`ACTIVATIONS` plus what Python code registered here. A file
    cannot make geohead import a module. Passing a type (``activation=torch.nn.ELU``) registers it
    under ``"module:QualName"`` by itself.
    """
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"register_activation needs an nn.Module type, got {cls!r}")
    if not isinstance(name, str) or not name or name.lower() in ACTIVATIONS:
        raise SpecError(f"activation name {name!r} is empty or a built-in name; choose another")
    if _PYTHON_ACTIVATIONS.get(name, cls) is not cls:
        raise SpecError(f"activation name {name!r} is already registered for {_PYTHON_ACTIVATIONS[name]!r}")
    _PYTHON_ACTIVATIONS[name] = cls
    return name


def _unknown_activation(act: object) -> SpecError:
    return SpecError(
        f"unknown activation {act!r}; valid names are {sorted(ACTIVATIONS)}"
        + (f" or the registered {sorted(_PYTHON_ACTIVATIONS)}" if _PYTHON_ACTIVATIONS else "")
        + ". A spec read from a file never imports a class; to use your own, pass the type in Python "
        "(activation=torch.nn.ELU) or call geohead.heads.register_activation(name, cls) before loading"
    )


def activation_name(act: ActivationArg) -> str:
    """Canonical JSON name of an activation: a key of :data:`ACTIVATIONS` or a registered name.

    Accepts a name (case-insensitive; ``"swish"`` becomes ``"silu"``), a name registered with
    :func:`register_activation`, or any ``nn.Module`` type (registered as ``"module:QualName"``).
    A string never imports anything.
    """
    if isinstance(act, str):
        if act in _PYTHON_ACTIVATIONS:
            return act
        key = act.lower()
        if key not in ACTIVATIONS:
            raise _unknown_activation(act)
        return "silu" if key == "swish" else key
    if isinstance(act, type) and issubclass(act, nn.Module):
        for name, cls in ACTIVATIONS.items():
            if cls is act and name != "swish":
                return name
        for name, cls in _PYTHON_ACTIVATIONS.items():
            if cls is act:
                return name
        return register_activation(f"{act.__module__}:{act.__qualname__}", act)
    raise SpecError(
        f"activation must be a name in {sorted(ACTIVATIONS)} or an nn.Module type, got {act!r}"
    )


def activation_layer(name: str) -> type[nn.Module]:
    """The activation type of a canonical name (inverse of :func:`activation_name`); a lookup only."""
    if name in ACTIVATIONS:
        return ACTIVATIONS[name]
    if name in _PYTHON_ACTIVATIONS:
        return _PYTHON_ACTIVATIONS[name]
    raise _unknown_activation(name)


def norm_layer(name: str | None) -> Callable[[int], nn.Module]:
    """The normalisation type of a name in :data:`NORM_LAYERS` (``None`` -> ``nn.Identity``)."""
    if name not in NORM_LAYERS:
        raise SpecError(f"unknown norm {name!r}; valid values are {list(NORM_LAYERS)}")
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
    "PIECEWISE_LINEAR", "activation_layer", "activation_name", "linear_bias", "norm_layer", "register_activation",
]
