""":func:`load_pretrained`: backbone, GeometricHead and objective of a checkpoint trained anywhere.

The head is rebuilt as a :class:`~geohead.heads.GeometricHead` from a HeadSpec inferred from the
weights (depth, widths, norms, bias, DINO's prototypes; the activation of the method's recipe,
:data:`~geohead.pretrained.layouts.RECIPE_ACTIVATION`, or the one given), and checked before it
is used: its outputs on a fixed input (eval mode) must match lightly's own module built from the
same blocks (when lightly is importable and the layout is lightly's), else the layout's
documented forward (:func:`geohead.heads.convert.reference_forward`). The check's result is
recorded in :attr:`Pretrained.head_check`.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from geohead.data.loaders import MAX_IMG_SIZE
from geohead.heads import GeometricHead
from geohead.heads.layers import activation_layer
from geohead.heads.convert import HeadConversionError, MLPLayout, compare_outputs, layout_from_state, reference_forward
from geohead.pretrained.backbone import build_backbone
from geohead.pretrained.layouts import METHOD_NAMES, RECIPE_ACTIVATION, Layout, split
from geohead.pretrained.read import PretrainedError, load_file
from geohead.io import shorten


@dataclasses.dataclass
class Pretrained:
    """A checkpoint's models, in eval mode on the CPU.

    Attributes:
        backbone: ``backbone(x)`` (B, C, S, S) -> (B, d); head: GeometricHead (B, d) -> (B, k) or None;
        teacher_head: DINO's teacher head or None; predictor: BYOL's / SimSiam's predictor as a
        GeometricHead, or None; method: objective name or None;
        layout: the :class:`Layout`; head_check: ``{"reference", "max_abs_diff", "exact", "allclose"}``;
        img_size: the input side used; source: the file.
    """

    backbone: nn.Module
    head: GeometricHead | None
    teacher_head: GeometricHead | None
    method: str | None
    layout: Layout
    head_check: dict[str, Any] | None
    img_size: int
    source: str
    predictor: GeometricHead | None = None

    def describe(self) -> dict[str, Any]:
        """The JSON-ready record of what was read (layout, prefixes, specs, the check, notes)."""
        cfg = getattr(self.backbone, "geohead_config", {})
        return {
            "source": self.source, "layout": self.layout.name, "method": self.method,
            "backbone": {"name": cfg.get("name"), "model_args": cfg.get("model_args"), "prefix": self.layout.backbone_prefix,
                         "num_features": cfg.get("num_features"), "img_size": self.img_size},
            "head_prefix": self.layout.head_prefix,
            "head_spec": self.head.spec.to_dict() if self.head is not None else None,
            "predictor_spec": self.predictor.spec.to_dict() if self.predictor is not None else None,
            "teacher_head": self.teacher_head is not None, "head_check": self.head_check, "notes": list(self.layout.notes),
        }


def _mlp(state: Mapping[str, Tensor], style: str, last: Mapping[str, Tensor] | None, activation: str) -> MLPLayout:
    if style == "geohead":
        seq: dict[str, Tensor] = {}
        for k, v in state.items():  # mlp.fcI -> 3I, mlp.normI -> 3I+1, mlp.last_norm -> after the last fc
            part, _, name = k[len("mlp."):].partition(".")
            if part.startswith("fc"):
                seq[f"{3 * int(part[2:])}.{name}"] = v
            elif part.startswith("norm"):
                seq[f"{3 * int(part[4:]) + 1}.{name}"] = v
        n = 1 + max(int(k.split(".")[0]) for k in seq) // 3
        for k, v in state.items():
            if k.startswith("mlp.last_norm."):
                seq[f"{3 * (n - 1) + 1}.{k.rsplit('.', 1)[1]}"] = v
        # fcI sit at 3I whatever the norm, so every gap after a hidden block is its activation
        layout = layout_from_state(seq, activation="__gap__", last_layer=last)
        for blk in layout.blocks[:-1]:
            blk.act = activation
        layout.blocks[-1].act = None
        return layout
    return layout_from_state(state, activation, last)


def _head_of(state: Mapping[str, Tensor], style: str, last: Mapping[str, Tensor] | None,
             activation: str) -> tuple[MLPLayout, GeometricHead]:
    """The layout of a head's tensors and the GeometricHead built from it. Raises
    :class:`HeadConversionError` for tensors that do not form such a head, whatever part of the
    reading or loading finds it (a missing bias, a 1-D prototype, a norm of another width)."""
    try:
        mlp = _mlp(state, style, last, activation)
        return mlp, GeometricHead.from_layout(mlp, activation)
    except HeadConversionError:
        raise
    except (RuntimeError, KeyError, IndexError, ValueError, TypeError) as exc:
        raise HeadConversionError(f"its tensors do not form one ({type(exc).__name__}: {shorten(str(exc))})") from None


def _lightly_reference(layout: MLPLayout, activation: str) -> nn.Module | None:
    """lightly's ProjectionHead with the same blocks and weights (None without lightly)."""
    try:
        from lightly.models.modules.heads import ProjectionHead
    except ImportError:
        return None
    blocks, state = [], {}
    i = 0
    for blk in layout.blocks:
        norm = {"batch": nn.BatchNorm1d(blk.weight.shape[0]), "batch_noaffine": nn.BatchNorm1d(blk.weight.shape[0], affine=False),
                "layer": nn.LayerNorm(blk.weight.shape[0]), None: None}[blk.norm]
        act = activation_layer(activation)() if blk.act is not None else None
        blocks.append((blk.weight.shape[1], blk.weight.shape[0], norm, act, blk.bias is not None))
        state[f"layers.{i}.weight"] = blk.weight
        if blk.bias is not None:
            state[f"layers.{i}.bias"] = blk.bias
        i += 1
        if norm is not None:
            state.update({f"layers.{i}.{k}": v for k, v in blk.norm_state.items()})
            i += 1
        i += act is not None
    ref = ProjectionHead(blocks)
    ref.load_state_dict(state, strict=True)
    return ref.eval()


