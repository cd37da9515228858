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

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import torch
from torch import Tensor, nn

from geohead._version import __version__
from geohead.checkpoint import Checkpoint, CheckpointError, load_checkpoint

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


@dataclasses.dataclass
class ExportResult:
    """What :func:`export_backbone` wrote.

    Attributes:
        out_dir: the export folder; weights / config: its two files; head_weights / head_spec:
            the head's files (None without ``with_head``).
        timm_loadable: True when ``timm.create_model("local-dir:DIR", pretrained=True,
            num_classes=0)`` rebuilds it (else use :func:`load_backbone`).
        checksum: ``"sha256:<hex>"`` of the backbone tensors (:func:`tensor_checksum`).
        num_tensors, num_params: tensors in the file and their total number of elements.
        dtype: storage dtype name ("fp32", "bf16", "fp16"); branch: "student" or "teacher".
    """

    out_dir: Path
    weights: Path
    config: Path
    head_weights: Path | None
    head_spec: Path | None
    timm_loadable: bool
    checksum: str
    num_tensors: int
    num_params: int
    dtype: str
    branch: str


# ---------------------------------------------------------------------- checksum
def tensor_checksum(tensors: Mapping[str, Tensor]) -> str:
    """``"sha256:<hex>"`` over the tensors in sorted name order.

    For each tensor: its name (UTF-8), its dtype (e.g. ``torch.bfloat16``), its shape, each
    followed by a NUL byte, then its raw bytes in C order (little-endian, as safetensors stores
    them). Equal checksums mean equal names, dtypes, shapes and bits.
    """
    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(name.encode() + b"\0" + str(t.dtype).encode() + b"\0" + str(tuple(t.shape)).encode() + b"\0")
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    return "sha256:" + h.hexdigest()


# ---------------------------------------------------------------------- sources
@dataclasses.dataclass
class _Source:
    """A backbone to export: its rebuild config, tensors, optional head, provenance."""

    config: dict[str, Any]
    tensors: dict[str, Tensor]
    head: dict[str, Tensor] | None
    head_spec: dict[str, Any] | None
    provenance: dict[str, Any]


def _shape_mismatch(expected: Mapping[str, Tensor], got: Mapping[str, Tensor]) -> str | None:
    """None when ``got`` has exactly ``expected``'s names and shapes, else a description."""
    missing = sorted(set(expected) - set(got))
    unexpected = sorted(set(got) - set(expected))
    shapes = [
        f"{k}: {tuple(got[k].shape)} vs {tuple(expected[k].shape)}"
        for k in sorted(set(expected) & set(got)) if tuple(got[k].shape) != tuple(expected[k].shape)
    ]
    if not (missing or unexpected or shapes):
        return None
    parts = []
    for label, items in (("missing", missing), ("unexpected", unexpected), ("shape mismatch (file vs model)", shapes)):
        if items:
            more = f" and {len(items) - 4} more" if len(items) > 4 else ""
            parts.append(f"{label}: {items[:4]}{more}")
    return "; ".join(parts)


def _describe(config: Mapping[str, Any]) -> str:
    args = ", ".join(f"{k}={v}" for k, v in sorted(config.get("model_args", {}).items()))
    stem = ", CIFAR stem" if config.get("cifar_stem") else ""
    return f"{config.get('name', config.get('architecture'))!r} ({config.get('architecture')}({args}){stem})"


def _check_architecture(config: dict[str, Any], tensors: Mapping[str, Tensor], what: str, load: bool = False) -> nn.Module:
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
    problem = _shape_mismatch(expected, tensors)
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


def _from_checkpoint(ck: Checkpoint, teacher: bool, with_head: bool) -> _Source:
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
    return _Source(dict(config), tensors, head, head_spec, provenance)


