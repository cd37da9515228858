"""Writing an export folder: :func:`export_backbone` and timm's ``config.json`` (:func:`timm_config`)."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch
from torch import Tensor, nn

from geohead._version import __version__
from geohead.training.checkpoint import Checkpoint, load_checkpoint
from geohead.export.format import (
    CONFIG_NAME, DTYPES, EXPORT_FORMAT, HEAD_FORMAT, HEAD_SPEC_NAME, HEAD_WEIGHTS_NAME, INTEGRITY_KEY, WEIGHTS_NAME,
    ExportError, check_architecture, encode_metadata, integrity_checksum, nonfinite_problem, tensor_checksum,
)
from geohead.export.sources import source_of_checkpoint, source_of_module
from geohead.io import atomic_write_text, default_mode, disk_error, folder_problem, fsync_dir, save_safetensors, shorten


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
        recovered: what :func:`recover_interrupted` cleaned up of earlier, killed exports.
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
    recovered: list[str] = dataclasses.field(default_factory=list)


# ---------------------------------------------------------------------- config.json
def _global_pool(model: nn.Module) -> str | None:
    gp = getattr(model, "global_pool", None)
    if isinstance(gp, str):
        return gp or None
    pool_type = getattr(gp, "pool_type", None)
    return pool_type if isinstance(pool_type, str) and pool_type else None


def timm_config(model: nn.Module, config: Mapping[str, Any], mean: list[float], std: list[float],
                interpolation: str = "bilinear") -> dict[str, Any]:
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
        "interpolation": interpolation,  # default "bilinear": how geohead's loaders resize
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
    """Floating tensors in ``dtype``, all on the CPU (:func:`~geohead.io.save_safetensors` copies them)."""
    return {k: v.detach().to("cpu", dtype) if v.is_floating_point() else v.detach().cpu() for k, v in tensors.items()}


def _place(tmp: Path, out: Path, overwrite: bool) -> None:
    """Move the finished folder ``tmp`` to ``out``; an existing ``out`` is replaced only with ``overwrite``."""
    if out.exists() or out.is_symlink():
        problem = _occupied(out, overwrite)
        if problem:
            raise ExportError(problem)
        old = out.with_name(f".{out.name}.old-{os.getpid()}")  # recover_interrupted reads these names
        os.replace(out, old)
        try:
            os.replace(tmp, out)
        except OSError:
            os.replace(old, out)  # put the old export back
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    fsync_dir(out.parent)


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
    architecture: str | None = None,
    model_args: Mapping[str, Any] | None = None,
    img_size: int | None = None,
    interpolation: str = "bilinear",
    provenance: Mapping[str, Any] | None = None,
) -> ExportResult:
    """Write the backbone of ``source`` alone to ``out_dir`` (see the module docstring).

    Args:
        source: a run folder of ``geohead train`` or its checkpoint ``last.safetensors`` (or a loaded
            :class:`~geohead.training.checkpoint.Checkpoint`), geohead's ``SSLModel`` (its ``.backbone``
            is exported, ``.head`` with ``with_head``), or a backbone from
            :func:`geohead.backbones.create_backbone`, or any timm model (trained by lightly,
            Lightning, your own loop): its architecture and arguments are inferred and checked
            bit for bit against timm's rebuild before anything is written
            (:mod:`geohead.export.foreign`).
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
        architecture, model_args, img_size: for a timm model geohead did not build: the timm
            name and keyword arguments it was created with and its input size, where they cannot
            be inferred (the error says which).
        interpolation: the resize ``pretrained_cfg`` records (``bilinear``, ``bicubic``, ``nearest``).
        provenance: entries that replace the recorded provenance (e.g. ``objective``,
            ``head_spec``, ``source`` of a checkpoint trained elsewhere).

    A model trained elsewhere whose normalisation nobody gave (no ``mean``/``std``) gets the
    architecture's timm default (ImageNet's), with a ``UserWarning`` that says so; the same for the input size of a backbone whose ``geohead_config`` says
    ``img_size_source: "default"``.

    Returns: :class:`ExportResult`.

    Raises:
        ExportError: bad dtype, no teacher, a checkpoint whose backbone tensors do not fit its
            recorded architecture, an occupied ``out_dir``.
        CheckpointError: a missing, truncated, corrupted or non-geohead checkpoint.
    """
    if not isinstance(source, (str, os.PathLike, nn.Module, Checkpoint)):
        raise ExportError(f"source must be a run folder or checkpoint path (str or pathlib.Path), a Checkpoint or an "
                          f"nn.Module, got {type(source).__name__} {str(source)[:60]!r}")
    if not isinstance(out_dir, (str, os.PathLike)):
        raise ExportError(f"out_dir must be a folder path (str or pathlib.Path), got {type(out_dir).__name__} {str(out_dir)[:60]!r}")
    if dtype not in DTYPES:
        raise ExportError(f"unknown dtype {dtype!r}; choose one of {list(DTYPES)}")
    out = Path(out_dir).expanduser()  # as folder_problem reads it
    problem = folder_problem(out)
    if problem:
        raise ExportError(f"--out {str(out_dir)!r} cannot be written: {problem}; choose another folder")
    if out.exists() or out.is_symlink():  # refused before the source loads; _place checks again
        problem = _occupied(out, overwrite)
        if problem:
            raise ExportError(problem)
    if isinstance(source, nn.Module):
        src = source_of_module(source, with_head, teacher, architecture=architecture, model_args=model_args,
                               img_size=img_size)
    else:
        ck = source if isinstance(source, Checkpoint) else load_checkpoint(source)
        src = source_of_checkpoint(ck, teacher, with_head)
    if interpolation not in INTERPOLATIONS:
        raise ExportError(f"interpolation {interpolation!r} is not one of {list(INTERPOLATIONS)}")
    src.provenance.update(dict(provenance or {}))
    model = check_architecture(src.config, src.tensors, f"backbone of {src.provenance['source']!r}")
    _warn_defaults(src, mean, std)
    mean, std = _normalisation(src, model, mean, std)
    bad = nonfinite_problem({**src.tensors, **{f"head.{k}": v for k, v in (src.head or {}).items()}}, mean, std)
    if bad:
        raise ExportError(f"cannot export {src.provenance['source']!r}: {bad}; export a checkpoint from before the "
                          "run diverged, or give finite --mean/--std")

    tensors = _cast(src.tensors, DTYPES[dtype])
    head_tensors = _cast(src.head, DTYPES[dtype]) if src.head is not None else None
    checksum = tensor_checksum(tensors)
    head_checksum = tensor_checksum(head_tensors, src.head_spec) if head_tensors is not None else None
    timm_loadable = bool(src.config.get("timm_loadable", not src.config.get("cifar_stem", False)))
    config = timm_config(model, src.config, mean, std, interpolation)
    config["geohead"] = _geohead_record(src, dtype, timm_loadable, checksum, head_checksum)

    recovered = recover_interrupted(out)
    try:
        _write_folder(out, overwrite, src, config, tensors, head_tensors, dtype, checksum, head_checksum)
    except OSError as exc:  # a full or read-only disk: the old export (if any) is untouched
        raise disk_error(exc, out) from None
    has_head = head_tensors is not None
    return ExportResult(
        out_dir=out,
        weights=out / WEIGHTS_NAME,
        config=out / CONFIG_NAME,
        head_weights=out / HEAD_WEIGHTS_NAME if has_head else None,
        head_spec=out / HEAD_SPEC_NAME if has_head else None,
        timm_loadable=timm_loadable,
        checksum=checksum,
        num_tensors=len(tensors),
        num_params=sum(t.numel() for t in tensors.values()),
        dtype=dtype,
        branch=src.provenance["branch"],
        recovered=recovered,
    )


#: Resize modes ``pretrained_cfg["interpolation"]`` may record (timm's names).
INTERPOLATIONS = ("bilinear", "bicubic", "nearest")


def _warn_defaults(src: Any, mean: Sequence[float] | None, std: Sequence[float] | None) -> None:
    """A UserWarning when the export of a model trained elsewhere would record preprocessing
    nobody gave: timm's default mean/std, or a default input size."""
    import warnings

    foreign = bool(src.config.get("built_by") or src.provenance.get("trained_elsewhere"))
    if foreign and (mean is None or std is None) and not (src.provenance.get("data") or {}).get("mean"):
        warnings.warn("the export records the architecture's timm default mean/std (ImageNet's): nothing recorded the "
                      "normalisation this backbone was trained with; pass mean=/std= (geohead export --mean M1,M2,M3 "
                      "--std S1,S2,S3)", UserWarning, stacklevel=3)
    if src.config.get("img_size_source") == "default":
        warnings.warn(f"the export records img_size {src.config.get('img_size')} (a default): the checkpoint does not say "
                      "which size it was trained at; pass img_size= (geohead export --img-size N)", UserWarning, stacklevel=3)


