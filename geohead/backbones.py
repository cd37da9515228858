"""Backbones: timm models without classifier, sized for CIFAR-scale images.

``create_backbone(name, img_size=32)`` returns the timm module itself (so its ``state_dict`` keys
are timm's) with

* ``.num_features``: the dimension d of the representation z = f(x) (B, d);
* ``.geohead_config``: a JSON-able dict recording how to rebuild it (see :func:`rebuild_backbone`):
  ``name``, timm ``architecture``, ``model_args`` (for ``timm.create_model(architecture,
  num_classes=0, **model_args)``), ``img_size``, ``cifar_stem`` and its exact layers,
  ``channels_last``, ``num_features``, ``timm_loadable`` and the timm version.

Names are geohead aliases (:data:`ALIASES`), ``<timm resnet>_cifar`` for any timm ResNet with the
CIFAR stem, or any timm architecture name. The CIFAR stem (He et al. 2016 Sec. 4.2; SimCLR App.
B.9: "replace the first 7x7 Conv of stride 2 with 3x3 Conv of stride 1, and also remove the first
max pooling operation") cannot be expressed through timm's ResNet arguments, so such backbones
are recorded as ``timm_loadable: False`` with the stem spelled out in ``geohead_config["stem"]``;
every other alias is built by timm from arguments alone, so an exported config.json with those
``model_args`` loads with ``timm.create_model("local-dir:DIR", num_classes=0)``.

Measured on this project's 2-core CPU (``benchmarks/backbones.py --threads 1``, train step
fwd+bwd+SGD, batch 256 at 32 px, views/s contiguous -> channels_last): default ``resnet18_w16``
2,558 -> 3,733 (1.3x a 3-conv CNN baseline; ~6 s per 2-view epoch of 10k shapes images, and it
reached 93 % supervised test accuracy on shapes in 15 epochs), ``resnet18_w32`` 1,423 -> 1,873,
``resnet18_cifar`` 52 -> 59, ``vit_tiny_cifar`` 25 -> 36 (noise), a 96-d 4-block patch-4 ViT 346
-> 344, a patch-2 ConvNeXt (16-128) 5,985 -> 6,388 (faster but learned shapes worse in a short
probe). ``channels_last`` speeds ResNets up by 15-45 % and does nothing for ViTs, so it is on
by default for ResNets only.
"""
from __future__ import annotations

import dataclasses
import difflib
import inspect
import json
import math
import re
from typing import Any

import torch
from torch import nn

#: The small, fast CPU default (timm-expressible; see the module docstring for its speed).
DEFAULT_BACKBONE = "resnet18_w16"


@dataclasses.dataclass(frozen=True)
class BackboneAlias:
    """A geohead backbone name: a timm architecture, its arguments and whether to fit the CIFAR stem."""

    architecture: str
    model_args: dict[str, Any]
    cifar_stem: bool = False
    description: str = ""


ALIASES: dict[str, BackboneAlias] = {
    "resnet18_w16": BackboneAlias(
        "resnet18", {"channels": [16, 32, 64, 128], "stem_width": 16},
        description="ResNet-18 at 1/4 width (16-128 channels, 0.7 M parameters, d = 128), timm's standard "
        "stem (stride 4): the fast CPU default, built by timm from arguments",
    ),
    "resnet18_w32": BackboneAlias(
        "resnet18", {"channels": [32, 64, 128, 256], "stem_width": 32},
        description="ResNet-18 at 1/2 width (d = 256), timm's standard stem",
    ),
    "resnet18_cifar": BackboneAlias("resnet18", {}, cifar_stem=True, description="ResNet-18 with the CIFAR stem (d = 512)"),
    "resnet34_cifar": BackboneAlias("resnet34", {}, cifar_stem=True, description="ResNet-34 with the CIFAR stem (d = 512)"),
    "resnet50_cifar": BackboneAlias("resnet50", {}, cifar_stem=True, description="ResNet-50 with the CIFAR stem (d = 2048)"),
    "vit_tiny_cifar": BackboneAlias(
        "vit_tiny_patch16_224", {"patch_size": 4, "dynamic_img_size": True},
        description="ViT-Ti (192-d, 12 blocks) with 4x4 patches: 64 tokens at 32 px; dynamic_img_size lets DINO's "
        "16 px local crops through",
    ),
    "vit_small_cifar": BackboneAlias(
        "vit_small_patch16_224", {"patch_size": 4, "dynamic_img_size": True},
        description="ViT-S (384-d, 12 blocks) with 4x4 patches",
    ),
}


