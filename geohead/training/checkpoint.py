"""Checkpoints: one safetensors file per checkpoint, no pickle, written atomically.

Tensors (model, teacher, objective buffers, optimiser state) go in the safetensors body under
prefixed names; everything else (config, head spec, step, optimiser hyper-parameters, backbone
build info) is JSON in the safetensors metadata header. A checkpoint is written with
:func:`geohead.io.save_safetensors` (temporary file in the same folder, fsync, rename), so a
killed process leaves either the old or the new checkpoint, never a torn file. The header's
``checksum`` (:func:`geohead.io.tensor_checksum` over the tensors and the rest of the header)
is checked on every load, so a flipped bit in the data or an edited header is refused, never
resumed from.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch
from torch import Tensor

from geohead.filekind import read_error
from geohead.io import SafetensorsReadError, parse_json, path_in, read_safetensors, save_safetensors, tensor_checksum

FORMAT = "geohead.training.checkpoint/1"
#: A run folder's checkpoint, named for its format.
LAST = "last.safetensors"
#: Its earlier name (the same safetensors file): still read where a run folder has no ``LAST``.
LEGACY_LAST = "last.ckpt"
#: Both names, newest first: every reader of a run folder checks them for links out of it.
RUN_CHECKPOINTS = (LAST, LEGACY_LAST)


class CheckpointError(ValueError):
    """A file that is missing, truncated, corrupted, or not a geohead checkpoint."""


@dataclass
class Checkpoint:
    """A loaded checkpoint: ``tensors`` by prefixed name and ``meta`` (parsed JSON values)."""

    path: Path
    tensors: dict[str, Tensor]
    meta: dict[str, Any]

    def section(self, prefix: str) -> dict[str, Tensor]:
        """Tensors under ``prefix.`` with the prefix removed (e.g. ``"model.backbone"``)."""
        p = prefix.rstrip(".") + "."
        return {k[len(p):]: v for k, v in self.tensors.items() if k.startswith(p)}


def save_checkpoint(path: str | Path, tensors: dict[str, Tensor], meta: dict[str, Any]) -> Path:
    """Write ``tensors`` and JSON-able ``meta`` to ``path`` atomically (temp file + rename)."""
    header = {"format": FORMAT}
    header.update({k: json.dumps(v, sort_keys=True, allow_nan=True) for k, v in meta.items()})
    body = {k: v.detach().cpu().contiguous() for k, v in tensors.items()}  # one device copy, hashed and saved
    header["checksum"] = tensor_checksum(body, header)
    return save_safetensors(path, body, header)


def run_checkpoint(folder: str | Path, error: Callable[[str], Exception] = CheckpointError) -> Path:
    """The checkpoint of run folder ``folder``: its ``last.safetensors``, else the ``last.ckpt`` of a
    run written before the rename, else the (missing) ``last.safetensors``. Either name being a
    link out of the folder raises ``error``, as :func:`geohead.io.path_in` does."""
    found = [path_in(folder, name, "checkpoint", error) for name in RUN_CHECKPOINTS]
    return next((p for p in found if p.exists()), found[0])


def load_checkpoint(path: str | Path) -> Checkpoint:
    """Read a checkpoint written by :func:`save_checkpoint`; a run folder means its checkpoint
    (:func:`run_checkpoint`: ``last.safetensors``, or ``last.ckpt`` of an older run).

    Raises :class:`CheckpointError` (never unpickles anything) for a missing path, a file that
    is not safetensors, a truncated or corrupted file, or one that is not a geohead checkpoint.
    """
    path = Path(path)
    if path.is_dir():  # a run folder: its own checkpoint, never one a link elsewhere points at
        path = run_checkpoint(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {str(path)!r} does not exist (give a run folder or its {LAST})")
    try:
        tensors, header = read_safetensors(path, "checkpoint")
    except SafetensorsReadError as exc:
        raise CheckpointError(read_error(path, "checkpoint", str(exc))) from None  # names Lightning/torch files
    if not is_checkpoint_header(header):
        raise CheckpointError(f"{str(path)!r} is a safetensors file but not a geohead checkpoint (format={header.get('format')!r})")
    want = header.pop("checksum", None)  # checkpoints written before checksums have none
    if want is not None and tensor_checksum(tensors, header) != want:
        raise CheckpointError(
            f"checkpoint {str(path)!r} fails its checksum: its data or header changed after it was written "
            "(a flipped bit, a partial copy, an edit). Copy it again from where it was written, or start "
            "the run again with --overwrite"
        )
    if header.get("format") != FORMAT:  # its checksum held, so it was written with another format
        raise CheckpointError(f"{str(path)!r} is a checkpoint of another format ({header.get('format')!r}, this geohead "
                              f"reads {FORMAT!r}); export it with the geohead that wrote it")
    meta = {}
    for k, v in header.items():
        if k == "format":
            continue
        meta[k] = parse_json(v, f"{str(path)!r}: metadata {k!r} (a corrupted header)", CheckpointError)
    return Checkpoint(path, tensors, meta)


def is_checkpoint_header(header: dict[str, str]) -> bool:
    """Whether a safetensors header is a geohead checkpoint's: its format tag, or (a damaged tag)
    the checksum with the run's own entries, so that a flipped tag is checked and refused as a
    checksum failure instead of read as somebody else's file."""
    return header.get("format") == FORMAT or {"checksum", "step", "config"} <= set(header)


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Split an optimiser's state_dict into tensors (``optim.<param>.<key>``) and JSON metadata."""
    sd = optimizer.state_dict()
    tensors: dict[str, Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, state in sd["state"].items():
        for key, value in state.items():
            if isinstance(value, Tensor):
                tensors[f"optim.{pid}.{key}"] = value
            else:
                scalars.setdefault(str(pid), {})[key] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def load_optimizer(optimizer: torch.optim.Optimizer, tensors: dict[str, Tensor], meta: dict[str, Any]) -> None:
    """Inverse of :func:`optimizer_tensors`."""
    state: dict[int, dict[str, Any]] = {}
    for name, value in tensors.items():
        if not name.startswith("optim."):
            continue
        _, pid, key = name.split(".", 2)
        state.setdefault(int(pid), {})[key] = value
    for pid, extra in meta.get("scalars", {}).items():
        state.setdefault(int(pid), {}).update(extra)
    params = [p for g in optimizer.param_groups for p in g["params"]]
    for pid, entries in state.items():  # torch takes any shape here and fails at the first step, after the run folder is written
        if not 0 <= pid < len(params):
            raise ValueError(f"optimiser state for parameter {pid}, of {len(params)}")
        for key, value in entries.items():
            if isinstance(value, Tensor) and value.numel() != 1 and value.shape != params[pid].shape:
                raise ValueError(f"optimiser state {pid}.{key} has shape {tuple(value.shape)}, its parameter "
                                 f"{tuple(params[pid].shape)}")
    groups = meta["param_groups"]
    for g in groups:
        if "betas" in g:
            g["betas"] = tuple(g["betas"])
    optimizer.load_state_dict({"state": state, "param_groups": groups})
