"""Reading an export folder: :func:`load_backbone`, :func:`load_head`, :func:`read_config`,
:func:`read_metadata`. Safetensors and JSON only: nothing is ever unpickled."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from geohead.export.format import (
    CONFIG_NAME, EXPORT_FORMAT, HEAD_SPEC_NAME, HEAD_WEIGHTS_NAME, INTEGRITY_KEY, WEIGHTS_NAME, ExportError,
    check_architecture, decode_metadata, integrity_checksum, nonfinite_problem, shape_mismatch, tensor_checksum,
)
from geohead.heads import GeometricHead, HeadSpec
from geohead.io import SafetensorsReadError, parse_json, path_in, read_safetensors, read_small


def read_metadata(path: str | os.PathLike) -> dict[str, Any]:
    """The ``geohead.*`` metadata of an exported safetensors file, parsed (``geohead.`` removed)."""
    _, meta = _read_safetensors(Path(path), "safetensors file", tensors=False)
    return decode_metadata(meta, Path(path))


def _read_safetensors(path: Path, what: str, tensors: bool = True) -> tuple[dict[str, Tensor], dict[str, str]]:
    """:func:`geohead.io.read_safetensors`, its errors as :class:`ExportError`."""
    try:
        return read_safetensors(path, what, tensors)
    except SafetensorsReadError as exc:
        raise ExportError(str(exc)) from None


def read_config(path: str | os.PathLike) -> dict[str, Any]:
    """The parsed ``config.json`` of an export folder (with its ``geohead`` section)."""
    if not isinstance(path, (str, os.PathLike)):
        raise ExportError(f"give the export folder as a str or pathlib.Path, got {type(path).__name__} {str(path)[:60]!r}")
    d = Path(path)
    if not d.exists():
        raise ExportError(f"export folder {str(d)!r} does not exist; give the folder written by geohead export")
    if not d.is_dir():
        raise ExportError(f"{str(d)!r} is not a folder; give the folder written by geohead export (it holds {CONFIG_NAME} and {WEIGHTS_NAME})")
    cfg_path = _inside(d, CONFIG_NAME)
    if not cfg_path.is_file():
        raise ExportError(f"{str(d)!r} has no {CONFIG_NAME}; it is not a geohead export folder")
    raw = read_small(cfg_path, "export config", "give the config.json geohead export wrote", ExportError)
    config = parse_json(raw, f"{str(cfg_path)!r} (corrupted?)", ExportError)
    g = config.get("geohead") if isinstance(config, dict) else None
    if not isinstance(g, dict) or g.get("format") != EXPORT_FORMAT or not isinstance(g.get("backbone"), dict):
        raise ExportError(
            f"{str(cfg_path)!r} has no geohead section (format {EXPORT_FORMAT!r}): not written by geohead export; "
            "a plain timm folder loads with timm.create_model('local-dir:...', pretrained=True)"
        )
    for key, value in (("geohead.files", g.get("files")), ("geohead.provenance", g.get("provenance")),
                       ("pretrained_cfg", config.get("pretrained_cfg"))):
        if value is not None and not isinstance(value, dict):
            raise ExportError(f"{str(cfg_path)!r}: {key} is a {type(value).__name__}, not a table: it was edited or not "
                              "written by geohead export; export again")
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
    tensors, raw = _read_safetensors(_inside(d, WEIGHTS_NAME), "weights file")
    meta = decode_metadata(raw, d / WEIGHTS_NAME)
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
        _check_integrity(d, config, raw, meta)
        _check_finite(d / WEIGHTS_NAME, tensors, config.get("pretrained_cfg") or {})
    model = check_architecture(g["backbone"], tensors, f"{str(d / WEIGHTS_NAME)!r}", load=True)
    model.geohead_export = g
    return model.to(device).eval()


def load_head(path: str | os.PathLike, *, verify: bool = True) -> GeometricHead:
    """The head exported with ``with_head=True``: a :class:`~geohead.heads.GeometricHead` in eval mode.

    ``head.json`` names its activation from the registry only (never imports a class), and its
    checksum (``verify``) covers the spec as well as the tensors, so an edited spec is refused.
    """
    config = read_config(path)
    g = config["geohead"]
    d = Path(path)
    if not g.get("files", {}).get("head"):
        raise ExportError(f"{str(d)!r} was exported without the head; export again with --with-head")
    tensors, meta = _read_safetensors(_inside(d, HEAD_WEIGHTS_NAME), "head file")
    spec_path = _inside(d, HEAD_SPEC_NAME)
    try:
        spec_dict = parse_json(HeadSpec.read_text(spec_path), "head spec")
    except (ValueError, FileNotFoundError) as exc:
        raise ExportError(f"{str(spec_path)!r}: {exc}") from None
    if verify:
        raw_weights = _read_safetensors(_inside(d, WEIGHTS_NAME), "weights file", tensors=False)[1]
        _check_integrity(d, config, raw_weights, decode_metadata(raw_weights, d / WEIGHTS_NAME))
        _check_finite(d / HEAD_WEIGHTS_NAME, tensors, {})
        covers_spec = g.get("head_checksum_covers") == "tensors+spec"  # exports before the spec was covered: tensors
        if tensor_checksum(tensors, spec_dict if covers_spec else None) != g.get("head_checksum"):
            raise ExportError(f"{str(d / HEAD_WEIGHTS_NAME)!r} + {HEAD_SPEC_NAME} fail their checksum: the head or its "
                              "spec was edited, corrupted or replaced; export again")
    try:
        head = GeometricHead.from_spec(HeadSpec.from_dict(spec_dict))
    except ValueError as exc:
        raise ExportError(f"{str(spec_path)!r}: {exc}") from None
    problem = shape_mismatch(head.state_dict(), tensors)
    if problem is not None:
        raise ExportError(f"{str(d / HEAD_WEIGHTS_NAME)!r} does not fit {HEAD_SPEC_NAME}: {problem}")
    head.load_state_dict(tensors, strict=True)
    return head.eval()


def _check_integrity(d: Path, config: dict[str, Any], raw_weights: dict[str, str], weights: dict[str, Any]) -> None:
    """config.json and the files' headers as exported (:func:`~geohead.export.format.integrity_checksum`).
    The checksum sits in config.json and in each file's header: one copy missing or different is a
    change, so an edit cannot switch the check off; exports from before it carry it in neither."""
    want = {config["geohead"].get(INTEGRITY_KEY), weights.get(INTEGRITY_KEY)}
    head_raw = None
    if (config["geohead"].get("files") or {}).get("head"):
        head_raw = _read_safetensors(_inside(d, HEAD_WEIGHTS_NAME), "head file", tensors=False)[1]
        want.add(decode_metadata(head_raw, d / HEAD_WEIGHTS_NAME).get(INTEGRITY_KEY))
    if want == {None}:
        return  # written before config.json and the headers were covered: the tensor checksums still hold
    got = integrity_checksum(config, raw_weights, head_raw)
    if want != {got}:
        raise ExportError(f"{str(d)!r}: {CONFIG_NAME} or a file's header changed after export (integrity checksum "
                          f"{sorted(map(str, want))} recorded, {got} now): an edit or corruption; export again")


def _check_finite(path: Path, tensors: dict[str, Tensor], pretrained_cfg: dict[str, Any]) -> None:
    """Weights and the recorded normalisation must be finite numbers (std above 0)."""
    bad = nonfinite_problem(tensors, pretrained_cfg.get("mean"), pretrained_cfg.get("std"))
    if bad:
        raise ExportError(f"{str(path)!r}: {bad}; export again from a finite checkpoint")


def _inside(folder: Path, name: str) -> Path:
    """``folder / name``, refused when a link leads it outside ``folder`` (:func:`geohead.io.path_in`):
    loading reads only the export's own files."""
    return path_in(folder, name, "export file", ExportError)


__all__ = ["load_backbone", "load_head", "read_config", "read_metadata"]
