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
from typing import Any, Callable, Iterator, Mapping

from torch import Tensor

__all__ = [
    "DiskFullError",
    "OutsideFolderError",
    "SafetensorsReadError",
    "append_text",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_text",
    "default_mode",
    "disk_error",
    "folder_problem",
    "fsync_dir",
    "json_lines",
    "parse_json",
    "path_in",
    "read_bytes_in",
    "read_json",
    "read_safetensors",
    "read_small",
    "refuse_links_out",
    "save_safetensors",
    "shape_mismatch",
    "shorten",
    "tensor_checksum",
    "too_deep",
]


class SafetensorsReadError(ValueError):
    """A safetensors file that is missing, truncated, corrupted, or not safetensors at all."""


class OutsideFolderError(ValueError):
    """A path inside a folder geohead was given that a symbolic link leads out of."""


class DiskFullError(OSError, ValueError):
    """A write that failed because the disk is full or read-only (ENOSPC, EDQUOT, EROFS): an
    ``OSError`` with its errno, and a ``ValueError`` like every input geohead refuses."""


def shorten(text: str, limit: int = 80) -> str:
    """``text`` for an error message: itself up to ``limit`` characters, else its start and end
    with its length (a value of megabytes named in one line)."""
    return text if len(text) <= limit else f"{text[:limit // 2]}…{text[-limit // 4:]} ({len(text):,} characters)"


# ---------------------------------------------------------------------- paths inside a folder
def path_in(folder: str | os.PathLike, name: str | os.PathLike, what: str = "file",
            error: Callable[[str], Exception] = OutsideFolderError) -> Path:
    """``folder/name`` when no symbolic link below ``folder`` leads out of it; raises ``error``
    (a message naming the link, its target and the fix) otherwise.

    The folder itself is the caller's choice (the user named it) and may be a link; every part of
    ``name`` below it may be a link only to somewhere inside the folder. ``name`` must be relative
    without ``..``. The one check for every file geohead reads, appends to or writes in a folder
    it was given: readers and appenders refuse such a link, and whole-file writers
    (:func:`atomic_write`) replace a link at ``name`` itself by the new file, never writing
    through it. A link planted between this check and the open is not caught (see docs/security.md).
    """
    root, rel = Path(folder), Path(name)
    if rel.is_absolute() or ".." in rel.parts:
        raise error(f"{what} {str(rel)!r} is not a plain name inside {str(root)!r}; geohead reads and writes only inside it")
    real_root = root.resolve()
    p = root
    for part in rel.parts:
        p = p / part
        if not p.is_symlink():
            continue
        target = p.resolve()
        if target != real_root and real_root not in target.parents:
            raise error(f"{what} {str(p)!r} is a symbolic link to {str(target)!r}, outside {str(root)!r}; geohead never "
                        "reads or writes through a link out of the folder it was given: replace the link with the file "
                        "itself (or remove it) and rerun")
    return p


def refuse_links_out(folder: str | os.PathLike, names: "tuple[str, ...] | list[str]", what: str = "file",
                     error: Callable[[str], Exception] = OutsideFolderError) -> None:
    """:func:`path_in` for each of ``names`` in ``folder``: a command calls it for the files it
    will read or write there, before any work, so a planted link stops it with nothing written."""
    for name in names:
        path_in(folder, name, what, error)


def read_bytes_in(folder: str | os.PathLike, name: str | os.PathLike, what: str = "file",
                  error: Callable[[str], Exception] = OutsideFolderError) -> bytes:
    """The bytes of ``folder/name``, checked by :func:`path_in` first (no link out of ``folder``)."""
    return path_in(folder, name, what, error).read_bytes()


