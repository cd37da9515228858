"""Exporting a timm backbone geohead did not build (lightly, solo-learn, Lightning, your own loop).

A geohead backbone carries ``geohead_config`` (how to rebuild it). A plain timm model does not,
so :func:`foreign_backbone` works it out:

* the architecture: the model's ``pretrained_cfg`` (or ``default_cfg``) ``architecture`` name,
  or ``architecture=`` given explicitly;
* timm's model arguments: inferred for Vision Transformers (img_size, patch_size, in_chans,
  embed_dim, depth, num_heads, mlp_ratio, qkv_bias, class_token, reg_tokens, global_pool,
  no_embed_class, dynamic_img_size) and ResNets (layers, channels, in_chans, the deep stem's
  width, and geohead's CIFAR stem), or ``model_args=`` given explicitly (the keyword arguments
  the model was created with; they override what is inferred);
* the check, before anything is written: timm rebuilds the architecture from these arguments,
  the model's tensors are loaded into it, and both must give the same features bit for bit on
  a fixed input. Otherwise :class:`~geohead.export.format.ExportError` says what differs and
  which argument to pass.

A model with a classifier (``num_classes > 0``) is exported without it: its features are
``forward_head(forward_features(x), pre_logits=True)``, what timm returns with ``num_classes=0``.

:func:`load_timm_weights` builds such a model from a weights file (safetensors, a torch state
dict, a Lightning/lightly checkpoint; a prefix such as ``backbone.`` is found by itself), for
``geohead export FILE --architecture NAME``.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from geohead.export.format import ExportError, shape_mismatch


def _int_or_list(v: Any) -> Any:
    if isinstance(v, (tuple, list)):
        v = [int(x) for x in v]
        return v[0] if len(set(v)) == 1 else v
    return int(v)


def _architecture(model: nn.Module, given: str | None) -> str:
    import timm

    if given:
        name = given
    else:
        cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
        name = cfg.get("architecture") if isinstance(cfg, Mapping) else None
        if not name:
            raise ExportError(
                f"{type(model).__name__} names no timm architecture (no pretrained_cfg['architecture']); pass "
                "architecture='<the timm model name it was created with>' (geohead export --architecture NAME)"
            )
    if not timm.is_model(name):
        raise ExportError(f"{name!r} is not a timm architecture (timm.is_model is False); pass architecture='...'")
    return name


def _vit_args(model: nn.Module) -> dict[str, Any]:
    pe, block = model.patch_embed, model.blocks[0]
    args: dict[str, Any] = {
        "img_size": _int_or_list(pe.img_size),
        "patch_size": _int_or_list(pe.patch_size),
        "embed_dim": int(model.embed_dim),
        "depth": len(model.blocks),
        "num_heads": int(block.attn.num_heads),
    }
    proj = getattr(pe, "proj", None)
    if isinstance(proj, nn.Conv2d) and proj.in_channels != 3:
        args["in_chans"] = int(proj.in_channels)
    fc1 = getattr(getattr(block, "mlp", None), "fc1", None)
    if isinstance(fc1, nn.Linear):
        args["mlp_ratio"] = fc1.out_features / model.embed_dim
    qkv = getattr(block.attn, "qkv", None)
    if isinstance(qkv, nn.Linear):
        args["qkv_bias"] = qkv.bias is not None
    args["class_token"] = getattr(model, "cls_token", None) is not None
    for arg, attr in (("reg_tokens", "num_reg_tokens"), ("global_pool", "global_pool"),
                      ("no_embed_class", "no_embed_class"), ("dynamic_img_size", "dynamic_img_size")):
        value = getattr(model, attr, None)
        if isinstance(value, (bool, int, str)):
            args[arg] = value
    return args


def _resnet_args(model: nn.Module) -> tuple[dict[str, Any], bool]:
    """timm ResNet arguments, and whether the model has geohead's CIFAR stem (3x3/1 conv, no max-pool)."""
    stages = [getattr(model, f"layer{i}") for i in range(1, 5)]
    args: dict[str, Any] = {"layers": [len(s) for s in stages]}
    channels = []
    for s in stages:
        blk = s[0]
        last = getattr(blk, "conv3", None) or getattr(blk, "conv2")
        channels.append(int(last.out_channels) // int(getattr(blk, "expansion", 1)))
    args["channels"] = channels
    conv1 = model.conv1
    first = conv1[0] if isinstance(conv1, nn.Sequential) else conv1
    if isinstance(conv1, nn.Sequential):
        args["stem_width"] = int(first.out_channels)
    if first.in_channels != 3:
        args["in_chans"] = int(first.in_channels)
    cifar = (isinstance(conv1, nn.Conv2d) and tuple(conv1.kernel_size) == (3, 3) and tuple(conv1.stride) == (1, 1)
             and isinstance(model.maxpool, nn.Identity))
    return args, cifar


def _channels_last(model: nn.Module) -> bool:
    for p in model.parameters():
        if p.dim() == 4:
            return p.is_contiguous(memory_format=torch.channels_last) and not p.is_contiguous()
    return False


def _features(model: nn.Module, x: Tensor) -> Tensor:
    if int(getattr(model, "num_classes", 0) or 0) > 0 and hasattr(model, "forward_head"):
        return model.forward_head(model.forward_features(x), pre_logits=True)
    return model(x)


def foreign_backbone(
    model: nn.Module,
    *,
    architecture: str | None = None,
    model_args: Mapping[str, Any] | None = None,
    img_size: int | None = None,
) -> tuple[dict[str, Any], dict[str, Tensor]]:
    """The rebuild config (as ``create_backbone(...).geohead_config``) and the backbone tensors of
    a timm model geohead did not build, checked bit for bit against timm's rebuild (module docstring).

    Args:
        model: a timm model (e.g. ``timm.create_model("vit_small_patch16_224", img_size=32,
            patch_size=4)`` trained by another library); a classifier is left out.
        architecture: the timm name it was created with (default: ``pretrained_cfg``'s), or a
            geohead name (``resnet18_w16``, ``vit_tiny_cifar``, ...: its timm name and arguments).
        model_args: keyword arguments it was created with (override the inferred ones).
        img_size: the input side it was trained at (default: a ViT's own, else the
            architecture's ``pretrained_cfg`` input size); recorded in ``pretrained_cfg`` and
            used for the check.

    Raises:
        ExportError: no architecture, arguments that cannot be inferred (it names what to pass),
            tensors or features that differ from timm's rebuild.
    """
    config, what, hint = _rebuild_config(model, architecture, model_args, img_size)
    tensors, expected = _backbone_tensors(model, config, what, hint)
    config["num_features"] = _checked_features(model, config, tensors, expected, what, hint)
    return config, tensors


def _rebuild_config(model: nn.Module, architecture: str | None, model_args: Mapping[str, Any] | None,
                    img_size: int | None) -> tuple[dict[str, Any], str, str]:
    """The rebuild config of ``model`` (``stem`` and ``num_features`` still None) from the given
    or inferred architecture, timm arguments and input side; with ``what`` (the model, for
    messages) and ``hint`` (which argument to pass when the check fails)."""
    import timm
    from timm.models.resnet import ResNet
    from timm.models.vision_transformer import VisionTransformer

    from geohead.backbones import ALIASES, check_model_args

    try:  # no loader key (pretrained, checkpoint_path, ...) and only plain values are recorded for timm
        check_model_args(dict(model_args or {}))
    except ValueError as exc:
        raise ExportError(f"model_args: {exc}") from None
    if architecture in ALIASES:  # a geohead name: its timm architecture and arguments
        alias = ALIASES[architecture]
        architecture, model_args = alias.architecture, {**alias.model_args, **dict(model_args or {})}
    arch = _architecture(model, architecture)
    cifar_stem = False
    if type(model) is VisionTransformer:
        inferred, family = _vit_args(model), "ViT"
    elif type(model) is ResNet:
        (inferred, cifar_stem), family = _resnet_args(model), "ResNet"
    else:
        inferred, family = {}, None
    args = {**inferred, **dict(model_args or {})}
    args.pop("num_classes", None)
    args.pop("pretrained", None)
    if img_size is None:
        if isinstance(args.get("img_size"), int):
            img_size = args["img_size"]
        else:
            size = (getattr(model, "pretrained_cfg", None) or {}).get("input_size") or (3, 224, 224)
            img_size = int(size[-1])
    what = f"{type(model).__name__} (timm {arch!r}, model_args={args})"
    hint = ("pass model_args={...} with the keyword arguments it was created with (geohead export --model-arg KEY=VALUE)"
            if family is None else
            f"geohead inferred the {family} arguments above; pass model_args={{...}} with the ones it was created with "
            "(geohead export --model-arg KEY=VALUE)")
    config: dict[str, Any] = {
        "name": arch, "architecture": arch, "model_args": args, "img_size": int(img_size), "cifar_stem": cifar_stem,
        "stem": None, "channels_last": _channels_last(model), "num_features": None,
        "timm_loadable": not cifar_stem, "timm_version": timm.__version__, "built_by": "timm (not geohead)",
    }
    return config, what, hint


def _backbone_tensors(model: nn.Module, config: dict[str, Any], what: str,
                      hint: str) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
    """The model's tensors without its classifier, checked against the shapes of timm's rebuild
    from ``config`` (built on the meta device; sets ``config["stem"]``), and the rebuild's
    (meta) state dict."""
    from geohead.backbones import rebuild_backbone

    try:
        with torch.device("meta"):
            shell = rebuild_backbone(config)
    except Exception as exc:  # noqa: BLE001 - any failure of timm's constructor is the arguments' fault
        raise ExportError(f"timm cannot build {what}: {type(exc).__name__}: {exc}; {hint}") from None
    config["stem"] = shell.geohead_config.get("stem")
    expected = shell.state_dict()
    state = {k: v.detach() for k, v in model.state_dict().items()}
    classifier = str((getattr(model, "pretrained_cfg", None) or {}).get("classifier") or "")
    dropped = [k for k in state if k not in expected and classifier and k.startswith(classifier + ".")]
    tensors = {k: v for k, v in state.items() if k not in dropped}
    problem = shape_mismatch(expected, tensors)
    if problem is not None:
        raise ExportError(f"{what}: timm's rebuild has other tensors ({problem}); {hint}")
    return tensors, expected


def _checked_features(model: nn.Module, config: dict[str, Any], tensors: dict[str, Tensor],
                      expected: dict[str, Tensor], what: str, hint: str) -> int:
    """The feature width, after timm's rebuild from ``config`` with ``tensors`` (in ``expected``'s
    dtypes) gave the model's features bit for bit on a fixed input (2, in_chans, img_size,
    img_size), both in eval mode on the CPU in float32 (the model is left as it was)."""
    from geohead.backbones import rebuild_backbone

    img_size = config["img_size"]
    ref = rebuild_backbone(config).eval()
    ref.load_state_dict({k: v.to("cpu", expected[k].dtype) for k, v in tensors.items()}, strict=True)
    src = model
    p = next(model.parameters(), None)
    if p is not None and (p.device.type != "cpu" or p.dtype != torch.float32):
        src = copy.deepcopy(model).to("cpu", torch.float32)
    in_chans = int(config["model_args"].get("in_chans", 3))
    x = torch.randn(2, in_chans, img_size, img_size, generator=torch.Generator().manual_seed(0))
    if config["channels_last"]:
        x = x.contiguous(memory_format=torch.channels_last)
    was_training = src.training
    src.eval()
    try:
        with torch.no_grad():
            got, want = _features(src, x), ref(x)
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"{what}: features at img_size={img_size} failed: {type(exc).__name__}: {exc}; "
                          "pass img_size=<the size it was trained at>") from None
    finally:
        src.train(was_training)
    if got.shape != want.shape or not torch.equal(got, want):
        diff = float((got - want).abs().max()) if got.shape == want.shape else f"shape {tuple(got.shape)} vs {tuple(want.shape)}"
        raise ExportError(f"{what}: timm's rebuild gives other features than the model (max |difference| {diff}); {hint}")
    return int(want.shape[1])