def _normalisation(src: Any, model: nn.Module, mean: Sequence[float] | None,
                   std: Sequence[float] | None) -> tuple[list[float], list[float]]:
    """The input normalisation to record: the caller's, else the training data's (from the
    checkpoint), else the architecture's timm default; 3 values each."""
    data = src.provenance.get("data") or {}
    default = getattr(model, "pretrained_cfg", {})
    if mean is None:
        mean = data.get("mean") or list(default.get("mean", (0.485, 0.456, 0.406)))
    if std is None:
        std = data.get("std") or list(default.get("std", (0.229, 0.224, 0.225)))
    for name, v in (("mean", mean), ("std", std)):
        if len(v) != 3:
            raise ExportError(f"{name} must have 3 values (one per RGB channel), got {list(v)}")
    return list(mean), list(std)


def _geohead_record(src: Any, dtype: str, timm_loadable: bool, checksum: str,
                    head_checksum: str | None) -> dict[str, Any]:
    """config.json's ``geohead`` entry: format, version, how to load, the backbone's config,
    dtype, checksums, file names and provenance."""
    has_head = head_checksum is not None
    load_hint = (
        "timm.create_model('local-dir:<this folder>', pretrained=True, num_classes=0)" if timm_loadable
        else f"geohead.load_backbone('<this folder>')  (timm cannot build the {src.config.get('name')} stem from arguments)"
    )
    return {
        "format": EXPORT_FORMAT,
        "version": __version__,
        "timm_loadable": timm_loadable,
        "load": load_hint,
        "backbone": src.config,
        "dtype": dtype,
        "checksum": checksum,
        "files": {"weights": WEIGHTS_NAME, "head": HEAD_WEIGHTS_NAME if has_head else None,
                  "head_spec": HEAD_SPEC_NAME if has_head else None},
        "head_checksum": head_checksum,
        "head_checksum_covers": "tensors+spec" if has_head else None,
        "provenance": src.provenance,
    }


