"""Export of timm backbones geohead did not build: inferred arguments, the bit-for-bit check, timm-only loading."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
from click.testing import CliRunner
from safetensors.torch import load_file, save_file

from geohead.cli import main
from geohead.export import ExportError, export_backbone, load_backbone

pytestmark = pytest.mark.usefixtures("one_thread")
WORKER = Path(__file__).parent / "workers" / "timm_load.py"


def tiny_vit(**kw) -> torch.nn.Module:
    """A plain timm ViT (vit_tiny_patch16_224 at 32 px with 4x4 patches, 2 blocks), with a classifier."""
    torch.manual_seed(0)
    return timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=4, depth=2, num_classes=7, **kw).eval()


def x_batch() -> torch.Tensor:
    return torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def timm_only(tmp_path: Path, x: torch.Tensor, dirs: list[Path]) -> tuple[list, dict]:
    """Features of ``dirs`` loaded by ``timm.create_model("local-dir:DIR", pretrained=True,
    num_classes=0)`` in a ``python -I`` process in which importing geohead raises."""
    inp, out = tmp_path / "x.safetensors", tmp_path / "feats.safetensors"
    save_file({"x": x.contiguous()}, str(inp))
    res = subprocess.run([sys.executable, "-I", str(WORKER), str(inp), str(out), *map(str, dirs)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    info = json.loads(res.stdout.strip().splitlines()[-1])
    assert info["geohead_imported"] is False and info["errors"] == {}
    feats = load_file(str(out))
    return [feats[f"f{i}"] for i in range(len(dirs))], info


def pre_logits(model: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.forward_head(model.forward_features(x), pre_logits=True)


def test_plain_timm_vit_loads_with_timm_alone_bit_for_bit(tmp_path):
    vit = tiny_vit()
    with pytest.warns(UserWarning, match=r"timm default mean/std \(ImageNet's\).*--mean"):
        res = export_backbone(vit, tmp_path / "vit")  # nothing says how it was normalised: a warning
    cfg = json.loads(res.config.read_text())
    assert cfg["architecture"] == "vit_tiny_patch16_224" and res.timm_loadable
    args = cfg["model_args"]
    assert (args["img_size"], args["patch_size"], args["embed_dim"], args["depth"], args["num_heads"]) == (32, 4, 192, 2, 3)
    assert not any(k.startswith("head.") for k in load_file(str(res.weights)))  # the classifier is left out
    x = x_batch()
    (got,), info = timm_only(tmp_path, x, [res.out_dir])
    assert got.shape == (5, 192) and torch.equal(got, pre_logits(vit, x))
    assert info["data_config"][str(res.out_dir)]["input_size"] == [3, 32, 32]
    assert torch.equal(load_backbone(res.out_dir)(x), pre_logits(vit, x))


def test_plain_timm_resnet_in_channels_last(tmp_path):
    torch.manual_seed(0)
    resnet = timm.create_model("resnet18", channels=[8, 16, 32, 64], num_classes=0)
    resnet = resnet.to(memory_format=torch.channels_last).eval()
    res = export_backbone(resnet, tmp_path / "r", img_size=32, mean=[0.5] * 3, std=[0.25] * 3)
    cfg = json.loads(res.config.read_text())
    assert cfg["model_args"]["channels"] == [8, 16, 32, 64] and cfg["geohead"]["backbone"]["channels_last"] is True
    x = x_batch()
    back = load_backbone(res.out_dir)
    with torch.no_grad():
        assert torch.equal(back(x), resnet(x))


def test_arguments_that_cannot_be_inferred_are_named(tmp_path):
    class Odd(torch.nn.Module):
        pass

    with pytest.raises(ExportError, match="architecture="):
        export_backbone(Odd(), tmp_path / "a")
    # a model whose arguments geohead does not infer (a ConvNeXt with custom widths): the error
    # names the argument to pass, and passing it works
    torch.manual_seed(0)
    convnext = timm.create_model("convnext_atto", dims=(8, 16, 32, 64), num_classes=0).eval()
    with pytest.raises(ExportError, match=r"model_args=\{\.\.\.\}") as err:
        export_backbone(convnext, tmp_path / "c", img_size=32)
    assert "stages" in str(err.value) or "shape mismatch" in str(err.value)
    assert not (tmp_path / "c").exists()  # nothing written before the check passes
    res = export_backbone(convnext, tmp_path / "c", img_size=32, model_args={"dims": [8, 16, 32, 64]}, mean=[0.5] * 3,
                          std=[0.25] * 3)
    with torch.no_grad():
        assert torch.equal(load_backbone(res.out_dir)(x_batch()), convnext(x_batch()))


def test_a_wrong_explicit_argument_fails_the_bit_for_bit_check(tmp_path):
    vit = tiny_vit()
    with pytest.raises(ExportError, match="other features than the model"):
        export_backbone(vit, tmp_path / "v", model_args={"num_heads": 6})  # same tensor shapes as 3 heads
    assert not (tmp_path / "v").exists()


def test_cli_exports_a_lightning_checkpoint_of_a_timm_backbone(tmp_path):
    vit = tiny_vit(global_pool="avg")
    ckpt = tmp_path / "lightly.ckpt"
    torch.save({"epoch": 3, "state_dict": {f"backbone.{k}": v for k, v in vit.state_dict().items()}
                | {"projection_head.layer.weight": torch.zeros(2, 2)}}, ckpt)
    args = ["export", str(ckpt), "--out", str(tmp_path / "e"), "--architecture", "vit_tiny_patch16_224",
            "--model-arg", "img_size=32", "--model-arg", "patch_size=4", "--model-arg", "depth=2",
            "--model-arg", "global_pool=avg"]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    x = x_batch()
    (got,), _ = timm_only(tmp_path, x, [tmp_path / "e"])
    assert torch.equal(got, pre_logits(vit, x))
    r = CliRunner().invoke(main, args[:6] + ["--out", str(tmp_path / "f")])  # depth and pool missing
    assert r.exit_code == 2 and "--model-arg" in r.output
