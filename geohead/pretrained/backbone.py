"""A backbone from its tensors: the architecture given (a geohead name such as ``resnet18_w16``
or any timm name, with ``model_args``) or inferred from the tensor shapes, for the two families
whose keys timm and torchvision share: ResNets (``conv1``, ``layerK.J.*``; a 3x3 ``conv1`` is
geohead's CIFAR stem) and Vision Transformers (``patch_embed``, ``pos_embed``, ``blocks.N.*``;
DINO's ViTs use timm's names). The weights are loaded strictly; a classifier (``fc.*``,
``head.*``) the backbone does not have is left out.
"""
from __future__ import annotations

import math
import re
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from geohead.data.loaders import MAX_IMG_SIZE
from geohead.io import shorten
from geohead.pretrained.read import PretrainedError

_RESNETS = {("basic", (2, 2, 2, 2)): "resnet18", ("basic", (3, 4, 6, 3)): "resnet34",
            ("bottleneck", (3, 4, 6, 3)): "resnet50", ("bottleneck", (3, 4, 23, 3)): "resnet101",
            ("bottleneck", (3, 8, 36, 3)): "resnet152"}
_VITS = {192: "vit_tiny_patch16_224", 384: "vit_small_patch16_224", 768: "vit_base_patch16_224", 1024: "vit_large_patch16_224"}


def infer_architecture(state: Mapping[str, Tensor]) -> tuple[str, dict[str, Any], int | None]:
    """(name for :func:`geohead.backbones.create_backbone`, model_args, the img_size the weights
    imply or None) of a ResNet or ViT state dict. Raises :class:`PretrainedError` otherwise."""
    family = _resnet if "conv1.weight" in state and "layer1.0.conv1.weight" in state else \
        _vit if "patch_embed.proj.weight" in state and "pos_embed" in state else None
    try:
        if family is not None:
            return family(state)
    except (KeyError, IndexError) as exc:  # a tensor the family needs is missing or has too few dimensions
        name = "ResNet" if family is _resnet else "ViT"
        raise PretrainedError(f"the tensors look like a {name}'s but do not form one ({type(exc).__name__}: "
                              f"{shorten(str(exc))}); pass --architecture NAME with --model-arg KEY=VALUE") from None
    raise PretrainedError(
        f"cannot infer the backbone's architecture from its keys ({sorted(state)[:4]}...); pass --architecture NAME "
        "(a timm or geohead name) with --model-arg KEY=VALUE, or use geohead.diagnose_model(backbone, head, ...)"
    )


def _resnet(state: Mapping[str, Tensor]) -> tuple[str, dict[str, Any], int | None]:
    kind = "bottleneck" if "layer1.0.conv3.weight" in state else "basic"
    layers = tuple(len({m.group(1) for k in state if (m := re.match(rf"layer{i}\.(\d+)\.", k))}) for i in range(1, 5))
    planes = [int(state[f"layer{i}.0.conv1.weight"].shape[0]) for i in range(1, 5)]
    conv1 = state["conv1.weight"]
    arch = _RESNETS.get((kind, layers))
    args: dict[str, Any] = {}
    if arch is None:
        arch = "resnet50" if kind == "bottleneck" else "resnet18"
        args["layers"] = list(layers)
    if planes != [64, 128, 256, 512]:
        args["channels"] = planes
    if int(conv1.shape[0]) != 64:
        args["stem_width"] = int(conv1.shape[0])
    if int(conv1.shape[1]) != 3:
        args["in_chans"] = int(conv1.shape[1])
    cifar = tuple(conv1.shape[-2:]) == (3, 3)
    return arch + ("_cifar" if cifar else ""), args, None