# ---------------------------------------------------------------------- weights files
def _state_dict_of(path: Path) -> dict[str, Tensor]:
    from geohead.io import SafetensorsReadError, read_safetensors

    try:  # any suffix: a geohead checkpoint (.ckpt) is a safetensors file too
        meta = read_safetensors(path, "weights file", tensors=False)[1]
    except SafetensorsReadError:
        if path.suffix == ".safetensors":
            raise
        meta = None
    if meta is not None and str(meta.get("format", "")).startswith("geohead.training.checkpoint"):
        raise ExportError(f"{str(path)!r} is a geohead checkpoint, which records its own architecture; drop "
                          f"--architecture/--model-arg/--prefix: geohead export {path} --out DIR")
    if meta is not None:
        return read_safetensors(path, "weights file")[0]
    from geohead.pretrained.read import PretrainedError, load_file
    from geohead.pretrained.layouts import strip_wrappers

    try:
        obj, _ = load_file(path)  # weights_only=True, DINO's Namespace allowed, unsafe pickles refused
    except PretrainedError as exc:
        raise ExportError(str(exc)) from None
    if isinstance(obj, dict):
        obj.pop("__metadata__", None)  # a safetensors file's header
    if isinstance(obj, dict) and isinstance(obj.get("student"), dict):  # DINO's checkpoint.pth
        obj = obj.get("teacher") or obj["student"]
    for key in ("state_dict", "model", "model_state_dict"):
        if isinstance(obj, dict) and isinstance(obj.get(key), dict):
            obj = obj[key]
            break
    if not isinstance(obj, dict) or not all(isinstance(v, Tensor) for v in obj.values()):
        raise ExportError(f"{str(path)!r} holds no state dict (name -> tensor)")
    return strip_wrappers(obj)


