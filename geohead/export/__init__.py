"""Head-free backbones: ``model.safetensors`` + timm's ``config.json``, and the loader back.

The point of pretraining is the backbone. :func:`export_backbone` writes it alone (no head,
predictor, teacher, objective or optimiser state) into a folder that timm reads by itself::

    DIR/model.safetensors   the backbone's state_dict (timm's key names), safetensors, no pickle
    DIR/config.json         timm's hub config: architecture, num_classes=0, num_features,
                            model_args (img_size, patch_size, ...), pretrained_cfg (input_size,
                            mean/std the backbone was trained with, crop_pct=1), and a "geohead"
                            section with the provenance (never read by timm)
    DIR/head.safetensors    only with ``with_head=True``: the head alone, a second file
    DIR/head.json           ... and its HeadSpec (``GeometricHead.from_spec("DIR/head.json")``)

Which loader to use:

* **timm-expressible backbones** (``config.json: geohead.timm_loadable = true``: ViTs at any
  img_size / patch size, timm ResNets with their standard stem such as ``resnet18_w16``):
  ``timm.create_model("local-dir:DIR", pretrained=True, num_classes=0)``, no geohead needed.
  ``pretrained=True`` is what makes timm read ``model.safetensors``; without it timm builds the
  same architecture with random weights.
* **backbones timm cannot express from arguments** (the CIFAR-stem ResNets ``*_cifar``:
  ``timm_loadable = false``, the stem is spelled out in ``geohead.backbone.stem``): timm would
  build the standard 7x7 stem and refuse the 3x3 ``conv1.weight`` (a size-mismatch error, never
  silently wrong weights); load them with :func:`load_backbone` (``geohead.load_backbone(DIR)``).

:func:`load_backbone` reads any export: it checks the checksum, rebuilds the architecture from
the config, and refuses tensors of another architecture.

Safetensors metadata of ``model.safetensors``: ``format`` = ``"pt"`` (the Hugging Face convention)
and JSON text under ``geohead.*`` keys (:func:`read_metadata` parses them): ``geohead.format``,
``geohead.geohead_version`` (of the run that trained it), ``geohead.objective``,
``geohead.head_spec`` (the head that trained it, for provenance), ``geohead.predictor_spec``,
``geohead.data`` (name, n, mean, std, img_size), ``geohead.step`` / ``total_steps`` /
``epoch``, ``geohead.branch`` (``"student"`` or ``"teacher"``), ``geohead.dtype``,
``geohead.backbone`` (the rebuild config) and ``geohead.checksum`` (see :func:`tensor_checksum`).
"""
from __future__ import annotations

from geohead.export.format import DTYPES, EXPORT_FORMAT, ExportError, tensor_checksum
from geohead.export.read import load_backbone, load_head, read_config, read_metadata
from geohead.export.write import ExportResult, export_backbone, timm_config

__all__ = [
    "DTYPES", "EXPORT_FORMAT", "ExportError", "ExportResult", "export_backbone", "load_backbone", "load_head",
    "read_config", "read_metadata", "tensor_checksum", "timm_config",
]
