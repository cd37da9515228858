"""Models trained anywhere: read their checkpoints safely, rebuild backbone and head, diagnose them.

Modules::

    read.py       torch.load(weights_only=True) + the Namespace allowlist; safetensors; unsafe files refused
    layouts.py    where backbone / head / teacher sit: Lightning, lightly, solo-learn, DINO, VICReg, Barlow Twins
    backbone.py   the backbone from its tensors (architecture given or inferred: ResNets, ViTs)
    load.py       load_pretrained: backbone + checked GeometricHead + method
    synthetic.py  small checkpoints in those layouts (tests, benchmarks/paper/pretrained.py)
"""
from __future__ import annotations

from geohead.pretrained.load import Pretrained, load_pretrained
from geohead.pretrained.read import PretrainedError, UnsafeCheckpointError

__all__ = ["Pretrained", "PretrainedError", "UnsafeCheckpointError", "load_pretrained"]
