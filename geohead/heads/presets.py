"""The standard heads of six SSL methods (SimCLR, BYOL, SimSiam, Barlow Twins, VICReg, DINO), as specs.

Each ``_<name>`` function returns the fields of the method's head for a backbone of width
``in_dim`` with activation ``act``, and quotes the paper it follows; :func:`preset_spec` turns
them into a :class:`~geohead.heads.HeadSpec` (smooth activation by default).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from geohead.heads.spec import HeadSpec


def _simclr(in_dim: int, act: str) -> dict[str, Any]:
    """SimCLR (Chen et al. 2020, Sec. 2.1): "We opt for simplicity and adopt the commonly used
    ResNet ... and a MLP with one hidden layer to obtain z_i = g(h_i) = W(2)σ(W(1)h_i) where σ is
    a ReLU non-linearity"; the projection output is 128-d (Sec. B.9 / Fig. 8), the hidden layer
    as wide as h; BatchNorm on the hidden layer as in the official implementation."""
    return dict(in_dim=in_dim, hidden_dim=in_dim, out_dim=128, depth=2, activation=act, norm="batch")


def _byol(in_dim: int, act: str) -> dict[str, Any]:
    """BYOL (Grill et al. 2020, Sec. 3.3): "the projection g_θ ... is a multi-layer perceptron
    (MLP) consisting in a linear layer with output size 4096 followed by batch normalization,
    rectified linear units (ReLU), and a final linear layer with output dimension 256"."""
    return dict(in_dim=in_dim, hidden_dim=4096, out_dim=256, depth=2, activation=act, norm="batch")


def _byol_predictor(in_dim: int, act: str) -> dict[str, Any]:
    """BYOL predictor q_θ (Grill et al. 2020, Sec. 3.3): "uses the same architecture as g_θ"
    (4096 hidden, BN + ReLU, output of the projection's size)."""
    return dict(in_dim=in_dim, hidden_dim=4096, out_dim=in_dim, depth=2, activation=act, norm="batch")


def _simsiam(in_dim: int, act: str) -> dict[str, Any]:
    """SimSiam (Chen & He 2021, Sec. 4): "The projection MLP (in f) has BN applied to each
    fully-connected (fc) layer, including its output fc. Its output fc has no ReLU. The hidden fc
    is 2048-d. This MLP has 3 layers." The output BN is not affine in the official code."""
    return dict(
        in_dim=in_dim, hidden_dim=2048, out_dim=2048, depth=3, activation=act, norm="batch",
        last_norm="batch_noaffine",
    )


def _simsiam_predictor(in_dim: int, act: str) -> dict[str, Any]:
    """SimSiam predictor h (Chen & He 2021, Sec. 4): "The prediction MLP (h) has BN applied to its
    hidden fc layers. Its output fc does not have BN or ReLU. This MLP has 2 layers. The
    dimension of h's input and output (z and p) is d = 2048, and h's hidden layer's dimension is
    512, making h a bottleneck structure"."""
    return dict(in_dim=in_dim, hidden_dim=max(1, in_dim // 4), out_dim=in_dim, depth=2, activation=act, norm="batch")


def _barlow(in_dim: int, act: str) -> dict[str, Any]:
    """Barlow Twins (Zbontar et al. 2021, Sec. 3): "The projector network has three linear layers,
    each with 8192 output units. The first two layers of the projector are followed by a batch
    normalization layer and rectified linear units"."""
    return dict(in_dim=in_dim, hidden_dim=8192, out_dim=8192, depth=3, activation=act, norm="batch")


def _vicreg(in_dim: int, act: str) -> dict[str, Any]:
    """VICReg (Bardes et al. 2022, Sec. 4.1): "The expander h_φ is composed of two fully-connected
    layers with batch normalization (BN) and ReLU, and a third linear layer. The sizes of all
    3 layers were set to 8192"."""
    return dict(in_dim=in_dim, hidden_dim=8192, out_dim=8192, depth=3, activation=act, norm="batch")


def _dino(in_dim: int, act: str) -> dict[str, Any]:
    """DINO (Caron et al. 2021, Sec. 3.1 and App.): "The projection head consists of a 3-layer
    multi-layer perceptron (MLP) with hidden dimension 2048 followed by ℓ2 normalization and a
    weight normalized fully connected layer with K dimensions"; bottleneck 256, GELU, no BN,
    K = 65536, last-layer weight-norm gain fixed to 1 (``norm_last_layer``)."""
    return dict(
        in_dim=in_dim, hidden_dim=2048, out_dim=256, depth=3, activation=act, norm=None,
        prototypes=65536, freeze_prototype_norm=True,
    )


_PRESETS: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "simclr": _simclr,
    "byol": _byol,
    "byol_predictor": _byol_predictor,
    "simsiam": _simsiam,
    "simsiam_predictor": _simsiam_predictor,
    "barlow": _barlow,
    "vicreg": _vicreg,
    "dino": _dino,
}
PRESETS: tuple[str, ...] = tuple(_PRESETS)


def preset_spec(name: str, in_dim: int, smooth: bool = True, **overrides: Any) -> HeadSpec:
    """The :class:`HeadSpec` of a method's standard head (see each ``_<name>`` docstring).

    ``smooth=True`` replaces the method's ReLU with SiLU (Swish); DINO's head already uses GELU,
    which is smooth, and keeps it either way. ``overrides`` change any spec field, e.g.
    ``preset_spec("barlow", 512, hidden_dim=2048, out_dim=2048)`` for a CPU-sized head.
    """
    key = name.lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown head preset {name!r}; valid presets are {list(PRESETS)}")
    act = "gelu" if key == "dino" else ("silu" if smooth else "relu")
    fields = _PRESETS[key](in_dim, act)
    valid = {f.name for f in dataclasses.fields(HeadSpec)}
    bad = sorted(set(overrides) - valid)
    if bad:
        raise ValueError(f"unknown preset overrides {bad}; valid keys are {sorted(valid)}")
    fields.update(overrides)
    return HeadSpec(**fields)


__all__ = ["PRESETS", "preset_spec"]
