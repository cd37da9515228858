"""Checkpoint layouts: where the backbone, the projection head and (DINO) the teacher's head sit in
a checkpoint written by Lightning, lightly, solo-learn, the official DINO / VICReg / Barlow Twins
code, or a plain ``torch.save(model.state_dict())``.

Recognised containers (outermost first): DINO's ``{"student", "teacher", "args", ...}``;
Lightning's ``{"state_dict", "pytorch-lightning_version", "hyper_parameters", ...}`` (solo-learn's
are Lightning checkpoints); the official VICReg / Barlow Twins ``{"model", "optimizer",
"epoch"}``; ``{"model_state_dict"}``; else the object itself is the state dict. DDP's
``module.`` and ``torch.compile``'s ``_orig_mod.`` prefixes are removed from every key.

Inside the state dict the backbone is the prefix under which ``conv1.weight`` (ResNets) or
``patch_embed.proj.weight`` (ViTs) sits (``backbone.``, ``encoder.``, or none for a backbone
file); the head is the first of :data:`HEAD_PREFIXES` present, in one of three styles:
``sequential`` (``layers.N.*`` of lightly, ``N.*`` of solo-learn / VICReg / Barlow Twins'
``projector``, DINO's ``mlp.N.*`` + ``last_layer.*``) or ``geohead`` (``mlp.fcN.*``).
"""
from __future__ import annotations

import dataclasses
from typing import Any

from torch import Tensor

from geohead.pretrained.read import PretrainedError

#: Where a head may sit, in the order tried.
HEAD_PREFIXES = ("projection_head.", "projector.", "head.", "projection.", "model.head.", "model.projector.",
                 "student_head.", "student_projection_head.")
#: Names of the EMA teacher / momentum branch: never taken as the (student) backbone.
_TEACHER_WORDS = ("teacher", "momentum", "target", "ema")
#: Where a predictor (BYOL, SimSiam) may sit.
PREDICTOR_PREFIXES = ("prediction_head.", "predictor.", "model.predictor.")
#: Keys that mark a backbone, relative to its prefix.
BACKBONE_ANCHORS = ("conv1.weight", "patch_embed.proj.weight")
#: Objectives geohead has, by the names the methods go by.
METHOD_NAMES = {"barlow": "barlow", "barlowtwins": "barlow", "barlow_twins": "barlow", "vicreg": "vicreg", "dino": "dino",
                "simclr": "simclr", "byol": "byol", "simsiam": "simsiam"}
#: The hidden activation of each method's recipe (DINO: GELU; the others: ReLU).
RECIPE_ACTIVATION = {"dino": "gelu", "barlow": "relu", "vicreg": "relu", "simclr": "relu", "byol": "relu", "simsiam": "relu"}


@dataclasses.dataclass
class Layout:
    """One checkpoint, split.

    Attributes:
        name: ``dino``, ``vicreg``, ``barlowtwins``, ``solo-learn``, ``lightning``, ``lightly``,
            ``torch`` (a state dict), ``timm`` (a backbone alone).
        backbone: the backbone's tensors (prefix removed); backbone_prefix: that prefix.
        head, head_prefix, head_style: the head's tensors (``mlp.``/``layers.`` removed for the
            sequential style), where they were, ``"sequential"``, ``"geohead"`` or None.
        last_layer: DINO's weight-normed prototype layer's tensors, or None.
        predictor, predictor_style: BYOL's / SimSiam's predictor (as ``head``), or None.
        teacher_head, teacher_last_layer, teacher_backbone: the same for DINO's teacher.
        method: the objective name inferred from the layout or the checkpoint's arguments, or None.
        meta: arguments the checkpoint records (DINO's ``args``, Lightning's ``hyper_parameters``).
        notes: what was assumed or left out.
    """

    name: str
    backbone: dict[str, Tensor]
    backbone_prefix: str
    head: dict[str, Tensor] | None = None
    head_prefix: str | None = None
    head_style: str | None = None
    last_layer: dict[str, Tensor] | None = None
    predictor: dict[str, Tensor] | None = None
    predictor_style: str | None = None
    teacher_head: dict[str, Tensor] | None = None
    teacher_last_layer: dict[str, Tensor] | None = None
    teacher_backbone: dict[str, Tensor] | None = None
    method: str | None = None
    meta: dict[str, Any] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)


def _tensors(d: Any) -> bool:
    return isinstance(d, dict) and bool(d) and all(isinstance(k, str) and isinstance(v, Tensor) for k, v in d.items())


