"""What an export writes, by source: the backbone's rebuild config and tensors, the head, provenance.

A source is a ``geohead train`` checkpoint (student or EMA teacher branch) or an in-memory model
(geohead's ``SSLModel`` or a backbone from :func:`geohead.backbones.create_backbone`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor, nn

from geohead._version import __version__
from geohead.training.checkpoint import Checkpoint
from geohead.export.format import ExportError
from geohead.heads import HeadSpec


@dataclasses.dataclass
class Source:
    """A backbone to export: its rebuild config, tensors, optional head, provenance."""

    config: dict[str, Any]
    tensors: dict[str, Tensor]
    head: dict[str, Tensor] | None
    head_spec: dict[str, Any] | None
    provenance: dict[str, Any]


def source_of_checkpoint(ck: Checkpoint, teacher: bool, with_head: bool) -> Source:
    meta = ck.meta
    config = meta.get("backbone")
    if not isinstance(config, dict) or "architecture" not in config:
        raise ExportError(
            f"checkpoint {str(ck.path)!r} records no backbone config (metadata 'backbone'); "
            "it was not written by geohead train, so its architecture is unknown"
        )
    branch = "teacher" if teacher else "model"
    tensors = ck.section(f"{branch}.backbone")
    if teacher and not tensors:
        raise ExportError(
            f"checkpoint {str(ck.path)!r} (objective {meta.get('objective')!r}) has no EMA teacher; only BYOL and "
            "DINO train one. Drop --teacher to export the student backbone"
        )
    if not tensors:
        raise ExportError(f"checkpoint {str(ck.path)!r} holds no backbone tensors (no 'model.backbone.*' keys)")
    head = head_spec = None
    if with_head:
        head = ck.section(f"{branch}.head")
        head_spec = meta.get("head_spec")
        if not head or head_spec is None:
            raise ExportError(f"checkpoint {str(ck.path)!r} holds no {branch} head to export with --with-head")
        head_spec = _checked_spec(head_spec, ck.path)
    provenance = {
        "geohead_version": meta.get("geohead_version"),
        "objective": meta.get("objective"),
        "objective_hparams": meta.get("objective_hparams"),
        "head_spec": meta.get("head_spec"),
        "predictor_spec": meta.get("predictor_spec"),
        "data": meta.get("data"),
        "step": meta.get("step"),
        "epoch": meta.get("epoch"),
        "total_steps": meta.get("total_steps"),
        "branch": "teacher" if teacher else "student",
        "source": str(ck.path),
    }
    return Source(dict(config), tensors, head, head_spec, provenance)


def source_of_module(model: nn.Module, with_head: bool, teacher: bool, **foreign: Any) -> Source:
    """``foreign``: architecture / model_args / img_size for a timm model geohead did not build
    (see :mod:`geohead.export.foreign`)."""
    if teacher:
        raise ExportError("teacher=True selects the EMA teacher of a checkpoint; to export a teacher module, pass it itself")
    model = getattr(model, "_orig_mod", model)  # torch.compile
    model = getattr(model, "module", model)  # DistributedDataParallel
    backbone = getattr(model, "backbone", model)
    head = None
    if backbone is not model:  # geohead's SSLModel has .head, lightly's models .projection_head
        head = next((h for h in (getattr(model, n, None) for n in ("head", "projection_head")) if isinstance(h, nn.Module)), None)
    if getattr(backbone, "geohead_config", None) is None:  # torchvision's ResNet: read as the CLI reads its file
        backbone = _torchvision_resnet(backbone, foreign.get("architecture"), foreign.get("img_size")) or backbone
    config = getattr(backbone, "geohead_config", None)
    if isinstance(config, dict):
        tensors = dict(backbone.state_dict())
    else:  # a timm model built by someone else: architecture inferred and checked bit for bit
        from geohead.export.foreign import foreign_backbone

        config, tensors = foreign_backbone(backbone, **{k: v for k, v in foreign.items() if v is not None})
    if head is not None and getattr(head, "spec", None) is None and isinstance(getattr(head, "layers", None), nn.Sequential):
        from geohead.heads import GeometricHead  # a lightly projection head: the same outputs as a GeometricHead

        try:
            head = GeometricHead.from_lightly(head)
        except ValueError:
            pass  # not expressible: with_head says so below
    head_tensors = head_spec = None
    if with_head:
        spec = getattr(head, "spec", None)
        if head is None or spec is None:
            raise ExportError("with_head=True needs a model whose .head is a GeometricHead (e.g. geohead's SSLModel) or a "
                              "lightly projection head a GeometricHead can express")
        head_tensors, head_spec = dict(head.state_dict()), spec.to_dict()
    spec = getattr(head, "spec", None) if head is not None else None
    provenance = {
        "geohead_version": __version__,
        "objective": None,
        "head_spec": spec.to_dict() if spec is not None else None,
        "data": None,
        "step": None,
        "branch": "student",
        "source": f"in-memory {type(model).__name__}"
        + ("" if hasattr(backbone, "geohead_config") else " (built by timm, not geohead)"),
    }
    return Source(dict(config), tensors, head_tensors, head_spec, provenance)


def _torchvision_resnet(module: nn.Module, architecture: str | None, img_size: int | None) -> nn.Module | None:
    """The timm ResNet holding the weights of a torchvision ResNet, or of the
    ``nn.Sequential(*list(resnet.children())[:-1])`` lightly's docs build, read from its state_dict
    as ``geohead export`` reads the same file (classifier dropped); None for any other module."""
    from timm.models.resnet import ResNet

    if isinstance(module, ResNet) or hasattr(module, "pretrained_cfg"):
        return None  # timm's own: checked bit for bit by geohead.export.foreign
    from geohead.pretrained.layouts import _unnumber_resnet

    state, _ = _unnumber_resnet(dict(module.state_dict()))
    if not {"conv1.weight", "bn1.weight", "layer1.0.conv1.weight"} <= set(state):
        return None
    from geohead.pretrained.backbone import build_backbone

    try:
        return build_backbone({k: v for k, v in state.items() if not k.startswith("fc.")}, architecture, img_size=img_size)
    except ValueError as exc:
        raise ExportError(f"{type(module).__name__} holds a torchvision ResNet's tensors that no timm ResNet fits: {exc}; "
                          "pass architecture='<resnet18, resnet50, ...>' for the depth it was built with") from None


__all__ = ["Source", "source_of_checkpoint", "source_of_module"]


def _checked_spec(spec: Any, path: Any) -> dict[str, Any]:
    """A checkpoint's head spec, validated as a file's spec is (registry activations only)
    before an export copies it; its canonical dict."""
    try:
        return HeadSpec.from_dict(spec).to_dict()
    except ValueError as exc:
        raise ExportError(f"checkpoint {str(path)!r}: its head spec is not one geohead loads: {exc}") from None
