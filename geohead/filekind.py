"""What a file is, from its first bytes (and a torch zip's member names), without unpickling:
so that an error names a Lightning or torch checkpoint as such instead of calling it corrupted.
"""
from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

#: Kinds :func:`file_kind` returns.
KINDS = ("missing", "folder", "special", "safetensors", "lightning", "torch", "torch-legacy", "empty", "unknown")


#: The start of torch.save's legacy (non-zip) format: pickle protocol 2, then torch's magic number
#: 0x1950a86a20f9469cfc6c as a LONG1 (torch/serialization.py, MAGIC_NUMBER).
_LEGACY_MAGIC = b"\x80\x02\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"


def file_kind(path: str | os.PathLike) -> str:
    """One of :data:`KINDS`: ``lightning`` (a torch zip whose pickle names
    ``pytorch-lightning_version``), ``torch`` (any other ``torch.save`` zip), ``torch-legacy``
    (torch.save's pre-zip format, recognised by torch's magic number; any other pickle is
    ``unknown``), ``safetensors`` (a plausible header), else ``unknown``/``empty``; ``special``:
    a pipe, device or socket, never opened (reading a pipe waits for a writer)."""
    p = Path(path)
    if not p.exists():
        return "missing"
    if p.is_dir():
        return "folder"
    if not p.is_file():
        return "special"
    with open(p, "rb") as fh:
        head = fh.read(16)
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(p)
    if head.startswith(_LEGACY_MAGIC):
        return "torch-legacy"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 0 < n < 100_000_000 and head[8:9] == b"{":
            return "safetensors"
    return "unknown"


#: What names a torch zip as Lightning's: the key Lightning writes into every checkpoint's dict.
_LIGHTNING_KEY = b"pytorch-lightning_version"

#: The most bytes of a zip's data.pkl read for it (in 1 MiB pieces): the member may be
#: compressed to inflate without bound, and the key sits near the pickle's start.
PKL_SCAN_BYTES = 64 << 20


def pickle_member(zf: zipfile.ZipFile) -> zipfile.ZipInfo | None:
    """The ``data.pkl`` entry of a torch.save zip (under its archive folder), or None."""
    return next((i for i in zf.infolist() if i.filename.endswith("/data.pkl") or i.filename == "data.pkl"), None)


def _zip_kind(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            pkl = pickle_member(zf)
            if pkl is None:
                return "unknown"
            with zf.open(pkl) as fh:
                found = _holds(fh, _LIGHTNING_KEY, PKL_SCAN_BYTES)
    except (zipfile.BadZipFile, OSError, EOFError, NotImplementedError, RuntimeError, ValueError):
        return "unknown"
    return "lightning" if found else "torch"


def _holds(fh, key: bytes, limit: int) -> bool:
    """Whether ``key`` occurs in the first ``limit`` bytes of the stream ``fh``, read 1 MiB at a time."""
    seen, tail = 0, b""
    while seen < limit:
        chunk = fh.read(min(1 << 20, limit - seen))
        if not chunk:
            return False
        if key in tail + chunk:
            return True
        tail, seen = chunk[-len(key):], seen + len(chunk)
    return False


def describe_kind(kind: str) -> str:
    """A phrase for an error message, e.g. ``"a Lightning checkpoint (torch zip format)"``."""
    return {
        "lightning": "a Lightning checkpoint (torch zip format)",
        "torch": "a torch file (torch.save zip format, e.g. a state_dict)",
        "torch-legacy": "a torch file in the legacy pickle format",
        "safetensors": "a safetensors file",
        "folder": "a folder",
        "special": "not a regular file (a pipe, device or socket)",
        "empty": "an empty file",
    }.get(kind, "a file of unknown format")


def read_error(path: str | os.PathLike, what: str, reason: str) -> str:
    """The message for a file that is not the safetensors file expected: a Lightning or torch
    checkpoint is named as such, with what to run on it (the file itself is fine); anything
    else keeps ``reason`` (truncated, corrupted, another format)."""
    kind = file_kind(path)
    if kind not in ("lightning", "torch", "torch-legacy"):
        return reason
    return (f"{what} {str(path)!r} is {describe_kind(kind)}, not a safetensors file written by geohead (the file itself "
            f"is fine). `geohead diagnose {path}` reads it (add --architecture NAME when the backbone is not inferred); "
            f"`geohead export {path} --out DIR` exports its backbone")


__all__ = ["KINDS", "describe_kind", "file_kind", "pickle_member", "read_error"]