def append_text(path: str | os.PathLike, text: str) -> None:
    """Append ``text`` (UTF-8) to ``path``, created if missing; never through a symbolic link
    (``O_NOFOLLOW``): a link there raises :class:`OutsideFolderError` and nothing is written."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if Path(path).is_symlink():
            raise OutsideFolderError(f"{str(path)!r} is a symbolic link; geohead appends only to a plain file in its "
                                     "folder: replace the link with the file itself (or remove it) and rerun") from None
        raise disk_error(exc, path) from None
    try:
        os.write(fd, text.encode("utf-8"))
    except OSError as exc:
        raise disk_error(exc, path) from None
    finally:
        os.close(fd)


_DISK_ERRNOS = {28, 30, 122}  # ENOSPC, EROFS, EDQUOT


def disk_error(exc: BaseException, path: str | os.PathLike) -> BaseException:
    """``exc`` as a :class:`DiskFullError` with the one fix when it says the disk is full or
    read-only (ENOSPC, EDQUOT, EROFS; also safetensors' and torch's wrapped messages); ``exc``
    itself otherwise."""
    import errno

    code = getattr(exc, "errno", None)
    text = str(exc)
    full = code in _DISK_ERRNOS or any(s in text for s in ("No space left", "Read-only file system", "Disk quota"))
    if not full:
        return exc
    kind = "read-only" if code == errno.EROFS or "Read-only" in text else "full"
    return DiskFullError(code or errno.ENOSPC, f"cannot write {str(path)!r}: the disk is {kind} (disk full / read-only: "
                         "nothing was lost, free space and rerun)")


# ---------------------------------------------------------------------- durable writes
def folder_problem(path: str | os.PathLike) -> str | None:
    """Why a folder cannot be made or written at ``path`` (a file in its place or on its way, an
    unwritable folder, a pseudo or read-only file system), as the end of a sentence; None when it
    can. Leaves nothing behind (one empty probe folder is made and removed), so commands call it
    before any work."""
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
    try:  # what os.access cannot tell (root, /proc, a read-only mount): make and remove one empty folder
        os.rmdir(tempfile.mkdtemp(prefix=".geohead-probe-", dir=probe))
    except OSError as exc:
        return f"folder {str(probe)!r} does not accept new files ({exc.strerror or exc})"
    return None


#: The most bytes of a file geohead reads whole as text: a head spec, a recipe, an export's config.json.
MAX_SMALL_FILE = 1 << 20


#: The most bytes of a JSON file geohead reads whole: a diagnose report, probes, a search's results.
MAX_JSON_FILE = 256 << 20
#: The most bytes of a JSON-lines file geohead streams (metrics.jsonl, a monitor's log): a record
#: held in memory per line, each line at most MAX_SMALL_FILE.
MAX_RECORDS_FILE = 4 << 30
#: How deep a JSON value geohead reads may nest (its own files nest a few levels): deeper values
#: are refused where they are parsed, so no later walk of one recurses past Python's limit.
MAX_JSON_NESTING = 64


def read_small(path: str | os.PathLike, what: str, hint: str, error: Callable[[str], Exception] = ValueError,
               limit: int = MAX_SMALL_FILE) -> bytes:
    """The bytes of ``path``, a small file read whole; one over ``limit`` bytes (default
    :data:`MAX_SMALL_FILE`) is ``error`` (naming it, its size and ``hint``, what to give instead),
    checked before reading."""
    size = Path(path).stat().st_size
    if size > limit:
        raise error(f"{what} {str(path)!r} is {size:,} bytes, above the {limit >> 20} MiB such a file holds; {hint}")
    return Path(path).read_bytes()


def parse_json(data: str | bytes, what: str, error: Callable[[str], Exception] = ValueError) -> Any:
    """The JSON value of ``data``; ``error`` naming ``what`` when it is not JSON, not UTF-8, or
    nested deeper than :data:`MAX_JSON_NESTING` levels (or than Python parses: a RecursionError,
    not a ValueError, from the json module)."""
    try:
        value = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else f"{type(exc).__name__}: {str(exc)[:80]}"
        raise error(f"{what} is not valid JSON ({why})") from None
    if too_deep(value, MAX_JSON_NESTING):
        raise error(f"{what} nests deeper than {MAX_JSON_NESTING} levels; it is not a file geohead writes")
    return value


def too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` (dicts and lists) nests deeper than ``limit`` levels; walked without
    recursion, so a value nested thousands deep is answered, not a RecursionError."""
    stack = [(value, 1)]  # (a value, the level of the tables and arrays it would open)
    while stack:
        v, level = stack.pop()
        if isinstance(v, (dict, list)):
            if level > limit:
                return True
            stack.extend((x, level + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def json_lines(path: str | os.PathLike, what: str, hint: str, error: Callable[[str], Exception] = ValueError
               ) -> Iterator[tuple[str, Any]]:
    """(line, its JSON value, or None when it is not JSON) for each non-empty line of a JSON-lines
    file, streamed: a file above :data:`MAX_RECORDS_FILE` bytes is ``error`` (checked before
    reading), a line above :data:`MAX_SMALL_FILE` bytes is skipped unread, a line nested deeper
    than Python parses is None."""
    size = Path(path).stat().st_size
    if size > MAX_RECORDS_FILE:
        raise error(f"{what} {str(path)!r} is {size:,} bytes, above the {MAX_RECORDS_FILE >> 30} GiB such a file "
                    f"holds; {hint}")
    with open(path, "rb") as fh:
        while chunk := fh.readline(MAX_SMALL_FILE + 1):
            if len(chunk) > MAX_SMALL_FILE:  # the rest of an overlong line, read and dropped a chunk at a time
                while chunk and not chunk.endswith(b"\n"):
                    chunk = fh.readline(MAX_SMALL_FILE)
                continue
            line = chunk.decode("utf-8", errors="replace").rstrip("\r\n")
            if line.strip():
                try:
                    value = json.loads(line)
                except (ValueError, RecursionError):
                    value = None
                yield line, None if too_deep(value, MAX_JSON_NESTING) else value


def read_json(path: str | os.PathLike, what: str, hint: str, error: Callable[[str], Exception] = ValueError,
              limit: int = MAX_JSON_FILE) -> Any:
    """The JSON value of the file ``path``, read whole only below ``limit`` bytes (a JSON file of
    results: :data:`MAX_JSON_FILE`; a config, a small record: :data:`MAX_SMALL_FILE`; parsed, a
    file takes ~25 times its size) by :func:`read_small`, parsed by :func:`parse_json`; ``error``
    naming the file otherwise."""
    return parse_json(read_small(path, what, hint, error, limit), f"{what} {str(path)!r}", error)


def outermost_new(path: str | os.PathLike) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (``path`` or one of its parents:
    what ``mkdir(parents=True)`` creates first), None when ``path`` exists. A command that fails
    after creating folders removes this one, so a refused input leaves no folder behind."""
    p = Path(path)
    return next((q for q in [*reversed(p.parents), p] if not q.exists()), None)


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
    existing ``path`` is left untouched; a full or read-only disk raises :class:`DiskFullError`
    (nothing was lost). A symbolic link at ``path`` is replaced by the file, never written
    through. Returns ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.tmp", dir=path.parent)
        os.close(fd)
        tmp = Path(name)
        write(tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.chmod(tmp, default_mode())  # mkstemp (and the safetensors writer) create files 0600
        os.replace(tmp, path)  # a symbolic link at path is replaced, never written through
    except Exception as exc:  # noqa: BLE001 - a full or read-only disk is said so; anything else as it was
        err = disk_error(exc, path)
        if err is exc:
            raise
        raise err from None
    finally:
        if tmp is not None and tmp.exists():
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
def shape_mismatch(expected: Mapping[str, Tensor], got: Mapping[str, Tensor]) -> str | None:
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
