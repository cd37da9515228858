"""timm backbones: output dimension, CIFAR stem, rebuild configs, timm local-dir loading, errors."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from geohead.backbones import (
    ALIASES,
    DEFAULT_BACKBONE,
    create_backbone,
    feature_dim,
    list_backbones,
    rebuild_backbone,
)

pytestmark = pytest.mark.usefixtures("one_thread")


def _shapes(m: nn.Module) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in m.state_dict().items()}


def test_default_backbone_is_timm_expressible(tmp_path: Path) -> None:
    import timm
    from timm.models import save_for_hf

    m = create_backbone().eval()
    cfg = m.geohead_config
    assert cfg["name"] == DEFAULT_BACKBONE and cfg["timm_loadable"] and not cfg["cifar_stem"]
    assert json.loads(json.dumps(cfg)) == cfg  # JSON-able as it is
    x = torch.randn(3, 3, 32, 32)
    out = m(x)
    assert out.shape == (3, m.num_features) == (3, cfg["num_features"])
    assert cfg["channels_last"] and m.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    # timm alone rebuilds it from the recorded arguments ...
    plain = timm.create_model(cfg["architecture"], num_classes=0, **cfg["model_args"])
    assert _shapes(plain) == _shapes(m)
    # ... and loads an exported copy with local-dir: (what the export issue will write; safetensors
    # refuses channels-last (non-contiguous) weights, so they go back to the default layout first)
    save_for_hf(m.to(memory_format=torch.contiguous_format), str(tmp_path), model_args=cfg["model_args"],
                safe_serialization=True)
    assert (tmp_path / "model.safetensors").is_file()
    loaded = timm.create_model(f"local-dir:{tmp_path}", num_classes=0, pretrained=True).eval()
    assert torch.allclose(loaded(x), out, atol=1e-5)


def test_resnet18_cifar_stem_and_rebuild(tmp_path: Path) -> None:
    import timm
    from timm.models import save_for_hf

    m = create_backbone("resnet18_cifar").eval()
    assert m.conv1.kernel_size == (3, 3) and m.conv1.stride == (1, 1) and m.conv1.padding == (1, 1)
    assert m.conv1.bias is None and isinstance(m.maxpool, nn.Identity)
    assert m.num_features == 512
    assert m.forward_features(torch.zeros(1, 3, 32, 32)).shape == (1, 512, 4, 4)  # stride 8, not 32
    cfg = json.loads(json.dumps(m.geohead_config))
    assert cfg["cifar_stem"] and not cfg["timm_loadable"]
    assert cfg["stem"]["conv1"]["kernel_size"] == 3 and cfg["stem"]["conv1"]["stride"] == 1
    assert cfg["stem"]["maxpool"] == "Identity"
    r = rebuild_backbone(cfg)
    assert _shapes(r) == _shapes(m)
    r.load_state_dict(m.state_dict())
    x = torch.randn(2, 3, 32, 32)
    assert torch.allclose(r.eval()(x), m(x), atol=1e-5)
    # why timm_loadable is False: timm's own resnet18 has the 7x7 stem, the weights do not fit
    save_for_hf(m.to(memory_format=torch.contiguous_format), str(tmp_path), model_args=cfg["model_args"],
                safe_serialization=True)
    with pytest.raises(RuntimeError, match="size mismatch"):
        timm.create_model(f"local-dir:{tmp_path}", num_classes=0, pretrained=True)


def test_vit_cifar_patch4_and_local_crops() -> None:
    m = create_backbone("vit_tiny_cifar").eval()
    assert m.patch_embed.patch_size == (4, 4)
    assert m.pos_embed.shape[1] == 64 + 1  # 8x8 patches + class token
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, 192)
    assert m(torch.zeros(2, 3, 16, 16)).shape == (2, 192)  # DINO's local crops
    cfg = m.geohead_config
    assert cfg["model_args"]["img_size"] == 32 and cfg["model_args"]["patch_size"] == 4
    assert cfg["timm_loadable"] and not cfg["channels_last"]


def test_generic_names_and_feature_dim() -> None:
    m = create_backbone("resnet10t", channels_last=False)  # any timm name, no img_size argument
    assert m.geohead_config["architecture"] == "resnet10t" and "img_size" not in m.geohead_config["model_args"]
    assert m(torch.zeros(2, 3, 32, 32)).shape == (2, m.num_features)
    w = create_backbone("resnet18_w16", channels=[8, 16, 32, 64], stem_width=8)  # overrides
    assert w.num_features == 64

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 7, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.conv(x).mean(dim=(2, 3))

    assert feature_dim(Tiny(), 16) == 7
    with pytest.raises(ValueError, match=r"expected \(B, d\)"):
        feature_dim(nn.Conv2d(3, 4, 3), 16)
    assert set(list_backbones()) == set(ALIASES)


def test_bad_names_and_sizes() -> None:
    with pytest.raises(ValueError, match=r"unknown backbone 'resnet18_cifr'; close matches: \['resnet18_cifar'"):
        create_backbone("resnet18_cifr")
    with pytest.raises(ValueError, match="unknown backbone 'no_such_net'"):
        create_backbone("no_such_net")
    with pytest.raises(ValueError, match="not a positive multiple of the patch size 4"):
        create_backbone("vit_tiny_cifar", img_size=30)
    with pytest.raises(ValueError, match="img_size must be a positive integer"):
        create_backbone("resnet18_w16", img_size=0)
    with pytest.raises(ValueError, match="cannot take img_size=2: RuntimeError"):
        create_backbone("convnext_atto", img_size=2)  # its 4x4 stride-4 stem needs at least 4 pixels
    with pytest.raises(ValueError, match="pretrained weights do not fit"):
        create_backbone("resnet18_cifar", pretrained=True)
    with pytest.raises(ValueError, match="single-conv stem"):
        create_backbone("resnet10t_cifar")  # deep stem: the CIFAR stem does not apply
    with pytest.raises(ValueError, match="not JSON-serialisable"):
        create_backbone("resnet18_w16", norm_layer=nn.BatchNorm2d)


def test_img_size_is_passed_by_the_constructor_signature(monkeypatch) -> None:
    import timm

    class Sized(nn.Module):
        def __init__(self, img_size: int = 224, **kwargs) -> None:
            super().__init__()

    class Unsized(nn.Module):
        def __init__(self, **kwargs) -> None:
            super().__init__()

    def fake(cls):
        def create_model(name, **kwargs):
            if "img_size" in kwargs:
                raise TypeError("some failure")  # the message never decides
            return cls()
        return create_model

    from geohead.backbones import _create_sized

    monkeypatch.setattr(timm, "create_model", fake(Unsized))
    model, took = _create_sized("x", 32, num_classes=0)
    assert isinstance(model, Unsized) and not took
    monkeypatch.setattr(timm, "create_model", fake(Sized))
    with pytest.raises(TypeError, match="some failure"):  # a class that takes img_size failed for real
        _create_sized("x", 32, num_classes=0)
    monkeypatch.undo()
    with pytest.raises(TypeError, match="bogus"):  # a bad argument is an error with or without img_size
        create_backbone("vit_tiny_cifar", bogus=1)
    with pytest.raises(TypeError, match="bogus"):
        create_backbone("resnet18_w16", bogus=1)
