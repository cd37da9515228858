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
    _refuse_compressed(p)
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
    except RecursionError:
        raise PretrainedError(f"{str(p)!r} ({describe_kind(kind)}) nests its objects deeper than Python reads; it is "
                              "not a checkpoint geohead can interpret") from None
    return _plain(obj, p), kind


#: The most dicts, lists and Namespaces :func:`load_file` walks in one file, a shared one counted
#: each time it is reached (a file of a few KB can reach one object 2^40 times).
MAX_CONTAINERS = 1_000_000


def _refuse_compressed(path: Path) -> None:
    """A zip-format torch file whose entries hold more bytes than the file: torch.save stores
    entries uncompressed, so compressed ones are a file made to inflate on loading."""
    import zipfile

    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as zf:
            declared = sum(info.file_size for info in zf.infolist())
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise PretrainedError(f"{str(path)!r} cannot be read: truncated or corrupted? {exc}") from None
    if declared > path.stat().st_size:
        raise PretrainedError(f"{str(path)!r} holds compressed entries that inflate to {declared:,} bytes from "
                              f"{path.stat().st_size:,}; torch.save writes them uncompressed: re-save the weights with "
                              "torch.save and give that file")


def _plain(obj: Any, path: Path) -> Any:
    """Namespaces as dicts, recursively through dicts and lists, walking at most
    :data:`MAX_CONTAINERS` of them."""
    left = [MAX_CONTAINERS]

    def walk(o: Any) -> Any:
        if not isinstance(o, (argparse.Namespace, dict, list)):
            return o
        left[0] -= 1
        if left[0] < 0:
            raise PretrainedError(f"{str(path)!r} holds more than {MAX_CONTAINERS:,} nested dicts and lists (or one "
                                  "reached that many times); it is not a checkpoint geohead can interpret")
        if isinstance(o, list):
            return [walk(v) for v in o]
        return {k: walk(v) for k, v in (vars(o) if isinstance(o, argparse.Namespace) else o).items()}

    try:
        return walk(obj)
    except RecursionError:
        raise PretrainedError(f"{str(path)!r} nests its dicts and lists deeper than Python reads; it is not a "
                              "checkpoint geohead can interpret") from None


__all__ = ["PretrainedError", "SAFE_GLOBALS", "UnsafeCheckpointError", "load_file"]
