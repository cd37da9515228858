"""geohead: geometric projection heads for self-supervised learning.

``import geohead`` loads torch and the head module only; everything else (timm backbones, optuna,
matplotlib) is imported lazily by the submodule that needs it.
"""
from __future__ import annotations

from geohead._version import __version__
from geohead.heads import GeometricHead, HeadSpec

__all__ = ["GeometricHead", "HeadSpec", "__version__"]
