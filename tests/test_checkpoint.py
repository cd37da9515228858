"""Checkpoint files: exact round trips, atomic writes, clear errors, never a pickle load."""
from __future__ import annotations

import pytest
import torch

from geohead import GeometricHead
from geohead.training.checkpoint import (
    CheckpointError, load_checkpoint, load_optimizer, optimizer_tensors, run_checkpoint, save_checkpoint,
)


def test_round_trip_model_and_optimizer(tmp_path) -> None:
    torch.manual_seed(0)
    head = GeometricHead(6, 4, hidden_dim=8)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    head(torch.randn(5, 6)).pow(2).sum().backward()
    opt.step()
    tensors = {f"model.{k}": v for k, v in head.state_dict().items()}
    t_opt, m_opt = optimizer_tensors(opt)
    path = save_checkpoint(tmp_path / "last.safetensors", {**tensors, **t_opt}, {"step": 7, "optimizer": m_opt, "spec": head.spec.to_dict()})
    ck = load_checkpoint(tmp_path)  # a folder means its last.safetensors
    assert ck.path == path and ck.meta["step"] == 7
    for k, v in head.state_dict().items():
        assert torch.equal(ck.section("model")[k], v)
    head2 = GeometricHead(6, 4, hidden_dim=8)
    head2.load_state_dict(ck.section("model"))
    opt2 = torch.optim.AdamW(head2.parameters(), lr=1e-3)
    load_optimizer(opt2, ck.tensors, ck.meta["optimizer"])
    s1, s2 = opt.state_dict(), opt2.state_dict()
    assert s1["param_groups"] == s2["param_groups"]
    for pid in s1["state"]:
        for key, value in s1["state"][pid].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(s2["state"][pid][key]))
    assert not list(tmp_path.glob(".*tmp*"))  # no temp file left behind


def test_errors_for_missing_truncated_corrupted_and_foreign_files(tmp_path) -> None:
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "missing.ckpt")
    good = save_checkpoint(tmp_path / "a.ckpt", {"x": torch.arange(1000.0)}, {"step": 1})
    data = good.read_bytes()
    (tmp_path / "trunc.ckpt").write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated or corrupted"):
        load_checkpoint(tmp_path / "trunc.ckpt")
    (tmp_path / "garbage.ckpt").write_bytes(b"\x80\x04\x95 this is a pickle, not safetensors")
    with pytest.raises(CheckpointError, match="not a readable safetensors"):
        load_checkpoint(tmp_path / "garbage.ckpt")
    from safetensors.torch import save_file
    save_file({"x": torch.zeros(2)}, str(tmp_path / "foreign.ckpt"))
    with pytest.raises(CheckpointError, match="not a geohead checkpoint"):
        load_checkpoint(tmp_path / "foreign.ckpt")


def test_atomic_write_keeps_old_file_when_writing_fails(tmp_path, monkeypatch) -> None:
    path = save_checkpoint(tmp_path / "last.ckpt", {"x": torch.ones(3)}, {"step": 1})
    import safetensors.torch

    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(safetensors.torch, "save_file", boom)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, {"x": torch.zeros(3)}, {"step": 2})
    ck = load_checkpoint(path)
    assert ck.meta["step"] == 1 and torch.equal(ck.tensors["x"], torch.ones(3))
    assert not list(tmp_path.glob(".*tmp*"))


def test_a_checkpoint_replaced_while_it_is_read_reads_as_one_version(tmp_path, monkeypatch) -> None:
    """A training run renames a new last.safetensors over the old one while a reader (resume, a monitor)
    has it open: the reader gets the old file's header and tensors together, never a mix (a
    clean-clone CI run once read step 2's header with step 3's tensors and failed the checksum)."""
    import safetensors

    path = save_checkpoint(tmp_path / "last.ckpt", {"x": torch.ones(3)}, {"step": 1})
    real_open = safetensors.safe_open

    class RenamedAfterOpen:  # the writer's os.replace lands just after the reader opened the file
        def __init__(self, *args, **kwargs) -> None:
            self.handle = real_open(*args, **kwargs)

        def __enter__(self):
            f = self.handle.__enter__()
            save_checkpoint(path, {"x": torch.full((3,), 2.0)}, {"step": 2})
            return f

        def __exit__(self, *exc):
            return self.handle.__exit__(*exc)

    monkeypatch.setattr(safetensors, "safe_open", RenamedAfterOpen)
    ck = load_checkpoint(path)  # the old code opened the path twice and failed its checksum here
    assert ck.meta["step"] == 1 and torch.equal(ck.tensors["x"], torch.ones(3))
    monkeypatch.undo()
    later = load_checkpoint(path)
    assert later.meta["step"] == 2 and torch.equal(later.tensors["x"], torch.full((3,), 2.0))


def test_a_run_folder_means_last_safetensors_else_an_older_runs_last_ckpt(tmp_path) -> None:
    """Checkpoints are named for their format (last.safetensors); a folder written before the
    rename holds last.ckpt, the same file, and reads as it did. Either name planted as a link out
    of the folder is refused."""
    import os

    assert run_checkpoint(tmp_path) == tmp_path / "last.safetensors"  # nothing yet: where it goes
    old = save_checkpoint(tmp_path / "last.ckpt", {"x": torch.ones(2)}, {"step": 1})
    assert run_checkpoint(tmp_path) == old and load_checkpoint(tmp_path).meta["step"] == 1
    new = save_checkpoint(tmp_path / "last.safetensors", {"x": torch.ones(2)}, {"step": 2})
    assert run_checkpoint(tmp_path) == new and load_checkpoint(tmp_path).meta["step"] == 2  # the newer name wins
    elsewhere = tmp_path.parent / f"{tmp_path.name}_secret.safetensors"
    elsewhere.write_bytes(new.read_bytes())
    for name in ("last.safetensors", "last.ckpt"):
        run = tmp_path / f"link_{name}"
        run.mkdir()
        os.symlink(elsewhere, run / name)
        with pytest.raises(CheckpointError, match=f"{name}' is a symbolic link"):
            load_checkpoint(run)
    with pytest.raises(CheckpointError, match="give a run folder or its last.safetensors"):
        load_checkpoint(tmp_path / "empty")