def load_timm_weights(
    path: str | Path, architecture: str, model_args: Mapping[str, Any] | None = None, prefix: str | None = None,
    img_size: int | None = None,
) -> nn.Module:
    """``timm.create_model(architecture, num_classes=0, **model_args)`` (or, for a geohead name
    such as ``resnet18_w16``, :func:`geohead.backbones.create_backbone` at ``img_size``) with the
    backbone tensors of a weights file loaded (strict). The keys may sit under a prefix (``backbone.`` in a
    Lightning/lightly checkpoint, ``module.`` after DDP): ``prefix`` names it, else it is found
    as the one prefix under which every tensor of the architecture is present."""
    import timm

    from geohead.backbones import ALIASES, create_backbone

    path = Path(path)
    if not path.is_file():
        raise ExportError(f"weights file {str(path)!r} does not exist")
    geohead_name = architecture in ALIASES or architecture.endswith("_cifar")
    if not geohead_name and not timm.is_model(architecture):
        raise ExportError(f"{architecture!r} is neither a geohead backbone name ({', '.join(ALIASES)}, <timm resnet>_cifar) "
                          "nor a timm architecture (timm.is_model is False)")
    from geohead.backbones import check_model_args

    try:
        check_model_args(dict(model_args or {}))
    except ValueError as exc:
        raise ExportError(f"--model-arg: {exc}") from None
    state = _state_dict_of(path)
    args = dict(model_args or {})
    try:
        if geohead_name:  # geohead's names: create_backbone records how to rebuild them (geohead_config)
            model = create_backbone(architecture, img_size=int(args.pop("img_size", img_size or 32)), channels_last=False, **args)
        else:
            model = timm.create_model(architecture, pretrained=False, num_classes=0, **args)
    except Exception as exc:  # noqa: BLE001
        raise ExportError(f"cannot build {architecture!r} with model_args={dict(model_args or {})}: {exc}") from None
    expected = model.state_dict()
    if prefix is None:
        anchor = next(iter(expected))
        candidates = sorted({k[: -len(anchor)] for k in state if k.endswith(anchor)}, key=len)
        prefix = next((c for c in candidates if all(c + k in state for k in expected)), candidates[0] if candidates else "")
    tensors = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix) and k[len(prefix):] in expected}
    problem = shape_mismatch(expected, tensors)
    if problem is not None:
        raise ExportError(
            f"{str(path)!r} (prefix {prefix!r}) does not hold the tensors of timm's {architecture!r} with "
            f"model_args={dict(model_args or {})}: {problem}; pass --model-arg KEY=VALUE for the arguments it was "
            "created with, or --prefix"
        )
    model.load_state_dict(tensors, strict=True)
    return model


__all__ = ["foreign_backbone", "load_timm_weights"]
