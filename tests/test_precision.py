"""bf16 autocast and torch.compile where they run on the CPU: the training step's reduced-precision
and compiled paths (geohead.training.loop.setup: ``precision``, ``compile``) against fp32 eager.

The same comparisons run on a GPU in tests/test_cuda.py (marked ``cuda``); tolerances are stated
in tests/step_compare.py.
"""
from __future__ import annotations

import functools
import os
import shutil

import pytest
import torch

from step_compare import (
    BF16_GRAD_COS, BF16_GRAD_RTOL, BF16_LOSS_RTOL, FP32_GRAD_COS, FP32_GRAD_RTOL, FP32_LOSS_RTOL, StepResult, assert_close,
    one_step, tiny_config,
)


@pytest.fixture(scope="module")
def fp32_step(tmp_path_factory):
    return one_step(tiny_config(tmp_path_factory.mktemp("fp32")))


def test_bf16_autocast_train_step_matches_fp32_on_cpu(fp32_step, tmp_path) -> None:
    bf16 = one_step(tiny_config(tmp_path, precision="bf16"))
    assert bf16.autocast and not fp32_step.autocast
    assert_close(bf16, fp32_step, BF16_LOSS_RTOL, BF16_GRAD_RTOL, BF16_GRAD_COS)
    # and bf16 really changed the arithmetic (a no-op autocast would give identical numbers)
    assert bf16.loss != fp32_step.loss


def test_precision_auto_is_fp32_on_cpu(fp32_step, tmp_path) -> None:
    auto = one_step(tiny_config(tmp_path, precision="auto"))
    assert not auto.autocast
    assert auto.loss == fp32_step.loss and all(torch.equal(auto.grads[k], fp32_step.grads[k]) for k in auto.grads)


def test_compiled_train_step_matches_eager_on_cpu(fp32_step, tmp_path, monkeypatch) -> None:
    """``compile=true`` wraps the model in torch.compile inside setup; the graph capture (dynamo)
    and the compiled backward (AOT autograd) are exercised with the ``aot_eager`` backend, which
    runs the captured graphs with eager kernels: the step must then be the eager step exactly.
    inductor's code generation is checked on a head below and on CUDA in tests/test_cuda.py
    (a CPU inductor build of the whole ResNet step takes ~95 s cold on 2 cores:
    tests/test_device_check.py's slow dry run does it)."""
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    try:
        compiled = one_step(tiny_config(tmp_path, compile=True))
    finally:
        torch._dynamo.reset()
    assert compiled.compiled and not fp32_step.compiled
    assert_close(compiled, fp32_step, FP32_LOSS_RTOL, FP32_GRAD_RTOL, FP32_GRAD_COS)


def _cxx() -> str | None:
    """The C++ compiler inductor's CPU backend would call (``$CXX``, else g++ / c++ / clang++)."""
    for name in filter(None, [os.environ.get("CXX"), "g++", "c++", "clang++"]):
        if shutil.which(name):
            return name
    return None


@pytest.mark.skipif(_cxx() is None, reason="inductor's CPU backend needs a C++ compiler (g++/c++/clang++ or $CXX); none on PATH")
def test_inductor_compiled_head_step_matches_eager_on_cpu() -> None:
    """A GeometricHead + Barlow Twins step compiled by inductor (forward and backward) equals eager:
    loss, every gradient and BatchNorm's running statistics (~30 s cold on 2 cores)."""
    import copy

    from geohead.heads import GeometricHead
    from geohead.objectives import get_objective

    torch.manual_seed(0)
    head = GeometricHead(16, 8, hidden_dim=32, depth=3, activation="silu", norm="batch")
    twin = copy.deepcopy(head)
    obj = get_objective("barlow")
    z1, z2 = torch.randn(2, 32, 16, generator=torch.Generator().manual_seed(1)).unbind(0)

    def step(model):
        loss = obj([model(z1), model(z2)])
        loss.backward()
        return loss.detach()

    try:
        compiled = torch.compile(twin)
        loss_c = step(compiled)
    finally:
        torch._dynamo.reset()
    loss_e = step(head)
    # the whole gradient (the last bias's is zero up to rounding: the loss standardises embeddings)
    grads_c = {n: p.grad.double() for n, p in twin.named_parameters()}
    grads_e = {n: p.grad.double() for n, p in head.named_parameters()}
    assert_close(StepResult(float(loss_c), grads_c, True, False), StepResult(float(loss_e), grads_e, False, False),
                 FP32_LOSS_RTOL, FP32_GRAD_RTOL, FP32_GRAD_COS)
    for (name, b), c in zip(head.named_buffers(), twin.buffers()):
        assert torch.allclose(c.float(), b.float(), rtol=1e-5, atol=1e-7), name