def _vit(state: Mapping[str, Tensor]) -> tuple[str, dict[str, Any], int | None]:
    w = state["patch_embed.proj.weight"]
    dim, chans, patch = int(w.shape[0]), int(w.shape[1]), int(w.shape[-1])
    tokens = int(state["pos_embed"].shape[1])
    prefix_tokens = int("cls_token" in state) + (int(state["reg_token"].shape[1]) if "reg_token" in state else 0)
    side = math.isqrt(tokens - prefix_tokens)
    if side * side != tokens - prefix_tokens:
        raise PretrainedError(f"pos_embed holds {tokens} tokens: not a square grid (+ class token); pass --architecture")
    depth = len({m.group(1) for k in state if (m := re.match(r"blocks\.(\d+)\.", k))})
    args: dict[str, Any] = {
        "img_size": side * patch, "patch_size": patch, "embed_dim": dim, "depth": depth, "num_heads": max(1, dim // 64),
        "mlp_ratio": int(state["blocks.0.mlp.fc1.weight"].shape[0]) / dim,
        "qkv_bias": "blocks.0.attn.qkv.bias" in state, "class_token": "cls_token" in state,
    }
    if chans != 3:
        args["in_chans"] = chans
    if "fc_norm.weight" in state:
        args["global_pool"] = "avg"
    return _VITS.get(dim, "vit_small_patch16_224"), args, side * patch


def build_backbone(state: Mapping[str, Tensor], architecture: str | None = None, model_args: Mapping[str, Any] | None = None,
                   img_size: int | None = None) -> nn.Module:
    """The backbone with ``state`` loaded (eval mode, float32, ``.geohead_config`` recorded).

    Args:
        state: the backbone's tensors (prefix removed).
        architecture: a geohead or timm name; default inferred (:func:`infer_architecture`).
        model_args: keyword arguments for timm (override the inferred ones).
        img_size: the input side (ViTs need it; default: what the weights imply, else 32 for a
            CIFAR stem and 224 otherwise).
    Shapes: ``backbone(x)`` (B, C, S, S) -> (B, d).
    """
    from geohead.backbones import check_model_args

    try:  # no loader key (pretrained, checkpoint_path, ...) and only plain values reach timm
        check_model_args(dict(model_args or {}))
    except ValueError as exc:
        raise PretrainedError(f"model_args: {exc}") from None
    inferred_img = None
    if architecture is None:
        architecture, args, inferred_img = infer_architecture(state)
    else:
        args = {}
    args = {**args, **dict(model_args or {})}
    size = img_size or args.get("img_size") or inferred_img
    size_source = "given" if img_size or (model_args or {}).get("img_size") else "weights" if inferred_img else "default"
    size = size or (32 if architecture.endswith(("_cifar", "_w16", "_w32")) else 224)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_IMG_SIZE:
        raise PretrainedError(f"input size {shorten(str(size))} ({size_source}) is outside 1 to {MAX_IMG_SIZE:,}; pass "
                              "--img-size with the size the backbone was trained at")
    args.pop("img_size", None)
    with torch.device("meta"):  # the shapes first, without memory: the tensors bound what is built for real
        expected = _create(architecture, size, args).state_dict()
    tensors = {k: v for k, v in state.items() if k in expected}
    extra = sorted(set(state) - set(expected))
    missing = sorted(set(expected) - set(tensors))
    bad = [k for k in tensors if tensors[k].shape != expected[k].shape]
    if missing or bad or [k for k in extra if not k.startswith(("fc.", "head.", "classifier."))]:
        raise PretrainedError(
            f"the checkpoint's backbone does not fit {architecture!r} (model_args={args}): missing {missing[:4]}, unexpected "
            f"{extra[:4]}, other shapes {[(k, tuple(state[k].shape), tuple(expected[k].shape)) for k in bad[:3]]}; pass "
            "--architecture NAME / --model-arg KEY=VALUE for what it was created with"
        )
    model = _create(architecture, size, args)
    model.load_state_dict(tensors, strict=True)
    model.geohead_config["classifier_dropped"] = extra
    model.geohead_config["img_size_source"] = size_source  # "default": the checkpoint does not say
    return model.eval()


def _create(architecture: str, size: int, args: Mapping[str, Any]) -> nn.Module:
    from geohead.backbones import create_backbone

    try:
        return create_backbone(architecture, img_size=size, channels_last=False, **args)
    except Exception as exc:  # noqa: BLE001 - timm's constructor errors are the arguments' fault
        raise PretrainedError(f"cannot build backbone {architecture!r} with model_args={args}: {type(exc).__name__}: {exc}") from None


def check_model_inputs(backbone: Any, head: Any, mean: Any = None, std: Any = None, **optional: Any) -> None:
    """What :func:`geohead.pretrained.diagnose.diagnose_model` is given, checked before any data is
    loaded: ``backbone`` and ``head`` are ``nn.Module``s (``optional`` ones, e.g. ``teacher_head``,
    are None or modules), ``mean``/``std`` 1 or 3 finite numbers (std above 0). Raises
    :class:`PretrainedError` (a ValueError) naming the argument and the fix."""
    for name, module in (("backbone", backbone), ("head", head), *optional.items()):
        if not isinstance(module, nn.Module) and (module is not None or name in ("backbone", "head")):
            raise PretrainedError(f"{name} must be a torch nn.Module, got {type(module).__name__} {str(module)[:60]!r}; "
                                  "pass the model itself (for a checkpoint file use geohead.diagnose_pretrained(path))")
    from geohead.data.dataset import normalisation_problem

    for name, values in (("mean", mean), ("std", std)):
        problem = None if values is None else normalisation_problem(name, values, channels=(1, 3))
        if problem:
            raise PretrainedError(f"{problem}; give the normalisation the backbone was trained with")


__all__ = ["build_backbone", "check_model_inputs", "infer_architecture"]