def _from_module(model: nn.Module, with_head: bool, teacher: bool) -> _Source:
    if teacher:
        raise ExportError("teacher=True selects the EMA teacher of a checkpoint; to export a teacher module, pass it itself")
    model = getattr(model, "_orig_mod", model)  # torch.compile
    model = getattr(model, "module", model)  # DistributedDataParallel
    backbone = getattr(model, "backbone", model)
    head = getattr(model, "head", None) if backbone is not model else None
    config = getattr(backbone, "geohead_config", None)
    if not isinstance(config, dict):
        raise ExportError(
            f"{type(backbone).__name__} has no geohead_config, so its architecture cannot be recorded; create it with "
            "geohead.backbones.create_backbone(...) or export a training checkpoint / run folder"
        )
    tensors = dict(backbone.state_dict())
    head_tensors = head_spec = None
    if with_head:
        spec = getattr(head, "spec", None)
        if head is None or spec is None:
            raise ExportError("with_head=True needs a model with a GeometricHead .head (e.g. geohead's SSLModel)")
        head_tensors, head_spec = dict(head.state_dict()), spec.to_dict()
    spec = getattr(head, "spec", None) if head is not None else None
    provenance = {
        "geohead_version": __version__,
        "objective": None,
        "head_spec": spec.to_dict() if spec is not None else None,
        "data": None,
        "step": None,
        "branch": "student",
        "source": f"in-memory {type(model).__name__}",
    }
    return _Source(dict(config), tensors, head_tensors, head_spec, provenance)


# ---------------------------------------------------------------------- config.json
def _global_pool(model: nn.Module) -> str | None:
    gp = getattr(model, "global_pool", None)
    if isinstance(gp, str):
        return gp or None
    pool_type = getattr(gp, "pool_type", None)
    return pool_type if isinstance(pool_type, str) and pool_type else None


def timm_config(model: nn.Module, config: Mapping[str, Any], mean: list[float], std: list[float]) -> dict[str, Any]:
    """timm's hub ``config.json`` for a classifier-free backbone (read by ``local-dir:``).

    Layout (timm ``_hub._parse_model_cfg``): ``architecture``, ``num_classes`` (0),
    ``num_features``, ``global_pool``, ``model_args`` (passed to ``timm.create_model``) and
    ``pretrained_cfg`` (input_size, fixed_input_size, interpolation, crop_pct=1, crop_mode,
    mean, std, num_classes, first_conv, classifier). Fields that name timm's own pretrained
    weights (tag, license, URLs) are left out: these weights are not those.
    """
    pc = dict(getattr(model, "pretrained_cfg", None) or {})
    size = int(config["img_size"])
    model_args = {**config.get("model_args", {}), "num_classes": 0}
    fixed = bool(pc.get("fixed_input_size", False)) and not model_args.get("dynamic_img_size", False)
    out: dict[str, Any] = {
        "architecture": config["architecture"],
        "num_classes": 0,
        "num_features": int(config.get("num_features") or getattr(model, "num_features")),
    }
    gp = _global_pool(model)
    if gp:
        out["global_pool"] = gp
    out["model_args"] = model_args
    pretrained_cfg = {
        "input_size": [3, size, size],
        "fixed_input_size": fixed,
        "interpolation": "bilinear",  # how geohead's loaders resize
        "crop_pct": 1.0,
        "crop_mode": "center",
        "mean": [float(x) for x in mean],
        "std": [float(x) for x in std],
        "num_classes": 0,
    }
    for key in ("first_conv", "classifier"):
        if pc.get(key) is not None:
            pretrained_cfg[key] = pc[key]
    out["pretrained_cfg"] = pretrained_cfg
    return out


# ---------------------------------------------------------------------- writing
def _cast(tensors: Mapping[str, Tensor], dtype: torch.dtype) -> dict[str, Tensor]:
    # cloned: safetensors refuses tensors that share storage (tied weights, views)
    return {
        k: (v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu()).contiguous().clone()
        for k, v in tensors.items()
    }


