"""Files from others run no code, read nothing outside their folder, reach no network.

Crafted head specs, exports and checkpoints: each is refused with geohead's own error naming the
value, without importing a module the file names, without timm reading a path the file names,
without a network call (timm.create_model is watched: it is never called with loader arguments).
"""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

from geohead.training.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from geohead.errors import SpecError
from geohead.export import ExportError, export_backbone, load_backbone, load_head
from geohead.heads import GeometricHead, HeadSpec, register_activation
from tiny_runs import tiny_run

PWN = "import pathlib\npathlib.Path(__file__).with_name('PWNED').write_text('ran')\nimport torch\nclass Evil(torch.nn.Module):\n    pass\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory, "barlow")


@pytest.fixture(scope="module")
def export_dir(run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("untrusted") / "export"
    export_backbone(run, out, with_head=True)
    return out


@pytest.fixture()
def copy_export(export_dir, tmp_path) -> Path:
    out = tmp_path / "export"
    shutil.copytree(export_dir, out)
    return out


@pytest.fixture()
def pwn(tmp_path, monkeypatch) -> Path:
    """A module ``pwn_geohead`` importable from ``tmp_path`` that leaves a PWNED file when imported."""
    (tmp_path / "pwn_geohead.py").write_text(PWN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    assert "pwn_geohead" not in sys.modules
    assert not (tmp_path / "PWNED").exists(), "a module named by a file was imported"


@pytest.fixture()
def timm_calls(monkeypatch) -> list[dict]:
    """Every timm.create_model call's arguments (the call still happens)."""
    import timm

    calls: list[dict] = []
    real = timm.create_model

    def watched(name, *args, **kwargs):
        calls.append({"name": name, **kwargs})
        return real(name, *args, **kwargs)

    monkeypatch.setattr(timm, "create_model", watched)
    return calls


def _edit_json(path: Path, edit) -> None:
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))


# ---------------------------------------------------------------------- activations: never imported
@pytest.mark.parametrize("name", ["pwn_geohead:Evil", "pwn_geohead:nothing", "this:Nope"])
def test_spec_text_naming_a_module_is_refused_without_importing_it(pwn, capsys, name) -> None:
    text = json.dumps({"in_dim": 8, "out_dim": 4, "activation": name})
    with pytest.raises(SpecError, match="unknown activation") as err:
        HeadSpec.from_json(text)
    assert name in str(err.value) and "register_activation" in str(err.value)
    assert "Zen of Python" not in capsys.readouterr().out  # `import this` prints it


def test_head_json_naming_a_module_beside_the_export_is_refused(pwn, copy_export) -> None:
    _edit_json(copy_export / "head.json", lambda d: d.update(activation="pwn_geohead:Evil"))
    with pytest.raises(ExportError, match="pwn_geohead:Evil"):
        load_head(copy_export, verify=False)
    with pytest.raises(ExportError, match="fail their checksum"):
        load_head(copy_export)


def test_checkpoint_head_spec_naming_a_module_is_refused_by_load_and_export(pwn, run, tmp_path) -> None:
    from geohead.training.model import load_trained

    ck = load_checkpoint(run)
    meta = dict(ck.meta)
    meta["head_spec"] = {**meta["head_spec"], "activation": "pwn_geohead:Evil"}
    bad = save_checkpoint(tmp_path / "bad.ckpt", ck.tensors, meta)  # a valid checksum: crafted, not corrupted
    with pytest.raises(ValueError, match="pwn_geohead:Evil"):
        load_trained(bad)
    with pytest.raises(ExportError, match="head spec is not one geohead loads.*pwn_geohead:Evil"):
        export_backbone(bad, tmp_path / "out", with_head=True)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("key", ["head_spec", "predictor_spec"])
def test_a_checkpoint_spec_naming_a_file_does_not_read_it(run, tmp_path, monkeypatch, key) -> None:
    from geohead.training.model import load_trained

    secret = tmp_path / "creds.json"
    secret.write_text(json.dumps({"aws_secret_key": 1, "in_dim": 8}))
    monkeypatch.chdir(tmp_path)
    ck = load_checkpoint(run)
    bad = save_checkpoint(tmp_path / "bad.ckpt", ck.tensors, {**ck.meta, key: "creds.json"})
    with pytest.raises(ValueError, match=f"{key} is a str, not a head spec's table") as err:
        load_trained(bad)
    assert "aws_secret_key" not in str(err.value)
    if key == "head_spec":  # an export copies the predictor's spec as provenance text, never opens it
        with pytest.raises(ExportError, match="must be a JSON object, got str") as err:
            export_backbone(bad, tmp_path / "out", with_head=True)
        assert "aws_secret_key" not in str(err.value) and not (tmp_path / "out").exists()


