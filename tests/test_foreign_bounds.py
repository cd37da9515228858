"""Checkpoints trained elsewhere, crafted to crash, inflate or confuse the reader: each is refused
with a PretrainedError (exit 2 on the command line) before memory follows what the file declares."""
from __future__ import annotations

import io
import os
import pickle
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from geohead.pretrained import PretrainedError, load_pretrained
from geohead.pretrained.read import MAX_ITEMS, pickle_depth
from geohead.pretrained.synthetic import _resnet

ROOT = Path(__file__).resolve().parents[1]
z = torch.zeros


def _nesting(o) -> int:
    """The reference: 0 for a scalar or an empty container, else 1 + the deepest entry (keys too)."""
    if isinstance(o, dict):
        return 1 + max(max(_nesting(k), _nesting(v)) for k, v in o.items()) if o else 0
    if isinstance(o, (list, tuple)):
        return 1 + max(_nesting(v) for v in o) if o else 0
    return 0


@pytest.mark.parametrize("protocol", [2, 4])
def test_pickle_depth_is_the_nesting_of_what_the_pickle_builds(protocol) -> None:
    x = 1
    for _ in range(30):
        x = (x, "a")
    shared = [1, [2, (3,)]]
    cases = [1, (1,), [1, [2, [3]]], {"a": {"b": {"c": 1}}}, {x: 1}, [shared, shared, {"k": shared}],
             {f"k{i}": [i, (i, i)] for i in range(3000)}]
    for obj in cases:  # the STOP that returns the object counts one level more
        assert pickle_depth(io.BytesIO(pickle.dumps(obj, protocol=protocol)), 1000) == _nesting(obj) + 1, obj


def _torch_file_with_pickle(path: Path, pkl: bytes) -> Path:
    buf = io.BytesIO()
    torch.save({}, buf)
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            zout.writestr(zipfile.ZipInfo(name), pkl if name.endswith("data.pkl") else zin.read(name))
    return path


