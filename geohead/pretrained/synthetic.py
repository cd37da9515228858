"""Small checkpoints written in exactly the layouts other libraries write (for tests and
``benchmarks/paper/pretrained.py``): random weights, small widths, BatchNorm running statistics
away from their initial values so that the head checks are not trivially passed.

Each writer returns the path it wrote and the reference head as a plain ``nn.Module`` in the
library's own structure (the documented forward), so a test can compare the rebuilt head with it.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

import torch
from torch import nn

Writer = Callable[[Path], tuple[Path, nn.Module]]


def _randomise_(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                if m.affine:
                    m.weight.copy_(torch.rand(m.num_features, generator=g) + 0.5)
                    m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
    return module.eval()


def _mlp(dims: list[int], act: type[nn.Module], bn: bool, bias: bool, last_bias: bool, seed: int) -> nn.Sequential:
    """``Linear, (BN), act`` per hidden layer, then ``Linear`` (the official projectors' shape)."""
    torch.manual_seed(seed)
    layers: list[nn.Module] = []
    for i in range(len(dims) - 2):
        layers.append(nn.Linear(dims[i], dims[i + 1], bias=bias))
        if bn:
            layers.append(nn.BatchNorm1d(dims[i + 1]))
        layers.append(act())
    layers.append(nn.Linear(dims[-2], dims[-1], bias=last_bias))
    return _randomise_(nn.Sequential(*layers), seed)


def _resnet(cifar: bool, seed: int) -> nn.Module:
    """A small timm ResNet-18 (16-128 channels; torchvision's key names), classifier-free."""
    from geohead.backbones import create_backbone

    torch.manual_seed(seed)
    return create_backbone("resnet18_cifar" if cifar else "resnet18_w16", img_size=32, channels_last=False,
                           channels=[16, 32, 64, 128], stem_width=16).eval()


def _prefixed(prefix: str, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {prefix + k: v for k, v in state.items()}


class DINOHeadRef(nn.Module):
    """DINO's ``DINOHead`` (use_bn=False, nlayers=3): ``mlp`` -> ``normalize`` -> weight-normed ``last_layer``."""

    def __init__(self, mlp: nn.Sequential, g: torch.Tensor, v: torch.Tensor) -> None:
        super().__init__()
        self.mlp, self.g, self.v = mlp, g, v

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.normalize(self.mlp(x), dim=-1, p=2)
        return nn.functional.linear(x, self.g * self.v / self.v.norm(dim=1, keepdim=True))


def write_dino(folder: Path) -> tuple[Path, nn.Module]:
    """DINO's ``checkpoint.pth``: ``student``/``teacher`` (DDP ``module.`` on the student), ``args``
    (an argparse.Namespace), ``dino_loss``, ``epoch``; a ViT (16 px, 4 px patches, 64-d, 2 blocks)."""
    import timm

    torch.manual_seed(0)
    vit = timm.create_model("vit_small_patch16_224", img_size=16, patch_size=4, embed_dim=64, depth=2, num_heads=1,
                            num_classes=0).eval()
    mlp = _mlp([64, 48, 48, 16], nn.GELU, bn=False, bias=True, last_bias=True, seed=1)
    v = torch.randn(32, 16, generator=torch.Generator().manual_seed(2))
    g = torch.ones(32, 1)
    head = {**_prefixed("mlp.", mlp.state_dict()), "last_layer.weight_g": g, "last_layer.weight_v": v}
    student = {**_prefixed("module.backbone.", vit.state_dict()), **_prefixed("module.head.", head)}
    ema = {k: t + 0.001 if t.is_floating_point() else t for k, t in vit.state_dict().items()}  # the EMA differs
    teacher = {**_prefixed("backbone.", ema), **_prefixed("head.", {k: t + 0.01 for k, t in head.items()})}
    args = argparse.Namespace(arch="vit_small", patch_size=4, out_dim=32, norm_last_layer=True, use_bn_in_head=False)
    path = folder / "dino_checkpoint.pth"
    torch.save({"student": student, "teacher": teacher, "args": args, "epoch": 3, "dino_loss": {"center": torch.zeros(1, 32)}}, path)
    return path, DINOHeadRef(mlp, g, v).eval()


def write_vicreg(folder: Path) -> tuple[Path, nn.Module]:
    """VICReg's ``model.pth``: ``{"model", "optimizer", "epoch"}``, DDP keys ``module.backbone.*`` /
    ``module.projector.*``; the projector's hidden Linears have biases, the last none."""
    bb = _resnet(False, 3)
    proj = _mlp([128, 64, 64, 64], nn.ReLU, bn=True, bias=True, last_bias=False, seed=4)
    state = {**_prefixed("module.backbone.", bb.state_dict()), **_prefixed("module.projector.", proj.state_dict())}
    path = folder / "vicreg_model.pth"
    torch.save({"model": state, "optimizer": {"state": {}, "param_groups": []}, "epoch": 5}, path)
    return path, proj


def write_barlowtwins(folder: Path) -> tuple[Path, nn.Module]:
    """Barlow Twins' ``checkpoint.pth``: ``{"epoch", "model", "optimizer"}``; the projector without
    biases and the loss's ``bn`` (BatchNorm1d, affine=False) beside it."""
    bb = _resnet(False, 5)
    proj = _mlp([128, 64, 64, 64], nn.ReLU, bn=True, bias=False, last_bias=False, seed=6)
    bn = _randomise_(nn.BatchNorm1d(64, affine=False), 7)
    state = {**_prefixed("module.backbone.", bb.state_dict()), **_prefixed("module.projector.", proj.state_dict()),
             **_prefixed("module.bn.", bn.state_dict())}
    path = folder / "barlowtwins_checkpoint.pth"
    torch.save({"epoch": 2, "model": state, "optimizer": {"state": {}, "param_groups": []}}, path)
    return path, proj


def write_solo_learn(folder: Path) -> tuple[Path, nn.Module]:
    """solo-learn's Lightning ``.ckpt``: ``state_dict`` with ``backbone.*`` (CIFAR stem),
    ``projector.N.*`` and the online ``classifier.*``; ``hyper_parameters`` naming the method."""
    bb = _resnet(True, 8)
    proj = _mlp([128, 64, 64, 32], nn.ReLU, bn=True, bias=True, last_bias=True, seed=9)
    clf = nn.Linear(128, 10)
    state = {**_prefixed("backbone.", bb.state_dict()), **_prefixed("projector.", proj.state_dict()),
             **_prefixed("classifier.", clf.state_dict())}
    path = folder / "solo_barlow.ckpt"
    torch.save({"state_dict": state, "pytorch-lightning_version": "2.2.0", "epoch": 1, "global_step": 10,
                "hyper_parameters": {"method": "barlow_twins", "backbone": "resnet18"}}, path)
    return path, proj


def write_lightly(folder: Path, lightning: bool = True) -> tuple[Path, nn.Module]:
    """A lightly model (``backbone`` + ``projection_head = BarlowTwinsProjectionHead``) saved by
    Lightning (``.ckpt``) or as a plain ``state_dict`` (``.pt``)."""
    from lightly.models.modules.heads import BarlowTwinsProjectionHead

    bb = _resnet(False, 10)
    torch.manual_seed(11)
    head = _randomise_(BarlowTwinsProjectionHead(128, 64, 32), 11)
    state = {**_prefixed("backbone.", bb.state_dict()), **_prefixed("projection_head.", head.state_dict())}
    if lightning:
        path = folder / "lightly_barlow.ckpt"
        torch.save({"state_dict": state, "pytorch-lightning_version": "2.2.0", "epoch": 0, "global_step": 4}, path)
    else:
        path = folder / "lightly_barlow_state_dict.pt"
        torch.save(state, path)
    return path, head


#: The synthetic layouts by name, with the method each implies.
WRITERS: dict[str, tuple[Writer, str]] = {
    "dino": (write_dino, "dino"),
    "vicreg": (write_vicreg, "vicreg"),
    "barlowtwins": (write_barlowtwins, "barlow"),
    "solo-learn": (write_solo_learn, "barlow"),
    "lightly (Lightning .ckpt)": (lambda f: write_lightly(f, True), "barlow"),
    "lightly (state_dict)": (lambda f: write_lightly(f, False), "barlow"),
}

__all__ = ["DINOHeadRef", "WRITERS", "write_barlowtwins", "write_dino", "write_lightly", "write_solo_learn", "write_vicreg"]