def _metadata(prov: Mapping[str, Any], extra: Mapping[str, Any]) -> dict[str, str]:
    meta = {"format": "pt"}
    for k, v in {**prov, **extra}.items():
        meta[f"geohead.{k}"] = json.dumps(v, sort_keys=True)
    return meta


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``geohead.*`` metadata of an exported safetensors file, parsed (``geohead.`` removed)."""
    _, meta = _read_safetensors(Path(path), "safetensors file", tensors=False)
    return _parse_metadata(meta, Path(path))


def _parse_metadata(meta: Mapping[str, str], path: Path) -> dict[str, Any]:
    out = {}
    for k, v in meta.items():
        if k.startswith("geohead."):
            try:
                out[k[len("geohead."):]] = json.loads(v)
            except json.JSONDecodeError:
                raise ExportError(f"{str(path)!r}: metadata {k!r} is not valid JSON (corrupted header)") from None
    return out


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # pragma: no cover - platforms without directory fds
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover
        pass
    finally:
        os.close(fd)


def _save(tensors: dict[str, Tensor], path: Path, metadata: dict[str, str]) -> None:
    from safetensors.torch import save_file

    save_file(tensors, str(path), metadata=metadata)
    with open(path, "rb") as f:
        os.fsync(f.fileno())
    os.chmod(path, 0o666 & ~_umask())  # the safetensors writer creates files 0600


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _place(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished folder ``tmp`` to ``out``; an existing ``out`` is replaced only with ``overwrite``."""
    if out.exists() or out.is_symlink():
        if not out.is_dir():
            raise ExportError(f"--out {str(out)!r} exists and is not a folder; choose another path")
        if any(out.iterdir()) and not overwrite:
            raise ExportError(f"--out {str(out)!r} already holds files; pass --overwrite (overwrite=True) or choose another folder")
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old, out)  # put the old export back
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    _fsync_dir(out.parent)


