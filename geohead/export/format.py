"""The export format, shared by writing and reading: file names, format tags, storage dtypes,
the tensor checksum, the metadata encoding, and the check that tensors fit a backbone config."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from geohead.io import parse_json, shape_mismatch, tensor_checksum

EXPORT_FORMAT = "geohead.backbone/1"
HEAD_FORMAT = "geohead.head/1"
WEIGHTS_NAME = "model.safetensors"
CONFIG_NAME = "config.json"
HEAD_WEIGHTS_NAME = "head.safetensors"
HEAD_SPEC_NAME = "head.json"

#: ``--dtype`` choices: the dtype floating-point tensors are stored in (integer buffers such as
#: BatchNorm's ``num_batches_tracked`` keep theirs).
DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


class ExportError(ValueError):
    """An export that cannot be written or read: wrong source, bad folder, corrupted file."""


# ---------------------------------------------------------------------- metadata
def encode_metadata(prov: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, str]:
    """Safetensors metadata: ``format = "pt"`` and each entry as JSON text under ``geohead.<key>``."""
    meta = {"format": "pt"}
    for k, v in {**prov, **extra}.items():
        meta[f"geohead.{k}"] = json.dumps(v, sort_keys=True)
    return meta


def decode_metadata(meta: Mapping[str, str], path: Path) -> dict[str, Any]:
    """Inverse of :func:`encode_metadata`: the ``geohead.*`` entries parsed, ``geohead.`` removed."""
    out = {}
    for k, v in meta.items():
        if k.startswith("geohead."):
            out[k[len("geohead."):]] = parse_json(v, f"{str(path)!r}: metadata {k!r} (a corrupted header)", ExportError)
    return out


#: config.json's ``geohead`` field and the files' ``geohead.`` metadata key holding :func:`integrity_checksum`.
INTEGRITY_KEY = "integrity"


def integrity_checksum(config: Mapping[str, Any], weights_meta: Mapping[str, str],
                       head_meta: Mapping[str, str] | None) -> str:
    """``"sha256:<hex>"`` over what gives an export its meaning besides its tensors: every field of
    config.json (architecture, model_args, mean/std, input size, the tensor checksums) and the whole
    metadata of model.safetensors and head.safetensors, each but the integrity checksum itself."""
    cfg = json.loads(json.dumps(config))
    if isinstance(cfg.get("geohead"), dict):
        cfg["geohead"].pop(INTEGRITY_KEY, None)
    key = "geohead." + INTEGRITY_KEY

    def strip(meta: Mapping[str, str] | None) -> dict[str, str] | None:
        return None if meta is None else {k: v for k, v in meta.items() if k != key}

    return tensor_checksum({}, {"config": cfg, "weights": strip(weights_meta), "head": strip(head_meta)})


def nonfinite_problem(tensors: Mapping[str, Tensor], mean: Any = None, std: Any = None) -> str | None:
    """Why these weights or this normalisation cannot be exported or loaded (NaN/inf values, a std
    that is not positive), naming the first bad one; None when they can."""
    for name, t in tensors.items():
        if t.is_floating_point() and t.numel() and not bool(torch.isfinite(t).all()):
            return f"tensor {name!r} holds NaN or inf values (the run diverged?)"
    from geohead.data.dataset import normalisation_problem

    for label, values in (("mean", mean), ("std", std)):
        problem = None if values is None else normalisation_problem(label, values)
        if problem:
            return problem
    return None


# ---------------------------------------------------------------------- architecture check
def _describe(config: Mapping[str, Any]) -> str:
    given = config.get("model_args", {})
    args = ", ".join(f"{k}={str(v)[:40]}" for k, v in sorted(given.items())) if isinstance(given, dict) else str(given)[:80]
    stem = ", CIFAR stem" if config.get("cifar_stem") else ""
    return f"{config.get('name', config.get('architecture'))!r} ({config.get('architecture')}({args}){stem})"


def check_architecture(config: dict[str, Any], tensors: Mapping[str, Tensor], what: str, load: bool = False) -> nn.Module:
    """Rebuild the backbone of ``config``, check that ``tensors`` fit it exactly, and (``load``)
    load them.

    The architecture is built on the meta device (no memory, no random initialisation: a ViT's
    init alone takes seconds on a CPU); with ``load`` the tensors are then assigned in the
    parameters' dtype (float32), in the config's memory format. A model with non-persistent
    buffers (not in a state_dict) is built for real instead, so that those buffers hold values.
    Without ``load`` the returned model lives on the meta device (for its config only).
    """
    from geohead.backbones import rebuild_backbone

    try:
        with torch.device("meta"):
            model = rebuild_backbone(config)
    except (ValueError, TypeError, RuntimeError, KeyError) as exc:
        raise ExportError(f"{what}: cannot rebuild backbone {_describe(config)}: {exc}") from None
    expected = model.state_dict()
    problem = shape_mismatch(expected, tensors)
    if problem is not None:
        raise ExportError(
            f"{what} holds tensors of another architecture than its config's backbone {_describe(config)}: "
            f"{problem}. The file and its config do not belong together; export the checkpoint again"
        )
    if not load:
        return model
    if any(name not in expected for name, _ in model.named_buffers()):
        model = rebuild_backbone(config)
        model.load_state_dict(tensors, strict=True)
        return model
    model.load_state_dict({k: v.to(expected[k].dtype) for k, v in tensors.items()}, strict=True, assign=True)
    if config.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    return model


__all__ = [
    "CONFIG_NAME", "DTYPES", "EXPORT_FORMAT", "ExportError", "INTEGRITY_KEY", "integrity_checksum", "nonfinite_problem", "HEAD_FORMAT", "HEAD_SPEC_NAME", "HEAD_WEIGHTS_NAME",
    "WEIGHTS_NAME", "check_architecture", "decode_metadata", "encode_metadata", "shape_mismatch", "tensor_checksum",
]