def test_a_dict_keyed_by_deeply_nested_tuples_is_refused_not_a_crash(tmp_path) -> None:
    """200 KB of nested tuples as a dict key: torch's unpickler hashes the key in C without a
    limit and the process dies (SIGSEGV); the reader measures the nesting first."""
    path = _torch_file_with_pickle(tmp_path / "deep.pt", b"\x80\x02}" + b")" + b"\x85" * 200_000 + b"K\x01s.")
    code = ("from geohead.pretrained import PretrainedError, load_pretrained\n"
            f"try:\n    load_pretrained({str(path)!r})\nexcept PretrainedError as e:\n    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stderr[-500:]
    assert "refused:" in done.stdout and "nests its objects more than 100 levels deep" in done.stdout


def test_an_expanded_tensor_is_refused_before_a_backbone_is_built(tmp_path, monkeypatch) -> None:
    """A ResNet whose every tensor is one stored element expanded to 1,024 channels (40 KB on
    disk, 1.5 GB built): refused when read."""
    with torch.device("meta"):
        import timm

        shell = timm.create_model("resnet18", num_classes=0, channels=[1024] * 4)
    state = {k: z(1, dtype=v.dtype).expand(*v.shape) if v.dim() else z((), dtype=v.dtype)
             for k, v in shell.state_dict().items()}
    torch.save(state, tmp_path / "wide.pt")
    built = []
    monkeypatch.setattr("geohead.pretrained.backbone._create", lambda *a: built.append(a))
    with pytest.raises(PretrainedError, match=r"holds a tensor of shape \(64, 3, 7, 7\) stored in 4 bytes \(an expanded"):
        load_pretrained(tmp_path / "wide.pt", require_head=False)
    assert not built


def test_zero_element_tensors_are_checked_on_the_meta_device_first(tmp_path, monkeypatch) -> None:
    """Safetensors of (1024, 0, 3, 3) convs: their shapes imply a 1,024-channel ResNet that the
    tensors do not fill; no layer of it is made in memory."""
    save_file({"conv1.weight": z(64, 3, 7, 7), **{f"layer{i}.0.conv1.weight": z(1024, 0, 3, 3) for i in range(1, 5)}},
              str(tmp_path / "zero.safetensors"))
    made = []
    real = torch.nn.Conv2d.reset_parameters
    monkeypatch.setattr(torch.nn.Conv2d, "reset_parameters", lambda self: made.append(self.weight.device.type) or real(self))
    with pytest.raises(PretrainedError, match="does not fit 'resnet18'"):
        load_pretrained(tmp_path / "zero.safetensors", require_head=False)
    assert made and set(made) == {"meta"}


def _vit_state(side: int, dim: int = 8, patch: int = 16) -> dict[str, torch.Tensor]:
    return {"patch_embed.proj.weight": z(dim, 3, patch, patch), "patch_embed.proj.bias": z(dim),
            "pos_embed": z(1, 1 + side * side, dim), "cls_token": z(1, 1, dim), "blocks.0.mlp.fc1.weight": z(4 * dim, dim)}


def test_a_vit_input_size_read_from_its_weights_is_bounded(tmp_path) -> None:
    """96 × 96 patches of 16 pixels: an input of 1,536 pixels, past the 1,024 bound every other
    way of giving a size has; refused before the backbone is built."""
    torch.save(_vit_state(96), tmp_path / "vit.pt")
    with pytest.raises(PretrainedError, match=r"input size 1536 \(weights\) is outside 1 to 1,024"):
        load_pretrained(tmp_path / "vit.pt", require_head=False)
    with pytest.raises(PretrainedError, match=r"input size 4096 \(given\) is outside 1 to 1,024"):
        load_pretrained(tmp_path / "vit.pt", require_head=False, model_args={"img_size": 4096})


def test_a_list_shared_many_times_counts_every_entry(tmp_path) -> None:
    """``[A] * n`` with ``A = [None] * n``: 3,501 lists in 30 KB, 12 million entries walked."""
    a = [None] * 3500
    torch.save({"x": [a] * 3500}, tmp_path / "wide.pt")
    with pytest.raises(PretrainedError, match=f"more than {MAX_ITEMS:,} dicts, lists and entries"):
        load_pretrained(tmp_path / "wide.pt", require_head=False)


def _with_backbone(extra: dict) -> dict:
    bb = {f"backbone.{k}": v.clone() for k, v in _resnet(True, 0).state_dict().items()}
    return {**bb, **extra}


@pytest.mark.parametrize("name, obj, match", [
    ("resnet_partial", {"conv1.weight": z(8, 3, 3, 3), "layer1.0.conv1.weight": z(8, 8, 3, 3)},
     r"look like a ResNet's but do not form one \(KeyError: 'layer2.0.conv1.weight'\)"),
    ("vit_no_blocks", {"patch_embed.proj.weight": z(8, 3, 4, 4), "pos_embed": z(1, 4, 8)},
     r"look like a ViT's but do not form one \(KeyError"),
    ("vit_pos_1d", {"patch_embed.proj.weight": z(8, 3, 4, 4), "pos_embed": z(5)}, r"look like a ViT's .*IndexError"),
    ("int_key", {**_with_backbone({}), 0: z(1)}, "no state dict found"),
    ("head_bias", _with_backbone({"projection_head.layers.0.weight": z(32, 128), "projection_head.layers.0.bias": z(7)}),
     r"not expressible as a GeometricHead: its tensors do not form one \(RuntimeError"),
    ("head_norm", _with_backbone({"projection_head.layers.0.weight": z(32, 128), "projection_head.layers.1.weight": z(8),
                                  "projection_head.layers.1.bias": z(8), "projection_head.layers.3.weight": z(16, 32)}),
     r"its tensors do not form one \(RuntimeError"),
    ("proto_1d", _with_backbone({"head.mlp.0.weight": z(32, 128), "head.mlp.0.bias": z(32), "head.last_layer.weight": z(32)}),
     r"its tensors do not form one \(IndexError"),
])
def test_tensors_that_do_not_form_their_model_are_a_pretrained_error(tmp_path, name, obj, match) -> None:
    torch.save(obj, tmp_path / f"{name}.pt")
    with pytest.raises(PretrainedError, match=match):
        load_pretrained(tmp_path / f"{name}.pt")


def test_a_tensor_named_student_is_not_mistaken_for_dino_s_dict(tmp_path) -> None:
    save_file({"student": z(3), "teacher": z(3)}, str(tmp_path / "s.safetensors"))
    with pytest.raises(PretrainedError, match="'student'/'teacher' hold no tensors"):
        load_pretrained(tmp_path / "s.safetensors")


def test_the_command_line_exits_2_for_a_crafted_file(tmp_path) -> None:
    from click.testing import CliRunner

    from geohead.cli import main

    torch.save(_vit_state(96), tmp_path / "vit.pt")
    result = CliRunner().invoke(main, ["export", str(tmp_path / "vit.pt"), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert "outside 1 to 1,024" in result.output and not (tmp_path / "out").exists()


def test_a_pipe_given_as_the_checkpoint_is_refused_unopened(tmp_path) -> None:
    """Opening a FIFO to read its first bytes waits for a writer for ever."""
    fifo = tmp_path / "model.pt"
    os.mkfifo(fifo)
    code = ("from geohead.pretrained import PretrainedError, load_pretrained\n"
            f"try:\n    load_pretrained({str(fifo)!r})\nexcept PretrainedError as e:\n    print('refused:', e)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert "refused:" in done.stdout and "not a regular file (a pipe, device or socket)" in done.stdout, done.stderr[-300:]
