"""One real training step (``geohead.training.loop.setup`` + ``batch_views`` + ``train_step``) under a
chosen device / precision / compile setting, and the distance between two such steps.

Shared by the precision tests on CPU (tests/test_precision.py) and on CUDA (tests/test_cuda.py):
two settings built from the same seed see the same initial weights and the same views, so their
losses and gradients differ only by the arithmetic (bf16 rounding, compiled kernels, device).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]

#: bf16 autocast vs fp32 at step 0 of :func:`tiny_config` (batch 64), over all parameters:
#: |loss_a - loss_b| <= BF16_LOSS_RTOL |loss_b|, ||g_a - g_b|| <= BF16_GRAD_RTOL ||g_b|| and
#: cos(g_a, g_b) >= BF16_GRAD_COS. Measured on CPU (torch 2.14.1): loss 1.2e-3, gradients 0.108,
#: cosine 0.994. bf16 rounding (2^-8) is amplified through the backbone's BatchNorm backward: the
#: head's gradients differ by 4 %, the stem's by up to 26 % at batch 32 (11 % at 64), so the
#: bound is on the whole gradient, not per tensor.
BF16_LOSS_RTOL = 1e-2
BF16_GRAD_RTOL = 0.2
BF16_GRAD_COS = 0.98
#: compiled vs eager in fp32 (TF32 off): the same arithmetic up to reassociation.
FP32_LOSS_RTOL = 1e-5
FP32_GRAD_RTOL = 1e-4
FP32_GRAD_COS = 1 - 1e-8


@dataclass
class StepResult:
    loss: float
    grads: dict[str, torch.Tensor]  # float64 on the CPU
    compiled: bool
    autocast: bool


def tiny_config(out: Path, device: str = "cpu", precision: str = "fp32", compile: bool = False,
                backbone: str = "resnet18_w16", batch: int = 64, width: int = 64, backbone_args: dict | None = None):
    """Barlow Twins on built-in shapes, the CPU recipe's head narrowed to ``width``."""
    from geohead.training.config import config_from_dict

    return config_from_dict({
        "objective": "barlow", "seed": 0, "device": device, "precision": precision, "compile": compile,
        "out": str(out),
        "data": {"name": "shapes", "n_train": 4 * batch, "view_args": {"hue": 0.5}},
        "backbone": {"name": backbone, "args": dict(backbone_args or {})},
        "head": {"smooth": True, "spec": {"hidden_dim": width, "out_dim": width}},
        "optim": {"name": "lars", "lr": 0.3, "batch_size": batch, "max_steps": 1, "warmup_epochs": 0},
        "track": {"progress": False, "monitor_every": 0},
        "probe": {"enabled": False},
    })


def one_step(cfg) -> StepResult:
    """Step 0 of ``cfg`` through geohead's own setup / views / train_step; loss and gradients."""
    from geohead.training.loop import batch_views, setup, train_step, whiten_head

    run = setup(cfg, 0, 1)
    perm = torch.randperm(len(run.data), generator=torch.Generator().manual_seed(cfg.seed * 100_003)).to(run.device)
    run.model.train()
    views = batch_views(run, 0, perm)
    if run.head_spec.whiten is not None:
        whiten_head(run, views)
    loss, _, _ = train_step(run, 0, views, run.base_lr)
    grads = {n: p.grad.detach().double().cpu() for n, p in run.model.named_parameters() if p.grad is not None}
    compiled = run.train_model is not run.model
    return StepResult(float(loss.detach()), grads, compiled, bool(run.autocast._enabled))


def distance(a: StepResult, b: StepResult) -> tuple[float, float, float]:
    """(relative loss difference, relative gradient difference, gradient cosine) of a vs b, the
    gradients of all parameters concatenated."""
    assert a.grads.keys() == b.grads.keys()
    ga = torch.cat([a.grads[k].flatten() for k in sorted(a.grads)])
    gb = torch.cat([b.grads[k].flatten() for k in sorted(b.grads)])
    cos = float(torch.dot(ga, gb) / (ga.norm() * gb.norm()))
    return abs(a.loss - b.loss) / abs(b.loss), float((ga - gb).norm() / gb.norm()), cos


def assert_close(a: StepResult, b: StepResult, loss_rtol: float, grad_rtol: float, grad_cos: float) -> None:
    """a equals b within the stated tolerances (message: the three measured distances)."""
    loss_rel, grad_rel, cos = distance(a, b)
    msg = f"loss rel {loss_rel:.2e} (<= {loss_rtol}), grad rel {grad_rel:.2e} (<= {grad_rtol}), cos {cos:.6f} (>= {grad_cos})"
    assert loss_rel <= loss_rtol and grad_rel <= grad_rtol and cos >= grad_cos, msg
