"""Projection heads: :class:`GeometricHead`, its JSON-serialisable :class:`HeadSpec`, presets.

Modules (one concept each; this package's names are its public API)::

    layers.py     names -> layer types: activations, norms, bias rule, L2Norm
    spec.py       HeadSpec: validated fields, JSON round trip, describe(), rescale(), found_on
    whitening.py  the whitening rows of the first Linear
    presets.py    the SSL methods' standard heads, preset_spec
    head.py       GeometricHead, built from a HeadSpec (or from a lightly head / an MLPLayout)
    convert.py    other libraries' MLP heads -> HeadSpec + GeometricHead tensors, their documented forward
"""
from __future__ import annotations

from geohead.heads.head import GeometricHead, WhiteningRankWarning, num_parameters
from geohead.heads.layers import ACTIVATIONS, LAST_NORMS, NORMS, PIECEWISE_LINEAR, L2Norm, register_activation
from geohead.heads.presets import PRESETS, preset_spec
from geohead.heads.spec import WHITEN_MODES, HeadSpec, read_found_on

__all__ = [
    "WhiteningRankWarning",
    "ACTIVATIONS",
    "GeometricHead",
    "HeadSpec",
    "L2Norm",
    "LAST_NORMS",
    "NORMS",
    "PIECEWISE_LINEAR",
    "PRESETS",
    "WHITEN_MODES",
    "num_parameters",
    "preset_spec",
    "read_found_on",
    "register_activation",
]
