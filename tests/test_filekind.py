"""geohead.filekind: a torch zip is named Lightning's or torch's from its data.pkl, read in
bounded pieces, so a member compressed to inflate without bound costs no more memory than one piece."""
from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path

import pytest
import torch

from geohead import filekind
from geohead.filekind import file_kind


def _zip(path: Path, pkl: bytes, compression: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", compression) as zf:
        zf.writestr("archive/data.pkl", pkl)
        zf.writestr("archive/version", b"3\n")
    return path


def test_torch_and_lightning_files_are_told_apart(tmp_path) -> None:
    torch.save({"w": torch.zeros(3)}, tmp_path / "plain.pt")
    torch.save({"state_dict": {"w": torch.zeros(3)}, "pytorch-lightning_version": "2.4.0"}, tmp_path / "pl.ckpt")
    assert file_kind(tmp_path / "plain.pt") == "torch"
    assert file_kind(tmp_path / "pl.ckpt") == "lightning"


@pytest.mark.parametrize("offset", [0, (1 << 20) - 10, (1 << 20) - 25, 3 << 20])
def test_the_key_is_found_across_the_pieces(tmp_path, offset) -> None:
    pkl = b"x" * offset + filekind._LIGHTNING_KEY + b"y" * 100
    assert file_kind(_zip(tmp_path / "a.ckpt", pkl)) == "lightning"
    assert file_kind(_zip(tmp_path / "b.ckpt", pkl.replace(b"version", b"VERSION"))) == "torch"


def test_a_member_inflating_past_the_scan_is_read_in_pieces(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(filekind, "PKL_SCAN_BYTES", 8 << 20)
    bomb = tmp_path / "bomb.ckpt"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as zf, zf.open("archive/data.pkl", "w", force_zip64=True) as fh:
        for _ in range(32):  # 32 MiB of zeros, then the key: past the scan
            fh.write(bytes(1 << 20))
        fh.write(filekind._LIGHTNING_KEY)
    assert bomb.stat().st_size < 200_000
    tracemalloc.start()
    try:
        kind = file_kind(bomb)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert kind == "torch"  # the key lies past the scan; reading the file refuses its compressed entries
    assert peak < 4 << 20, peak  # one 1 MiB piece and the zip reader's buffers, not the 32 MiB member