def _alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (signal 0 checks without sending anything)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


#: what an export folder holds (the temporary names of atomic_write start with ".<name>.tmp")
_EXPORT_FILES = (WEIGHTS_NAME, CONFIG_NAME, HEAD_WEIGHTS_NAME, HEAD_SPEC_NAME)


def _occupied(out: Path, overwrite: bool) -> str | None:
    """Why the existing ``out`` cannot take an export, or None. ``overwrite`` replaces an earlier
    export only: a folder holding anything else is never removed."""
    if not out.is_dir() or out.is_symlink():
        return f"--out {str(out)!r} exists and is not a folder; choose another path"
    if not any(out.iterdir()):
        return None
    if not overwrite:
        return f"--out {str(out)!r} already holds files; pass --overwrite (overwrite=True) or choose another folder"
    if not _holds_export_files_only(out):
        others = sorted(e.name for e in out.iterdir() if not (e.name in _EXPORT_FILES and e.is_file()))
        return (f"--out {str(out)!r} holds files an export does not write ({shorten(', '.join(others[:4]))}); --overwrite "
                "replaces an earlier export only: choose another folder")
    return None


def _holds_export_files_only(folder: Path) -> bool:
    """Whether every entry of ``folder`` is a plain file an export writes (so removing or
    restoring it never touches anything else that happens to carry an export's folder name)."""
    def ours(entry: Path) -> bool:
        return entry.name in _EXPORT_FILES or any(entry.name.startswith(f".{n}.tmp") for n in _EXPORT_FILES)

    return all(ours(e) and e.is_file() and not e.is_symlink() for e in folder.iterdir())