def test_a_header_describing_a_huge_backbone_is_refused_before_it_is_built(tmp_path_factory, tmp_path, monkeypatch) -> None:
    """The header's ViT (depth and width each within their bounds, 100M+ parameters together)
    is checked on the meta device against the file's tensors before anything is allocated."""
    from geohead.training.model import load_trained

    vit = tiny_run(tmp_path_factory, "barlow", "vit_tiny_cifar", ("optim.batch_size=8", "optim.max_steps=1"))
    ck = load_checkpoint(vit)
    arch = ck.meta["backbone"]
    backbone = {**arch, "model_args": {**arch["model_args"], "embed_dim": 1536, "depth": 48}}
    bad = save_checkpoint(tmp_path / "big.ckpt", ck.tensors, {**ck.meta, "backbone": backbone})
    real = torch.nn.Linear.reset_parameters
    built = []
    monkeypatch.setattr(torch.nn.Linear, "reset_parameters",
                        lambda self: built.append(self.weight.device.type) or real(self))
    with pytest.raises(CheckpointError, match=r"'model' tensors do not fit the model its header describes \(missing: \['backbone\.blocks\.12\."):
        load_trained(bad)
    assert built and set(built) == {"meta"}  # no Linear layer was made in memory
    assert load_trained(vit).model.backbone.embed_dim == 192  # the run's own checkpoint loads


def test_python_types_still_work_and_register_by_name() -> None:
    class Shifted(torch.nn.Module):
        def forward(self, x):
            return torch.tanh(x) + 0.1

    spec = HeadSpec(6, 3, hidden_dim=5, depth=2, activation=Shifted)  # a type, in Python: allowed
    assert spec.activation.endswith(":test_python_types_still_work_and_register_by_name.<locals>.Shifted")
    again = HeadSpec.from_json(spec.to_json())  # this process registered it: found, not imported
    assert any(isinstance(m, Shifted) for m in GeometricHead.from_spec(again).modules())
    assert register_activation("my_shifted", Shifted) == "my_shifted"
    assert HeadSpec(6, 3, depth=2, activation="my_shifted").activation == "my_shifted"
    with pytest.raises(SpecError, match="built-in"):
        register_activation("gelu", Shifted)


# ---------------------------------------------------------------------- config.json: checked model_args
@pytest.mark.parametrize("edit, needle", [
    (lambda b: b["model_args"].update(checkpoint_path="../../etc/passwd"), "checkpoint_path"),
    (lambda b: b["model_args"].update(pretrained=True), "pretrained"),
    (lambda b: b["model_args"].update(pretrained_cfg_overlay={"file": "/etc/passwd"}), "pretrained_cfg_overlay"),
    (lambda b: b["model_args"].update(cache_dir="/tmp/x"), "cache_dir"),
    (lambda b: b["model_args"].update(act_layer="../../x"), "act_layer"),
    (lambda b: b["model_args"].update(stem_width=2 ** 40), "stem_width"),
    (lambda b: b.update(model_args="oops"), "oops"),
    (lambda b: b.update(architecture="hf-hub:timm/resnet18.a1_in1k"), "hf-hub"),
    (lambda b: b.update(architecture="local-dir:/etc"), "local-dir"),
    (lambda b: b.update(img_size="32"), "img_size"),
])
def test_config_json_backbone_is_checked_before_timm_builds_it(copy_export, timm_calls, edit, needle) -> None:
    _edit_json(copy_export / "config.json", lambda d: edit(d["geohead"]["backbone"]))
    with pytest.raises(ExportError, match="cannot rebuild backbone") as err:
        load_backbone(copy_export, verify=False)
    assert needle in str(err.value)
    assert timm_calls == []  # refused before timm saw anything


def test_a_weights_file_linking_outside_the_folder_is_refused(copy_export, tmp_path) -> None:
    outside = tmp_path / "elsewhere.safetensors"
    shutil.move(copy_export / "model.safetensors", outside)
    (copy_export / "model.safetensors").symlink_to(outside)
    with pytest.raises(ExportError, match="is a symbolic link to .*elsewhere.safetensors.*, outside"):
        load_backbone(copy_export)


def test_load_backbone_builds_with_pretrained_false_only(export_dir, timm_calls) -> None:
    load_backbone(export_dir)
    assert timm_calls and all(c.get("pretrained") is False and "checkpoint_path" not in c for c in timm_calls)


# ---------------------------------------------------------------------- the spec is covered by the checksum
def test_an_edited_head_json_fails_the_checksum(copy_export) -> None:
    load_head(copy_export)  # the untouched export loads
    _edit_json(copy_export / "head.json", lambda d: d.update(activation="gelu" if d["activation"] != "gelu" else "silu"))
    with pytest.raises(ExportError, match="head or its spec was edited"):
        load_head(copy_export)


def test_a_flipped_bit_in_a_checkpoint_is_detected(run, tmp_path) -> None:
    path = tmp_path / "last.safetensors"
    shutil.copy(run / "last.safetensors", path)
    load_checkpoint(path)
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01  # one mantissa bit of the last tensor's last value
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="fails its checksum"):
        load_checkpoint(path)


def test_an_edited_checkpoint_header_is_detected(run, tmp_path) -> None:
    path = tmp_path / "last.safetensors"
    data = (run / "last.safetensors").read_bytes()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    meta = header["__metadata__"]
    meta["objective"] = meta["objective"].replace("barlow", "simclr")
    body = json.dumps(header, separators=(",", ":")).encode()
    body += b" " * (-len(body) % 8)
    path.write_bytes(len(body).to_bytes(8, "little") + body + data[8 + n:])
    with pytest.raises(CheckpointError, match="fails its checksum"):
        load_checkpoint(path)
