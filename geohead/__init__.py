"""geohead: geometric projection heads for self-supervised learning.

``import geohead`` loads torch and the head module only; everything else (timm backbones, optuna,
matplotlib) is imported lazily by the submodule that needs it.
"""
from __future__ import annotations

from geohead._lazy import lazy_attributes

from geohead._version import __version__
from geohead.heads import GeometricHead, HeadSpec

__all__ = ["GeometricHead", "HeadSpec", "__version__", "diagnose_model", "export_backbone", "load_backbone", "load_pretrained"]

#: Attributes loaded on first access, so that ``import geohead`` stays light (PEP 562).
_LAZY = {"export_backbone": "geohead.export", "load_backbone": "geohead.export",
         "diagnose_model": "geohead.pretrained.diagnose", "load_pretrained": "geohead.pretrained"}

__getattr__ = lazy_attributes('geohead', globals(), _LAZY)