def list_backbones() -> dict[str, str]:
    """geohead's backbone aliases and what they are."""
    return {k: v.description for k, v in ALIASES.items()}


def _resolve(name: str) -> BackboneAlias:
    import timm

    if name in ALIASES:
        return ALIASES[name]
    if name.endswith("_cifar") and timm.is_model(name[: -len("_cifar")]):
        return BackboneAlias(name[: -len("_cifar")], {}, cifar_stem=True, description="timm ResNet with the CIFAR stem")
    if timm.is_model(name):
        return BackboneAlias(name, {})
    pool = list(ALIASES) + timm.list_models()
    close = difflib.get_close_matches(name, pool, n=5, cutoff=0.6)
    hint = f"; close matches: {close}" if close else ""
    raise ValueError(
        f"unknown backbone {name!r}{hint}. Use a geohead alias {sorted(ALIASES)}, '<timm resnet>_cifar', "
        "or any name in timm.list_models()"
    )


def _jsonable(args: dict[str, Any], name: str) -> dict[str, Any]:
    out = {}
    for k, v in args.items():
        v = list(v) if isinstance(v, tuple) else v
        try:
            json.dumps(v)
        except (TypeError, ValueError):
            raise ValueError(
                f"backbone argument {k}={v!r} of {name!r} is not JSON-serialisable, so the backbone could not be "
                "exported; pass a string name instead (timm accepts e.g. act_layer='gelu')"
            ) from None
        out[k] = v
    return out