def check_head(head: GeometricHead, layout: MLPLayout, activation: str, lightly_layout: bool) -> dict[str, Any]:
    """Outputs of ``head`` vs the reference on 16 fixed Gaussian inputs (eval mode)."""
    x = torch.randn(16, head.in_dim, generator=torch.Generator().manual_seed(0))
    ref = _lightly_reference(layout, activation) if lightly_layout and layout.prototype_v is None else None
    with torch.no_grad():
        got = head.eval()(x)
        want = ref(x) if ref is not None else reference_forward(layout, x, activation)
    return {"reference": "lightly.models.modules.heads.ProjectionHead" if ref is not None else "documented forward",
            **compare_outputs(got, want)}


def _activation(layout: Layout, given: str | None) -> tuple[str, str]:
    """The head's hidden activation and where it came from: given; the checkpoint's recorded
    ``head_spec`` (Lightning hyper-parameters); GeometricHead's default (SiLU) for geohead's key
    names; the method's recipe; else ReLU."""
    spec = layout.meta.get("head_spec")
    if given:
        return given, "given"
    if isinstance(spec, dict) and isinstance(spec.get("activation"), str):
        return spec["activation"], "the checkpoint's recorded head_spec"
    if layout.head_style == "geohead":
        return "silu", "GeometricHead's default (the weights do not record it)"
    if layout.method:
        return RECIPE_ACTIVATION.get(layout.method, "relu"), f"the {layout.method} recipe's (the weights do not record it)"
    return "relu", "assumed (the weights do not record it and no method was given)"


def recorded_normalisation(layout: Layout) -> tuple[list[float] | None, list[float] | None]:
    """``mean``/``std`` the checkpoint records (Lightning hyper-parameters), else (None, None)."""
    mean, std = layout.meta.get("mean"), layout.meta.get("std")
    ok = all(isinstance(v, (list, tuple)) and len(v) in (1, 3) and all(isinstance(x, (int, float)) for x in v) for v in (mean, std))
    return (list(mean), list(std)) if ok else (None, None)


def _refuse_non_finite(modules: dict[str, Any]) -> None:
    """A :class:`~geohead.errors.DivergedModelError` naming the first NaN/inf weight or buffer."""
    from geohead.errors import DivergedModelError

    for part, module in modules.items():
        for name, t in [*(module.named_parameters() if module is not None else []), *(module.named_buffers() if module is not None else [])]:
            if t.is_floating_point() and not bool(torch.isfinite(t).all()):
                raise DivergedModelError(f"the model has diverged: the {part}'s {name} holds NaN/inf; diagnose a checkpoint "
                                         "from before the divergence (lower the learning rate)")


