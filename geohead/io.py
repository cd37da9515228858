"""Durable file writes and safetensors files: one implementation for checkpoints, exports, specs.

Every file geohead writes for later reading goes through :func:`atomic_write_bytes`,
:func:`atomic_write_text` or :func:`save_safetensors`: the data goes to a temporary file in the
destination's folder, is flushed to disk (``fsync``), renamed over the destination
(``os.replace``, atomic on POSIX and Windows) and the folder entry is flushed too. A killed
process therefore leaves either the old file or the new one, never a torn file, and at most a
hidden ``.<name>.tmp*`` file that is removed on any Python-level failure. Files get the usual
permissions (``0o666`` minus the umask), like ``open(path, "w")``.

:func:`read_safetensors` reads tensors and metadata without ever unpickling, and raises
:class:`SafetensorsReadError` (a ``ValueError``) naming the file and what it was meant to be.

Leaf module: imports nothing from geohead (``safetensors`` is imported when first used).
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Callable, Mapping

from torch import Tensor

__all__ = [
    "SafetensorsReadError",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "default_mode",
    "folder_problem",
    "fsync_dir",
    "read_safetensors",
    "save_safetensors",
    "tensor_checksum",
]


class SafetensorsReadError(ValueError):
    """A safetensors file that is missing, truncated, corrupted, or not safetensors at all."""


# ---------------------------------------------------------------------- durable writes
def folder_problem(path: str | os.PathLike) -> str | None:
    """Why a folder cannot be made or written at ``path`` (a file in its place or on its way, an
    unwritable folder), as the end of a sentence; None when it can. Creates nothing, so commands
    call it before any work."""
    p = Path(path).expanduser().absolute()
    if p.exists() and not p.is_dir():
        return f"{str(p)!r} is a file, not a folder"
    probe = p
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        return f"{str(probe)!r} is a file, so no folder can be made at {str(p)!r}"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"folder {str(probe)!r} is not writable"
    return None


def default_mode(folder: bool = False) -> int:
    """The mode a new file (``0o666``) or folder (``0o777``) gets, minus the process umask.

    For files made by ``mkstemp``/``mkdtemp`` or the safetensors writer, which use ``0o600``/``0o700``.
    """
    mask = os.umask(0o022)
    os.umask(mask)
    return (0o777 if folder else 0o666) & ~mask


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a folder's entries (a rename into it) to disk; a no-op where folders cannot be opened."""
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


def atomic_write(path: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """Create ``path`` atomically: ``write(tmp)`` fills a temporary file in the same folder,
    which is then fsynced, given the default mode and renamed over ``path``.

    The parent folders are created. On any exception the temporary file is removed and an
    existing ``path`` is left untouched. Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(name)
    try:
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode())  # mkstemp (and the safetensors writer) create files 0600
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    fsync_dir(path.parent)
    return path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    return atomic_write(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` as UTF-8 to ``path`` atomically, newlines as given (no ``\\r\\n`` translation)."""
    return atomic_write_bytes(path, text.encode("utf-8"))


# ---------------------------------------------------------------------- checksums
def tensor_checksum(tensors: Mapping[str, Tensor], extra: Mapping[str, Any] | None = None) -> str:
    """``"sha256:<hex>"`` over the tensors in sorted name order, then ``extra`` (the JSON that
    travels with them: a checkpoint's header, an exported head's spec), when given.

    For each tensor: its name (UTF-8), its dtype (e.g. ``torch.bfloat16``), its shape, each
    followed by a NUL byte, then its raw bytes in C order (little-endian, as safetensors stores
    them). ``extra`` adds ``b"extra\\0"`` and its JSON text (sorted keys). Equal checksums mean
    equal names, dtypes, shapes, bits and extra. One helper for exports, heads and checkpoints.
    """
    import torch

    h = hashlib.sha256()
    for name in sorted(tensors):
        t = tensors[name].detach().cpu().contiguous()
        h.update(name.encode() + b"\0" + str(t.dtype).encode() + b"\0" + str(tuple(t.shape)).encode() + b"\0")
        if t.numel():
            h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes())
    if extra is not None:
        h.update(b"extra\0" + json.dumps(extra, sort_keys=True).encode())
    return "sha256:" + h.hexdigest()


# ---------------------------------------------------------------------- safetensors
def save_safetensors(path: str | os.PathLike, tensors: Mapping[str, Tensor], metadata: Mapping[str, str]) -> Path:
    """Write ``tensors`` (name -> tensor, any device) and string ``metadata`` to ``path`` atomically.

    Tensors are detached, moved to the CPU, made contiguous and cloned (safetensors refuses
    tensors that share storage: views, tied weights); dtypes and shapes are kept.
    """
    from safetensors.torch import save_file

    body = {k: v.detach().cpu().contiguous().clone() for k, v in tensors.items()}
    meta = dict(metadata)
    return atomic_write(path, lambda tmp: save_file(body, str(tmp), metadata=meta))


def read_safetensors(
    path: str | os.PathLike, what: str, tensors: bool = True
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors (CPU; ``{}`` when ``tensors=False``) and raw metadata of a safetensors file.

    Never unpickles anything. ``what`` names the file in errors (e.g. ``"checkpoint"``,
    ``"weights file"``).

    Raises:
        SafetensorsReadError: ``"<what> '<path>' does not exist"``, or ``"<what> '<path>' is not
            a readable safetensors file (truncated or corrupted?): <reason>"``.
    """
    from safetensors import SafetensorError, safe_open

    path = Path(path)
    if not path.exists():
        raise SafetensorsReadError(f"{what} {str(path)!r} does not exist")
    try:  # one open: a writer's rename between two opens would pair one file's header with another's tensors
        with safe_open(str(path), framework="pt") as f:
            meta = f.metadata() or {}
            loaded = {name: f.get_tensor(name) for name in f.keys()} if tensors else {}
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise SafetensorsReadError(
            f"{what} {str(path)!r} is not a readable safetensors file (truncated or corrupted?): {exc}"
        ) from None
    return loaded, meta