def strip_wrappers(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """Keys without DDP's ``module.`` and torch.compile's ``_orig_mod.`` (wherever they occur)."""
    out = {}
    for k, v in state.items():
        parts = [p for p in k.split(".") if p not in ("module", "_orig_mod")]
        out[".".join(parts)] = v
    return out


def _under(state: dict[str, Tensor], prefix: str) -> dict[str, Tensor]:
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def _backbone_prefix(state: dict[str, Tensor]) -> str | None:
    found = sorted({k[: -len(a)] for k in state for a in BACKBONE_ANCHORS if k.endswith(a) and
                    (k == a or k[: -len(a)].endswith("."))}, key=len)
    # "layer1.0.conv1.weight" ends with conv1.weight too: a prefix must not sit inside a ResNet stage
    found = [p for p in found if not any(seg.startswith("layer") for seg in p.split(".")) and "blocks." not in p]
    found.sort(key=lambda p: (any(w in p for w in _TEACHER_WORDS), len(p), p))  # the student's, deterministically
    return found[0] if found else None


def _split_head(state: dict[str, Tensor], prefix: str) -> tuple[dict[str, Tensor], str, dict[str, Tensor] | None]:
    """(mlp tensors, style, last layer tensors) of the head under ``prefix``."""
    sub = _under(state, prefix)
    last = _under(sub, "last_layer.") or None
    for inner in ("layers.", "mlp."):
        mlp = _under(sub, inner)
        if mlp and all(k.split(".", 1)[0].isdigit() for k in mlp):
            return mlp, "sequential", last
        if inner == "mlp." and mlp and all(k.split(".", 1)[0].startswith(("fc", "norm", "last_norm")) for k in mlp):
            return {k: v for k, v in sub.items() if k.startswith("mlp.")}, "geohead", _under(sub, "prototypes.") or None
        if inner == "mlp." and set(mlp) <= {"weight", "bias"} and mlp:  # DINO with nlayers=1: mlp is one Linear
            return {f"0.{k}": v for k, v in mlp.items()}, "sequential", last
    if sub and all(k.split(".", 1)[0].isdigit() for k in sub):
        return sub, "sequential", None
    raise PretrainedError(f"the head under {prefix!r} has keys {sorted(sub)[:6]}...: not a sequential MLP layout geohead reads")


def unwrap(obj: Any, kind: str) -> tuple[dict[str, Tensor], dict[str, Tensor] | None, str, dict[str, Any]]:
    """(state dict, DINO teacher state or None, container name, recorded arguments)."""
    if not isinstance(obj, dict):
        raise PretrainedError(f"the file holds a {type(obj).__name__}, not a dict of tensors or a checkpoint dict")
    meta: dict[str, Any] = {}
    if "student" in obj or "teacher" in obj:
        meta = dict(obj.get("args")) if isinstance(obj.get("args"), dict) else {}
        loss = obj.get("dino_loss")
        if isinstance(loss, dict) and isinstance(loss.get("center"), Tensor):
            meta["dino_center"] = loss["center"]  # DINOLoss's running centre of the teacher's logits
        if isinstance(obj.get("epoch"), int):
            meta["epoch"] = obj["epoch"]
        student, teacher = obj.get("student"), obj.get("teacher")
        main = student if _tensors(student) else teacher
        if not _tensors(main):
            raise PretrainedError("a DINO-style checkpoint whose 'student'/'teacher' hold no tensors (by name)")
        return strip_wrappers(main), strip_wrappers(teacher) if _tensors(teacher) and main is student else None, "dino", meta
    if "state_dict" in obj and _tensors(obj["state_dict"]):
        hp = obj.get("hyper_parameters")
        meta = dict(hp) if isinstance(hp, dict) else {}
        name = "lightning" if kind == "lightning" or "pytorch-lightning_version" in obj else "torch"
        return strip_wrappers(obj["state_dict"]), None, name, meta
    for key in ("model", "model_state_dict", "module"):
        if key in obj and _tensors(obj[key]):
            return strip_wrappers(obj[key]), None, "torch", {k: v for k, v in obj.items() if isinstance(v, (int, float, str))}
    state = {k: v for k, v in obj.items() if k != "__metadata__"}
    if not _tensors(state):
        raise PretrainedError(f"no state dict found (top-level keys {sorted(map(str, obj))[:8]}); expected a state dict or a "
                              "checkpoint with 'state_dict', 'model', 'student'/'teacher'")
    return strip_wrappers(state), None, "torch", {}


#: torchvision ResNet children by index, as ``nn.Sequential(*list(resnet.children())[:-1])`` (lightly's docs) numbers them.
_TORCHVISION_CHILDREN = {"0": "conv1", "1": "bn1", "4": "layer1", "5": "layer2", "6": "layer3", "7": "layer4"}


def _unnumber_resnet(state: dict[str, Tensor]) -> tuple[dict[str, Tensor], str | None]:
    """Keys of a torchvision ResNet wrapped as ``nn.Sequential(*children[:-1])`` (``P0.weight``,
    ``P4.0.conv1.weight``, ...) renamed to ResNet's own (``Pconv1.weight``, ``Player1.0.conv1.weight``);
    returns the state and the prefix P it renamed under (None: nothing to rename)."""
    for k, v in state.items():
        if k.endswith("0.weight") and v.dim() == 4 and (k[: -len("0.weight")] + "4.0.conv1.weight") in state:
            p = k[: -len("0.weight")]
            out = {}
            for key, t in state.items():
                head, _, rest = key[len(p):].partition(".") if key.startswith(p) else ("", "", "")
                out[p + _TORCHVISION_CHILDREN[head] + "." + rest if head in _TORCHVISION_CHILDREN else key] = t
            return out, p
    return state, None


def split(obj: Any, kind: str, require_head: bool = True) -> Layout:
    """The :class:`Layout` of a loaded checkpoint (see the module docstring); with
    ``require_head=False`` a head geohead cannot read is left out (a note says so) instead of an error."""
    state, teacher, container, meta = unwrap(obj, kind)
    state, numbered = _unnumber_resnet(state)
    prefix = _backbone_prefix(state)
    if prefix is None:
        raise PretrainedError(
            f"no backbone found: no key ends with {' or '.join(BACKBONE_ANCHORS)} (keys: {sorted(state)[:6]}...). geohead "
            "infers timm/torchvision ResNets and ViTs; for another backbone use geohead.diagnose_model(backbone, head, ...)"
        )
    head_prefix, notes = None, []
    for p in HEAD_PREFIXES:
        if any(k.startswith(p) for k in state):
            try:
                found = _split_head(state, p)
            except PretrainedError as exc:
                if prefix == "" and p == "head.":  # a timm classifier ('head.weight') of a backbone file
                    continue
                if require_head:
                    raise
                notes.append(f"head left out: {exc}")
                continue
            head_prefix = p
            break
    backbone = _under(state, prefix)
    if head_prefix is not None and prefix == "":
        backbone = {k: v for k, v in backbone.items() if not k.startswith(head_prefix)}
    layout = Layout(container, backbone, prefix, meta=meta, notes=notes)
    if head_prefix is not None:
        layout.head, layout.head_style, layout.last_layer = found
        layout.head_prefix = head_prefix
        if teacher is not None and any(k.startswith(head_prefix) for k in teacher):
            layout.teacher_head, _, layout.teacher_last_layer = _split_head(teacher, head_prefix)
        twin = head_prefix.replace("student_", "teacher_")  # lightly's DINO: student_head / teacher_head side by side
        if twin != head_prefix and any(k.startswith(twin) for k in state):
            layout.teacher_head, _, layout.teacher_last_layer = _split_head(state, twin)
            twin_bb = prefix.replace("student_", "teacher_")
            layout.teacher_backbone = _under(state, twin_bb) if twin_bb != prefix else None
    if teacher is not None and any(k.startswith(prefix) for k in teacher):
        layout.teacher_backbone = _under(teacher, prefix)
    pred_prefix = next((p for p in PREDICTOR_PREFIXES if any(k.startswith(p) for k in state)), None)
    if pred_prefix is not None:
        layout.predictor, layout.predictor_style, _ = _split_head(state, pred_prefix)
    used = tuple(p for p in (head_prefix, pred_prefix, head_prefix and head_prefix.replace("student_", "teacher_"),
                             prefix.replace("student_", "teacher_") if "student_" in prefix else None) if p)
    rest = sorted(k for k in state if not k.startswith(prefix) and not (used and k.startswith(used)))
    if rest:
        layout.notes.append(f"left out {len(rest)} tensors outside backbone and head (e.g. {rest[0]!r})")
    if numbered is not None:
        layout.notes.append(f"backbone under {numbered!r} is torchvision's ResNet as nn.Sequential(*children[:-1]): "
                            "its numbered keys read as the ResNet's own")
    if "dino_center" in meta:
        layout.notes.append("DINO's centre read from dino_loss.center (used by the objective)")
    _name_and_method(layout, state, container)
    return layout


def _name_and_method(layout: Layout, state: dict[str, Tensor], container: str) -> None:
    """Which library wrote it (``Layout.name``) and, where the layout says, which method."""
    meta, seq = layout.meta, layout.head_style == "sequential"
    declared = str(meta.get("method") or meta.get("arch_method") or "").lower()
    if layout.head is None:
        layout.name = "timm" if container == "torch" else container
    elif container == "dino" or layout.last_layer is not None:
        layout.name, layout.method = ("dino" if container == "dino" else container), "dino"
    elif container == "lightning" and layout.head_prefix == "projector." and seq and "method" in meta:
        layout.name = "solo-learn"
    elif layout.head_prefix == "projection_head." and seq and any(k.startswith("projection_head.layers.") for k in state):
        layout.name = "lightly" if container == "torch" else f"lightly ({container})"
    elif container == "torch" and layout.head_prefix == "projector." and seq:
        biased = [k for k in layout.head if k.endswith(".bias") and (k.split(".")[0] + ".running_mean") not in layout.head]
        if "bn.running_mean" in state:
            layout.name, layout.method = "barlowtwins", "barlow"
            layout.notes.append("Barlow Twins' loss BatchNorm ('bn', affine=False) is part of the objective, not the head")
        elif biased:
            layout.name, layout.method = "vicreg", "vicreg"
    if declared in METHOD_NAMES:
        layout.method = METHOD_NAMES[declared]


__all__ = ["HEAD_PREFIXES", "Layout", "PREDICTOR_PREFIXES", "METHOD_NAMES", "RECIPE_ACTIVATION", "split", "strip_wrappers", "unwrap"]