def load_pretrained(source: str | os.PathLike, *, architecture: str | None = None, method: str | None = None,
                    activation: str | None = None, model_args: Mapping[str, Any] | None = None,
                    img_size: int | None = None, require_head: bool = True, teacher: bool = False) -> Pretrained:
    """Read ``source`` safely (:func:`~geohead.pretrained.read.load_file`), split it
    (:func:`~geohead.pretrained.layouts.split`), build the backbone and the checked head.

    Args:
        architecture, model_args, img_size: the backbone (default inferred from its tensors).
        method: the objective (``barlow``, ``vicreg``, ``dino``, ``simclr``, ``byol``, ``simsiam``;
            ``barlowtwins`` also accepted); default: what the layout says.
        activation: the head's hidden activation; default the method's recipe.
        require_head: False: a head geohead cannot read is left out (``head`` None, a note
            in ``layout.notes``) instead of an error (what ``geohead export`` needs).
        teacher: take backbone and head from DINO's teacher (its released weights are the
            teacher's); the student's head is then ``teacher_head``.

    Raises:
        PretrainedError: unreadable or unsafe file, unknown layout, a head a GeometricHead cannot
            express, a rebuilt head whose outputs differ from the reference.
    """
    obj, kind = load_file(source)
    layout = split(obj, kind, require_head)
    if teacher:
        if layout.teacher_backbone is None:
            raise PretrainedError(f"{str(source)!r} ({layout.name} layout) holds no teacher; only DINO's checkpoints do")
        layout.backbone, layout.teacher_backbone = layout.teacher_backbone, layout.backbone
        layout.head, layout.teacher_head = layout.teacher_head, layout.head
        layout.last_layer, layout.teacher_last_layer = layout.teacher_last_layer, layout.last_layer
        layout.notes.append("the teacher's backbone and head (DINO's released weights are the teacher's)")
    if method is not None:
        if method.lower() not in METHOD_NAMES:
            raise PretrainedError(f"unknown method {method!r}; choose one of {sorted(set(METHOD_NAMES.values()))}")
        layout.method = METHOD_NAMES[method.lower()]
    act, why = _activation(layout, activation)
    if activation is None and layout.head is not None:
        layout.notes.append(f"head activation {act!r}: {why}; pass --activation to change it")
    recorded_size = layout.meta.get("img_size")
    if img_size is None and isinstance(recorded_size, int) and not isinstance(recorded_size, bool):
        if not 1 <= recorded_size <= MAX_IMG_SIZE:  # the backbone's width is probed at this size
            raise PretrainedError(f"{str(source)!r} records img_size={shorten(str(recorded_size))}, outside 1 to "
                                  f"{MAX_IMG_SIZE:,}; pass --img-size with the size its backbone was trained at")
        img_size = recorded_size  # a Lightning module's hyper-parameters
    backbone = build_backbone(layout.backbone, architecture, model_args, img_size)
    head = teacher = check = predictor = None
    if layout.head is not None:
        try:
            mlp, head = _head_of(layout.head, layout.head_style or "sequential", layout.last_layer, act)
        except HeadConversionError as exc:
            if require_head:
                raise PretrainedError(f"the head under {layout.head_prefix!r} is not expressible as a GeometricHead: {exc}") from None
            layout.notes.append(f"head left out: {exc}")
            layout.head = None
    _refuse_non_finite({"backbone": backbone, "head": head})
    if head is not None:
        check = check_head(head, mlp, act, layout.name == "lightly" or layout.head_prefix == "projection_head.")
        if not check["allclose"]:
            raise PretrainedError(f"the rebuilt GeometricHead's outputs differ from the {check['reference']} "
                                  f"(max |difference| {check['max_abs_diff']}): this head is not expressible")
        try:
            if layout.teacher_head is not None:
                teacher = _head_of(layout.teacher_head, "sequential", layout.teacher_last_layer, act)[1]
            if layout.predictor is not None:
                mlp, predictor = _head_of(layout.predictor, layout.predictor_style or "sequential", None, act)
                check["predictor"] = check_head(predictor, mlp, act, False)
        except HeadConversionError as exc:
            raise PretrainedError(f"the teacher's head or the predictor is not expressible as a GeometricHead: {exc}") from None
    size = int(backbone.geohead_config["img_size"])
    return Pretrained(backbone, head, teacher, layout.method, layout, check, size, str(Path(source)), predictor)


__all__ = ["Pretrained", "check_head", "load_pretrained"]
