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
    _refuse_deep(p)
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


#: The most dicts, lists and Namespaces, and entries in them, :func:`load_file` walks in one file, a
#: shared one counted each time it is reached (a file of a few KB can reach one object 2^40 times).
MAX_ITEMS = 10_000_000
#: The deepest a torch file's pickle may nest its objects (a checkpoint's nest ~10 levels; torch's
#: unpickler recurses in C without a limit, so a 200 KB file of nested tuples crashes the process).
MAX_PICKLE_DEPTH = 100
#: Opcodes that add to an object already on the stack, and those that store or fetch the memo.
_IN_PLACE = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})
_MEMO_PUT, _MEMO_GET = frozenset({"PUT", "BINPUT", "LONG_BINPUT", "MEMOIZE"}), frozenset({"GET", "BINGET", "LONG_BINGET"})


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


def pickle_depth(stream: Any, limit: int) -> int:
    """How deep the objects of the pickle in ``stream`` nest (a scalar 0, ``(x,)`` 1, ...; the
    STOP that returns the object one more), read opcode by opcode without building anything;
    stops once past ``limit``, or at the end of what it can read (a malformed opcode: the depth
    up to it). Exact for tuples (what hashing a dict key recurses through) and for containers
    filled before they are referenced again, as a pickler writes them; a list filled after it
    was nested elsewhere counts less (lists are walked later with Python's recursion limit)."""
    import pickletools

    mark: Any = object()
    stack: list[Any] = []  # the mark, or a one-item list: the depth of that object, shared with the memo
    memo: dict[Any, list[int]] = {}
    deepest = 0
    ops = pickletools.genops(stream)
    while deepest <= limit:
        try:
            op, arg, _ = next(ops)
        except (StopIteration, ValueError, EOFError):
            break
        if op.name in _MEMO_PUT:
            memo[len(memo) if op.name == "MEMOIZE" else arg] = stack[-1] if stack and stack[-1] is not mark else [0]
            continue
        if op.name in _MEMO_GET or op.name == "DUP":
            stack.append(memo.get(arg, [0]) if op.name != "DUP" else stack[-1] if stack else [0])
            continue
        before = op.stack_before
        popped: list[Any] = []
        if pickletools.markobject in before:  # everything above the mark, the mark, then what lies below it
            while stack and stack[-1] is not mark:
                popped.append(stack.pop())
            stack = stack[:-1]
            below = before.index(pickletools.markobject)
        else:
            below = len(before)
        popped += [stack.pop() for _ in range(min(below, len(stack)))]
        cells = [c for c in popped if c is not mark]
        if op.name in _IN_PLACE and cells:  # the container (popped last) now holds the rest
            cell = cells[-1]
            cell[0] = max(cell[0], 1 + max((c[0] for c in cells[:-1]), default=-1))
        else:
            cell = [1 + max(c[0] for c in cells) if cells else 0]
        for item in op.stack_after:
            stack.append(mark if item is pickletools.markobject else cell)
        deepest = max(deepest, cell[0])
    return deepest


def _refuse_deep(path: Path) -> None:
    """A torch file whose pickle nests deeper than :data:`MAX_PICKLE_DEPTH` (read from the zip's
    ``data.pkl``, or a legacy file's pickles, before torch unpickles it)."""
    import zipfile

    from geohead.filekind import pickle_member

    try:
        if zipfile.is_zipfile(path):
            with zipfile.ZipFile(path) as zf:
                member = pickle_member(zf)
                if member is None:
                    return
                with zf.open(member) as fh:
                    depth = pickle_depth(fh, MAX_PICKLE_DEPTH)
        else:
            with open(path, "rb") as fh:  # legacy: magic, protocol, system info, the object, storage keys
                depth = max(pickle_depth(fh, MAX_PICKLE_DEPTH) for _ in range(5))
    except (OSError, zipfile.BadZipFile):
        return  # torch.load says what is wrong with the file
    if depth > MAX_PICKLE_DEPTH:
        raise PretrainedError(f"{str(path)!r} nests its objects more than {MAX_PICKLE_DEPTH} levels deep; a checkpoint "
                              "nests about 10: it is not a checkpoint geohead can interpret")


def _plain(obj: Any, path: Path) -> Any:
    """Namespaces as dicts, recursively through dicts and lists, walking at most :data:`MAX_ITEMS`
    of them and their entries; a tensor that declares more elements than its storage holds
    (an ``expand``ed one: a 40 KB file can declare gigabytes) is refused."""
    import torch

    left = [MAX_ITEMS]

    def walk(o: Any) -> Any:
        if isinstance(o, torch.Tensor):
            return _stored(o, path)
        if not isinstance(o, (argparse.Namespace, dict, list)):
            return o
        left[0] -= 1 + len(vars(o) if isinstance(o, argparse.Namespace) else o)
        if left[0] < 0:
            raise PretrainedError(f"{str(path)!r} holds more than {MAX_ITEMS:,} dicts, lists and entries in them (or "
                                  "one reached that many times); it is not a checkpoint geohead can interpret")
        if isinstance(o, list):
            return [walk(v) for v in o]
        return {k: walk(v) for k, v in (vars(o) if isinstance(o, argparse.Namespace) else o).items()}

    try:
        return walk(obj)
    except RecursionError:
        raise PretrainedError(f"{str(path)!r} nests its dicts and lists deeper than Python reads; it is not a "
                              "checkpoint geohead can interpret") from None


def _stored(t: Any, path: Path) -> Any:
    """``t`` when its storage holds every element its shape declares (a view of part of a
    storage is fine); a tensor whose strides repeat elements is refused."""
    import torch

    if t.layout != torch.strided:
        raise PretrainedError(f"{str(path)!r} holds a {t.layout} tensor; geohead reads dense tensors: save the weights with "
                              ".to_dense()")
    if t.numel() and t.numel() * t.element_size() > t.untyped_storage().nbytes():
        raise PretrainedError(f"{str(path)!r} holds a tensor of shape {tuple(t.shape)} stored in "
                              f"{t.untyped_storage().nbytes():,} bytes (an expanded tensor); save the weights with "
                              ".contiguous() or .clone()")
    return t


__all__ = ["MAX_ITEMS", "MAX_PICKLE_DEPTH", "PretrainedError", "SAFE_GLOBALS", "UnsafeCheckpointError", "load_file", "pickle_depth"]