def export_backbone(
    source: nn.Module | Checkpoint | str | os.PathLike,
    out_dir: str | os.PathLike,
    *,
    dtype: str = "fp32",
    teacher: bool = False,
    with_head: bool = False,
    overwrite: bool = False,
    mean: list[float] | tuple[float, ...] | None = None,
    std: list[float] | tuple[float, ...] | None = None,
) -> ExportResult:
    """Write the backbone of ``source`` alone to ``out_dir`` (see the module docstring).

    Args:
        source: a run folder or ``.ckpt`` file of ``geohead train`` (or a loaded
            :class:`~geohead.checkpoint.Checkpoint`), geohead's ``SSLModel`` (its ``.backbone``
            is exported, ``.head`` with ``with_head``), or a backbone from
            :func:`geohead.backbones.create_backbone`.
        out_dir: the export folder (created with its parents; written in a temporary sibling
            folder and renamed, so a failure leaves nothing half-written).
        dtype: ``"fp32"`` (default), ``"bf16"`` or ``"fp16"``: storage dtype of floating tensors.
        teacher: export the EMA teacher's backbone (BYOL/DINO practice) instead of the student's.
        with_head: also write the head to ``head.safetensors`` + ``head.json`` (never into
            ``model.safetensors``).
        overwrite: replace an existing non-empty ``out_dir``.
        mean, std: the input normalisation for ``pretrained_cfg``; default: the training data's
            (from the checkpoint). A module export without them keeps timm's architecture default
            and records ``data: null``.

    Returns: :class:`ExportResult`.

    Raises:
        ExportError: bad dtype, no teacher, a checkpoint whose backbone tensors do not fit its
            recorded architecture, an occupied ``out_dir``.
        CheckpointError: a missing, truncated, corrupted or non-geohead checkpoint.
    """
    if dtype not in DTYPES:
        raise ExportError(f"unknown dtype {dtype!r}; choose one of {list(DTYPES)}")
    if isinstance(source, nn.Module):
        src = _from_module(source, with_head, teacher)
    else:
        ck = source if isinstance(source, Checkpoint) else load_checkpoint(source)
        src = _from_checkpoint(ck, teacher, with_head)
    model = _check_architecture(src.config, src.tensors, f"backbone of {src.provenance['source']!r}")

    data = src.provenance.get("data") or {}
    if mean is None:
        mean = data.get("mean") or list(getattr(model, "pretrained_cfg", {}).get("mean", (0.485, 0.456, 0.406)))
    if std is None:
        std = data.get("std") or list(getattr(model, "pretrained_cfg", {}).get("std", (0.229, 0.224, 0.225)))
    for name, v in (("mean", mean), ("std", std)):
        if len(v) != 3:
            raise ExportError(f"{name} must have 3 values (one per RGB channel), got {list(v)}")

    torch_dtype = DTYPES[dtype]
    tensors = _cast(src.tensors, torch_dtype)
    checksum = tensor_checksum(tensors)
    timm_loadable = bool(src.config.get("timm_loadable", not src.config.get("cifar_stem", False)))
    config = timm_config(model, src.config, list(mean), list(std))
    out = Path(out_dir)
    load_hint = (
        "timm.create_model('local-dir:<this folder>', pretrained=True, num_classes=0)" if timm_loadable
        else f"geohead.load_backbone('<this folder>')  (timm cannot build the {src.config.get('name')} stem from arguments)"
    )
    extra = {"format": EXPORT_FORMAT, "dtype": dtype, "backbone": src.config, "checksum": checksum}
    head_checksum = None
    head_tensors = _cast(src.head, torch_dtype) if src.head is not None else None
    if head_tensors is not None:
        head_checksum = tensor_checksum(head_tensors)
    config["geohead"] = {
        "format": EXPORT_FORMAT,
        "version": __version__,
        "timm_loadable": timm_loadable,
        "load": load_hint,
        "backbone": src.config,
        "dtype": dtype,
        "checksum": checksum,
        "files": {"weights": WEIGHTS_NAME, "head": HEAD_WEIGHTS_NAME if head_tensors is not None else None,
                  "head_spec": HEAD_SPEC_NAME if head_tensors is not None else None},
        "head_checksum": head_checksum,
        "provenance": src.provenance,
    }

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        _save(tensors, tmp / WEIGHTS_NAME, _metadata(src.provenance, extra))
        if head_tensors is not None:
            _save(head_tensors, tmp / HEAD_WEIGHTS_NAME, _metadata(
                {"head_spec": src.head_spec, "source": src.provenance["source"], "branch": src.provenance["branch"]},
                {"format": HEAD_FORMAT, "dtype": dtype, "checksum": head_checksum},
            ))
            (tmp / HEAD_SPEC_NAME).write_text(json.dumps(src.head_spec, indent=2, sort_keys=True) + "\n")
        (tmp / CONFIG_NAME).write_text(json.dumps(config, indent=2) + "\n")
        os.chmod(tmp, 0o777 & ~_umask())  # mkdtemp makes it 0700
        _place(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(
        out_dir=out,
        weights=out / WEIGHTS_NAME,
        config=out / CONFIG_NAME,
        head_weights=out / HEAD_WEIGHTS_NAME if head_tensors is not None else None,
        head_spec=out / HEAD_SPEC_NAME if head_tensors is not None else None,
        timm_loadable=timm_loadable,
        checksum=checksum,
        num_tensors=len(tensors),
        num_params=sum(t.numel() for t in tensors.values()),
        dtype=dtype,
        branch=src.provenance["branch"],
    )


# ---------------------------------------------------------------------- reading
def _read_safetensors(path: Path, what: str, tensors: bool = True) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Tensors (unless ``tensors=False``) and raw metadata of a safetensors file; never unpickles."""
    from safetensors import SafetensorError, safe_open
    from safetensors.torch import load_file

    if not path.is_file():
        raise ExportError(f"{what} {str(path)!r} does not exist")
    try:
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
        loaded = load_file(str(path)) if tensors else {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise ExportError(f"{what} {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {exc}") from None
    return loaded, meta


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of an export folder (with its ``geohead`` section)."""
    d = Path(path)
    if not d.exists():
        raise ExportError(f"export folder {str(d)!r} does not exist; give the folder written by geohead export")
    if not d.is_dir():
        raise ExportError(f"{str(d)!r} is not a folder; give the folder written by geohead export (it holds {CONFIG_NAME} and {WEIGHTS_NAME})")
    cfg_path = d / CONFIG_NAME
    if not cfg_path.is_file():
        raise ExportError(f"{str(d)!r} has no {CONFIG_NAME}; it is not a geohead export folder")
    try:
        config = json.loads(cfg_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ExportError(f"{str(cfg_path)!r} is not valid JSON (corrupted?): {exc}") from None
    g = config.get("geohead") if isinstance(config, dict) else None
    if not isinstance(g, dict) or g.get("format") != EXPORT_FORMAT or not isinstance(g.get("backbone"), dict):
        raise ExportError(
            f"{str(cfg_path)!r} has no geohead section (format {EXPORT_FORMAT!r}): not written by geohead export; "
            "a plain timm folder loads with timm.create_model('local-dir:...', pretrained=True)"
        )
    return config


def load_backbone(path: str | os.PathLike, *, verify: bool = True, device: str | torch.device = "cpu") -> nn.Module:
    """The backbone of an export folder, for any backbone (the CIFAR stem included).

    Reads ``config.json`` and ``model.safetensors`` (safetensors only, never a pickle), checks the
    tensors' checksum (``verify``), rebuilds the architecture with
    :func:`geohead.backbones.rebuild_backbone` and loads the weights (cast to the model's float32
    parameters when stored in bf16/fp16).

    Returns: the timm module in eval mode, ``model(x)`` (B, 3, S, S) -> (B, num_features), with
    ``.geohead_config`` (rebuild config) and ``.geohead_export`` (the config's geohead section).

    Raises:
        ExportError: a missing folder or file, a truncated or corrupted file (also a checksum
            mismatch), tensors of another architecture than the config's.
    """
    config = read_config(path)
    g = config["geohead"]
    d = Path(path)
    tensors, raw = _read_safetensors(d / WEIGHTS_NAME, "weights file")
    meta = _parse_metadata(raw, d / WEIGHTS_NAME)
    if meta.get("format") != EXPORT_FORMAT:
        raise ExportError(f"{str(d / WEIGHTS_NAME)!r} is a safetensors file but not a geohead backbone export")
    if verify:
        got = tensor_checksum(tensors)
        want = g.get("checksum")
        if got != want or meta.get("checksum") != want:
            raise ExportError(
                f"{str(d / WEIGHTS_NAME)!r} fails its checksum (config {want}, file metadata "
                f"{meta.get('checksum')}, tensors {got}): the file is corrupted or was replaced; export again"
            )
    model = _check_architecture(g["backbone"], tensors, f"{str(d / WEIGHTS_NAME)!r}", load=True)
    model.geohead_export = g
    return model.to(device).eval()


def load_head(path: str | os.PathLike, *, verify: bool = True) -> nn.Module:
    """The head exported with ``with_head=True``: a :class:`~geohead.heads.GeometricHead` in eval mode."""
    from geohead.heads import GeometricHead, HeadSpec

    config = read_config(path)
    g = config["geohead"]
    d = Path(path)
    if not g.get("files", {}).get("head"):
        raise ExportError(f"{str(d)!r} was exported without the head; export again with --with-head")
    tensors, meta = _read_safetensors(d / HEAD_WEIGHTS_NAME, "head file")
    if verify and (tensor_checksum(tensors) != g.get("head_checksum")):
        raise ExportError(f"{str(d / HEAD_WEIGHTS_NAME)!r} fails its checksum: corrupted or replaced; export again")
    try:
        head = GeometricHead.from_spec(HeadSpec.from_json(d / HEAD_SPEC_NAME))
    except (ValueError, FileNotFoundError) as exc:
        raise ExportError(f"{str(d / HEAD_SPEC_NAME)!r}: {exc}") from None
    problem = _shape_mismatch(head.state_dict(), tensors)
    if problem is not None:
        raise ExportError(f"{str(d / HEAD_WEIGHTS_NAME)!r} does not fit {HEAD_SPEC_NAME}: {problem}")
    head.load_state_dict(tensors, strict=True)
    return head.eval()


__all__ = [
    "CheckpointError", "DTYPES", "EXPORT_FORMAT", "ExportError", "ExportResult", "export_backbone", "load_backbone",
    "load_head", "read_config", "read_metadata", "tensor_checksum", "timm_config",
]
