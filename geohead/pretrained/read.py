"""Reading a checkpoint geohead did not write, safely: safetensors, or ``torch.load(...,
weights_only=True)`` with one addition to torch's allowlist, ``argparse.Namespace`` (the ``args``
that DINO's official checkpoints carry). A file whose pickle needs any other code is refused with
a message that says so; nothing else is ever unpickled.
"""
from __future__ import annotations

import argparse
import os
import pickle
import re
from pathlib import Path
from typing import Any

from torch import Tensor

#: Classes a checkpoint may hold besides tensors and containers (torch's safe-globals allowlist).
SAFE_GLOBALS: tuple[type, ...] = (argparse.Namespace,)


class PretrainedError(ValueError):
    """A checkpoint geohead cannot read or interpret; the message names the file and the fix."""


class UnsafeCheckpointError(PretrainedError):
    """A pickle that would run code outside torch's weights-only allowlist."""


def load_file(path: str | os.PathLike) -> tuple[Any, str]:
    """The object stored in ``path`` and the file's kind (:func:`geohead.filekind.file_kind`).

    safetensors: a ``{name: tensor}`` dict, with its metadata under ``"__metadata__"``; torch
    files: ``torch.load(path, map_location="cpu", weights_only=True)`` with
    :data:`SAFE_GLOBALS` allowed; ``argparse.Namespace`` values come back as dicts.

    Raises:
        PretrainedError: missing file, unknown format, a truncated torch file.
        UnsafeCheckpointError: the pickle needs a class outside the allowlist (named).
    """
    import torch

    from geohead.filekind import describe_kind, file_kind

    p = Path(path)
    kind = file_kind(p)
    if kind == "missing":
        raise PretrainedError(f"checkpoint {str(p)!r} does not exist")
    if kind == "folder":
        raise PretrainedError(f"{str(p)!r} is a folder; give a checkpoint file (a geohead run folder is read by geohead itself)")
    if kind == "safetensors":
        from geohead.io import SafetensorsReadError, read_safetensors

        try:
            tensors, meta = read_safetensors(p, "checkpoint")
        except SafetensorsReadError as exc:
            raise PretrainedError(str(exc)) from None
        return {**tensors, "__metadata__": meta}, kind
    if kind not in ("lightning", "torch", "torch-legacy"):
        raise PretrainedError(f"{str(p)!r} is {describe_kind(kind)}: neither safetensors nor a torch checkpoint")
    try:
        with torch.serialization.safe_globals(list(SAFE_GLOBALS)):
            obj = torch.load(p, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        found = re.search(r"GLOBAL ([\w.]+)", str(exc))
        what = found.group(1) if found else "a class outside torch's allowlist"
        raise UnsafeCheckpointError(
            f"{str(p)!r} ({describe_kind(kind)}) needs arbitrary code to load: its pickle references {what}. geohead "
            "loads with torch.load(weights_only=True) only. If you trust the file, re-save its weights: "
            "torch.save(torch.load(path, weights_only=False)['state_dict'], 'weights.pt') and give that file"
        ) from None
    except (RuntimeError, OSError, EOFError) as exc:
        raise PretrainedError(f"{str(p)!r} ({describe_kind(kind)}) cannot be read: truncated or corrupted? {exc}") from None
    return _plain(obj), kind


def _plain(obj: Any) -> Any:
    """Namespaces as dicts, recursively through dicts and lists."""
    if isinstance(obj, argparse.Namespace):
        return {k: _plain(v) for k, v in vars(obj).items()}
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)) and not isinstance(obj, Tensor):
        return type(obj)(_plain(v) for v in obj) if isinstance(obj, list) else obj
    return obj


__all__ = ["PretrainedError", "SAFE_GLOBALS", "UnsafeCheckpointError", "load_file"]