def apply_cifar_stem(model: nn.Module) -> dict[str, Any]:
    """Replace a timm ResNet's stem by the CIFAR stem, in place; returns the stem's description.

    ``conv1``: 3x3, stride 1, padding 1, no bias, same output channels (Kaiming-normal init, as
    timm's ResNet); ``maxpool`` -> Identity; ``feature_info`` reductions divided by 4.
    """
    conv = getattr(model, "conv1", None)
    if not isinstance(conv, nn.Conv2d) or not hasattr(model, "maxpool"):
        raise ValueError(
            f"the CIFAR stem applies to timm ResNets with a single-conv stem (conv1 + maxpool); "
            f"{type(model).__name__} has {'a deep stem' if isinstance(conv, nn.Sequential) else 'no conv1'}"
        )
    new = nn.Conv2d(conv.in_channels, conv.out_channels, kernel_size=3, stride=1, padding=1, bias=False)
    nn.init.kaiming_normal_(new.weight, mode="fan_out", nonlinearity="relu")
    model.conv1 = new
    model.maxpool = nn.Identity()
    for info in getattr(model, "feature_info", []) or []:
        if isinstance(info, dict) and "reduction" in info:
            info["reduction"] = max(1, info["reduction"] // 4)
    return {
        "conv1": {"type": "Conv2d", "in_channels": new.in_channels, "out_channels": new.out_channels,
                  "kernel_size": 3, "stride": 1, "padding": 1, "bias": False},
        "maxpool": "Identity",
    }


def _uses_channels_last(model: nn.Module) -> bool:
    from timm.models.resnet import ResNet

    return isinstance(model, ResNet)


def _patch_size(model: nn.Module) -> int | None:
    pe = getattr(model, "patch_embed", None)
    ps = getattr(pe, "patch_size", None)
    if ps is None:
        return None
    return int(ps[0]) if isinstance(ps, (tuple, list)) else int(ps)


def feature_dim(model: nn.Module, img_size: int = 32) -> int:
    """Dimension d of ``model``'s output (B, d) at ``img_size``: ``num_features`` if set, checked by a forward.

    Raises ``ValueError`` if the model does not return a (B, d) tensor at that size.
    """
    was_training = model.training
    p = next(model.parameters(), None)
    x = torch.zeros(2, 3, img_size, img_size, device=p.device if p is not None else None,
                    dtype=p.dtype if p is not None and p.dtype.is_floating_point else torch.float32)
    try:
        model.eval()
        with torch.no_grad():
            out = model(x)
    finally:
        model.train(was_training)
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[0] != 2:
        shape = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ValueError(
            f"backbone output at img_size={img_size} has shape {shape}, expected (B, d): create it with "
            "num_classes=0 and a global pool"
        )
    d = int(out.shape[1])
    nf = getattr(model, "num_features", None)
    if nf is not None and int(nf) != d:
        raise ValueError(f"model.num_features = {nf} but its output has {d} features")
    return d


def _create_sized(architecture: str, img_size: int, **kwargs: Any) -> tuple[nn.Module, bool]:
    """``timm.create_model(architecture, img_size=img_size, **kwargs)`` where the model takes an
    img_size (ViTs), else without it (ResNets); returns the model and whether it took img_size.

    A call with img_size that raises ``TypeError`` is repeated without it; the TypeError counts
    as "this architecture takes no img_size" only when that second call builds a model whose class
    does not declare an ``img_size`` parameter. A class that declares one failed for another
    reason, and that first error is raised; errors of the second call propagate as they are.
    """
    import timm

    try:
        return timm.create_model(architecture, img_size=img_size, **kwargs), True
    except TypeError as exc:
        first = exc
    model = timm.create_model(architecture, **kwargs)
    if "img_size" in inspect.signature(type(model).__init__).parameters:
        raise first
    return model, False


def create_backbone(
    name: str = DEFAULT_BACKBONE,
    img_size: int = 32,
    channels_last: bool | None = None,
    pretrained: bool = False,
    **kwargs: Any,
) -> nn.Module:
    """Create a classifier-free timm backbone for img_size × img_size RGB inputs.

    Args:
        name: a geohead alias (:data:`ALIASES`; default :data:`DEFAULT_BACKBONE`),
            ``<timm resnet>_cifar``, or any timm architecture.
        img_size: input side in pixels; passed to timm where the architecture takes it (ViTs),
            and checked with one forward pass.
        channels_last: convert to channels-last memory format; ``None``: on for ResNets (faster on
            CPU and GPU), off otherwise.
        pretrained: load timm's pretrained weights (needs the weights locally or internet; not with
            the CIFAR stem).
        **kwargs: more ``timm.create_model`` arguments (override the alias's ``model_args``).

    Returns:
        the timm module, ``model(x)`` (B, 3, img_size, img_size) -> (B, ``model.num_features``),
        with ``model.geohead_config`` (JSON-able) recording how to rebuild it.

    Raises:
        ValueError: unknown name (with close matches), an img_size the model cannot take,
            non-serialisable arguments.
    """
    import timm

    if isinstance(img_size, bool) or int(img_size) != img_size or img_size < 1:
        raise ValueError(f"img_size must be a positive integer, got {img_size!r}")
    img_size = int(img_size)
    alias = _resolve(name)
    if alias.cifar_stem and pretrained:
        raise ValueError(f"{name!r} replaces the stem, so timm's pretrained weights do not fit; use pretrained=False")
    args = {**alias.model_args, **kwargs}
    args.pop("num_classes", None)
    model_args = _jsonable(args, name)  # before building: a config that cannot be saved is an error
    model, takes_img_size = _create_sized(alias.architecture, img_size, pretrained=pretrained, num_classes=0, **args)
    stem = apply_cifar_stem(model) if alias.cifar_stem else None
    patch = _patch_size(model)
    if patch is not None and img_size % patch:
        raise ValueError(
            f"img_size {img_size} is not a positive multiple of the patch size {patch} of backbone {name!r}; use "
            f"a multiple of {patch} (e.g. {max(patch, img_size // patch * patch)}) or pass patch_size=..."
        )
    try:
        d = feature_dim(model, img_size)
    except Exception as e:  # noqa: BLE001 - any failure at this size is the size's fault
        raise ValueError(f"backbone {name!r} cannot take img_size={img_size}: {type(e).__name__}: {e}") from e
    cl = _uses_channels_last(model) if channels_last is None else bool(channels_last)
    if cl:
        model = model.to(memory_format=torch.channels_last)
    if takes_img_size:
        model_args["img_size"] = img_size
    model.geohead_config = {
        "name": name,
        "architecture": alias.architecture,
        "model_args": model_args,
        "img_size": img_size,
        "cifar_stem": alias.cifar_stem,
        "stem": stem,
        "channels_last": cl,
        "num_features": d,
        "timm_loadable": not alias.cifar_stem,
        "timm_version": timm.__version__,
    }
    return model


#: timm.create_model / build_model_with_cfg arguments that load weights, reach the network, read
#: files or change what is built around the architecture: a config read from a file never passes them.
LOADER_KEYS = frozenset({
    "pretrained", "pretrained_cfg", "pretrained_cfg_overlay", "pretrained_strict", "checkpoint_path", "cache_dir",
    "features_only", "feature_cfg", "feature_cls", "out_indices", "scriptable", "exportable", "no_jit",
    "kwargs_filter", "model_args", "weights", "url", "hf_hub_id", "file", "state_dict",
})
_SAFE_STR = re.compile(r"^[A-Za-z0-9_.+-]{0,64}$")
_MAX_INT = 1 << 20


def _arg_problem(value: Any, depth: int = 0) -> str | None:
    """Why ``value`` is not a plain architecture argument (None when it is): JSON scalars, short
    names without path characters, bounded integers, finite floats, flat lists of those."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return None if abs(value) <= _MAX_INT else f"integer beyond ±{_MAX_INT}"
    if isinstance(value, float):
        return None if math.isfinite(value) and abs(value) <= _MAX_INT else "not a finite number"
    if isinstance(value, str):
        return None if _SAFE_STR.match(value) and ".." not in value else "a string with path or other characters"
    if isinstance(value, list) and depth == 0 and len(value) <= 16:
        return next((p for p in (_arg_problem(v, 1) for v in value) if p), None)
    return f"a {type(value).__name__}, not a number, name or short list"


def check_model_args(args: Any) -> dict[str, Any]:
    """``args`` when they are plain architecture arguments for ``timm.create_model``: a dict of
    identifiers, none a loader key (:data:`LOADER_KEYS`), each value a JSON scalar (short names
    without path characters, bounded integers, finite floats) or a short flat list of them.

    Raises :class:`~geohead.errors.UntrustedInputError` (a ValueError) naming the key and value.
    """
    from geohead.errors import UntrustedInputError

    if not isinstance(args, dict):
        raise UntrustedInputError(f"backbone model_args must be a JSON object of architecture arguments, got {str(args)[:80]!r}")
    for key, value in args.items():
        if not isinstance(key, str) or not key.isidentifier() or key in LOADER_KEYS:
            raise UntrustedInputError(f"backbone model_args key {str(key)[:80]!r} is refused: a file may not pass "
                                      f"weights, paths or loader options ({sorted(LOADER_KEYS)[:6]}...) to timm")
        problem = "" if key != "num_classes" or value == 0 else "num_classes other than 0"
        problem = problem or _arg_problem(value)
        if problem:
            raise UntrustedInputError(f"backbone model_args {key}={str(value)[:80]!r} is refused ({problem}); "
                                      "a backbone config holds only plain architecture arguments")
    return args


def checked_backbone_config(config: Any) -> dict[str, Any]:
    """``config`` (read from a checkpoint or an export's config.json) when it is safe to build:
    a registered timm architecture (no ``hf-hub:`` / ``local-dir:``), ``model_args`` with no
    loader key (:data:`LOADER_KEYS`: no weights, files or network) and only plain values.

    Raises :class:`~geohead.errors.UntrustedInputError` (a ValueError) naming the key and value.
    """
    import timm

    from geohead.errors import UntrustedInputError

    if not isinstance(config, dict):
        raise UntrustedInputError(f"backbone config must be a JSON object, got {type(config).__name__}")
    missing = [k for k in ("architecture", "model_args", "img_size", "cifar_stem") if k not in config]
    if missing:
        raise UntrustedInputError(f"backbone config lacks {missing}; it must come from create_backbone(...).geohead_config")
    arch, args = config["architecture"], config["model_args"]
    if not isinstance(arch, str) or ":" in arch or not timm.is_model(arch):
        raise UntrustedInputError(f"backbone architecture {str(arch)[:80]!r} is not a timm architecture name "
                                  "(timm.list_models()); a file cannot name a hub or a folder to load from")
    check_model_args(args)
    size = config["img_size"]
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= 1 << 14:
        raise UntrustedInputError(f"backbone img_size {str(size)[:80]!r} must be an integer from 1 to {1 << 14}")
    if not isinstance(config["cifar_stem"], bool) or not isinstance(config.get("channels_last", False), (bool, type(None))):
        raise UntrustedInputError("backbone cifar_stem and channels_last must be true or false")
    return config


def rebuild_backbone(config: dict[str, Any]) -> nn.Module:
    """A fresh (randomly initialised) backbone from a ``geohead_config`` dict (e.g. read from JSON),
    checked by :func:`checked_backbone_config` first: building never loads weights, reads files or
    reaches the network."""
    import timm

    config = checked_backbone_config(config)
    args = {k: v for k, v in config["model_args"].items() if k != "num_classes"}
    model = timm.create_model(config["architecture"], num_classes=0, pretrained=False, **args)
    stem = apply_cifar_stem(model) if config["cifar_stem"] else None
    if config.get("channels_last"):
        model = model.to(memory_format=torch.channels_last)
    model.geohead_config = {**config, "stem": stem}
    return model