def recover_interrupted(out: str | os.PathLike) -> list[str]:
    """Clean up after exports to ``out`` that were killed, before a new one starts.

    A killed export leaves ``.NAME.tmp-PID-*`` (its unfinished folder) and, killed between the two
    renames of ``overwrite``, ``.NAME.old-PID`` (the previous export) with ``NAME`` missing. Folders
    of processes that still run are left alone. The previous export is put back where ``NAME`` is
    missing (else removed: the replacement finished); temporary folders are removed (those of
    exports before PIDs were in their names, after an hour). A folder holding anything but an
    export's files is never removed. Returns what was done, one line each.
    """
    import re
    import time

    out = Path(out)
    done: list[str] = []
    if not out.parent.is_dir():
        return done
    name = re.escape(out.name)
    pattern = re.compile(rf"^\.{name}\.(?:(old)-(\d+)$|(tmp)-(?:(\d+)-)?)")
    for entry in sorted(out.parent.iterdir()):
        m = pattern.match(entry.name)
        if m is None or not entry.is_dir() or entry.is_symlink():
            continue
        kind, digits = ("old", m.group(2)) if m.group(1) else ("tmp", m.group(4))
        pid = int(digits) if digits else None
        if pid is not None and pid != os.getpid() and _alive(pid):
            continue
        if pid is None and time.time() - entry.stat().st_mtime < 3600:
            continue
        if kind == "old" and not (out.exists() or out.is_symlink()):  # the --out folder itself, set aside: put back
            os.replace(entry, out)
            done.append(f"restored the previous export {out} from {entry.name} (an export was killed while replacing it)")
        elif not _holds_export_files_only(entry):
            done.append(f"left {entry.name} as it is: it holds files an export does not write")
        else:
            shutil.rmtree(entry, ignore_errors=True)
            done.append(f"removed {entry.name}, left by a killed export")
    if done:
        fsync_dir(out.parent)
    return done


def _write_folder(out: Path, overwrite: bool, src: Any, config: dict[str, Any], tensors: dict[str, Tensor],
                  head_tensors: dict[str, Tensor] | None, dtype: str, checksum: str, head_checksum: str | None) -> None:
    """Write the export into a temporary sibling of ``out`` and rename it into place, so a failure
    leaves nothing half-written."""
    extra = {"format": EXPORT_FORMAT, "dtype": dtype, "backbone": src.config, "checksum": checksum}
    weights_meta = encode_metadata(src.provenance, extra)
    head_meta = None if head_tensors is None else encode_metadata(
        {"head_spec": src.head_spec, "source": src.provenance["source"], "branch": src.provenance["branch"]},
        {"format": HEAD_FORMAT, "dtype": dtype, "checksum": head_checksum})
    integrity = integrity_checksum(config, weights_meta, head_meta)  # config.json and both headers, as written
    config["geohead"][INTEGRITY_KEY] = integrity
    for meta in (weights_meta, head_meta):
        if meta is not None:
            meta["geohead." + INTEGRITY_KEY] = json.dumps(integrity)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    try:
        save_safetensors(tmp / WEIGHTS_NAME, tensors, weights_meta)
        if head_tensors is not None:
            save_safetensors(tmp / HEAD_WEIGHTS_NAME, head_tensors, head_meta)
            atomic_write_text(tmp / HEAD_SPEC_NAME, json.dumps(src.head_spec, indent=2, sort_keys=True) + "\n")
        atomic_write_text(tmp / CONFIG_NAME, json.dumps(config, indent=2) + "\n")
        os.chmod(tmp, default_mode(folder=True))  # mkdtemp makes it 0700
        _place(tmp, out, overwrite)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


__all__ = ["ExportResult", "export_backbone", "recover_interrupted", "timm_config"]
