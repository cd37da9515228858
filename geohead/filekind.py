"""What a file is, from its first bytes (and a torch zip's member names), without unpickling:
so that an error names a Lightning or torch checkpoint as such instead of calling it corrupted.
"""
from __future__ import annotations

import os
import struct
import zipfile
from pathlib import Path

#: Kinds :func:`file_kind` returns.
KINDS = ("missing", "folder", "safetensors", "lightning", "torch", "torch-legacy", "empty", "unknown")


def file_kind(path: str | os.PathLike) -> str:
    """One of :data:`KINDS`: ``lightning`` (a torch zip whose pickle names
    ``pytorch-lightning_version``), ``torch`` (any other ``torch.save`` zip), ``torch-legacy``
    (a bare pickle stream), ``safetensors`` (a plausible header), else ``unknown``/``empty``."""
    p = Path(path)
    if not p.exists():
        return "missing"
    if p.is_dir():
        return "folder"
    with open(p, "rb") as fh:
        head = fh.read(16)
    if not head:
        return "empty"
    if head.startswith(b"PK\x03\x04"):
        return _zip_kind(p)
    if head[:1] == b"\x80" and len(head) > 1 and head[1] in range(2, 6):
        return "torch-legacy"
    if len(head) >= 9:
        (n,) = struct.unpack("<Q", head[:8])
        if 0 < n < 100_000_000 and head[8:9] == b"{":
            return "safetensors"
    return "unknown"


def _zip_kind(path: Path) -> str:
    try:
        with zipfile.ZipFile(path) as zf:
            pkl = next((n for n in zf.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
            if pkl is None:
                return "unknown"
            data = zf.read(pkl)
    except (zipfile.BadZipFile, OSError):
        return "unknown"
    return "lightning" if b"pytorch-lightning_version" in data else "torch"


def describe_kind(kind: str) -> str:
    """A phrase for an error message, e.g. ``"a Lightning checkpoint (torch zip format)"``."""
    return {
        "lightning": "a Lightning checkpoint (torch zip format)",
        "torch": "a torch file (torch.save zip format, e.g. a state_dict)",
        "torch-legacy": "a torch file in the legacy pickle format",
        "safetensors": "a safetensors file",
        "folder": "a folder",
        "empty": "an empty file",
    }.get(kind, "a file of unknown format")


__all__ = ["KINDS", "describe_kind", "file_kind"]
