"""geohead's CUDA paths on a GPU: bf16 autocast and torch.compile training steps against fp32, a
CUDA-trained run exported and loaded bit-exact on the CPU, ``geohead search --device cuda``, and
the geometry operators on CUDA against the CPU in float64.

Every test here is marked ``cuda`` and skips without CUDA. Run them with ``pytest -m cuda`` on a
GPU machine; ``python benchmarks/device_check.py --device cuda`` runs them first, then measures.
Tolerances are stated beside each comparison (and for the training steps in tests/step_compare.py).
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from step_compare import (
    BF16_GRAD_COS, BF16_GRAD_RTOL, BF16_LOSS_RTOL, FP32_GRAD_COS, FP32_GRAD_RTOL, FP32_LOSS_RTOL, assert_close, one_step,
    tiny_config,
)

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available(),
                       reason="needs CUDA (no GPU here); on a GPU: python benchmarks/device_check.py --device cuda"),
]
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def no_tf32():
    """fp32 references in true fp32: cuDNN convolutions use TF32 by default on Ampere and later."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
    """Step 0 of one tiny Barlow run in four settings on CUDA (same weights, same views)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    try:
        out = {}
        for name, precision, comp in (("fp32", "fp32", False), ("bf16", "bf16", False), ("fp32+compile", "fp32", True),
                                      ("bf16+compile", "bf16", True)):
            out[name] = one_step(tiny_config(tmp_path_factory.mktemp(name.replace("+", "_")), device="cuda",
                                             precision=precision, compile=comp))
            torch._dynamo.reset()
        return out
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def test_bf16_autocast_train_step_matches_fp32(steps) -> None:
    assert steps["bf16"].autocast and not steps["fp32"].autocast
    assert_close(steps["bf16"], steps["fp32"], BF16_LOSS_RTOL, BF16_GRAD_RTOL, BF16_GRAD_COS)


def test_precision_auto_is_bf16_on_cuda(tmp_path) -> None:
    # TrainConfig.precision="auto" means bf16 autocast on CUDA: the same step as precision="bf16"
    auto = one_step(tiny_config(tmp_path / "a", device="cuda", precision="auto"))
    assert auto.autocast
    assert_close(auto, one_step(tiny_config(tmp_path / "b", device="cuda", precision="bf16")), 1e-6, 1e-5, 1 - 1e-8)


def test_compiled_train_step_matches_eager(steps) -> None:
    assert steps["fp32+compile"].compiled and steps["bf16+compile"].compiled and not steps["fp32"].compiled
    # fp32: the same arithmetic up to the compiler's reassociation (TF32 off)
    assert_close(steps["fp32+compile"], steps["fp32"], FP32_LOSS_RTOL, FP32_GRAD_RTOL, FP32_GRAD_COS)
    # bf16 + compile (the GPU recipes' setting): within bf16's tolerance of fp32
    assert_close(steps["bf16+compile"], steps["fp32"], BF16_LOSS_RTOL, BF16_GRAD_RTOL, BF16_GRAD_COS)


def test_cuda_trained_run_exports_and_loads_bit_exact_on_cpu(tmp_path, no_tf32) -> None:
    from geohead.training.checkpoint import load_checkpoint
    from geohead.training.config import load_recipe
    from geohead.export import export_backbone, load_backbone
    from geohead.training.model import load_trained
    from geohead.training.loop import train
    from tiny_runs import TINY

    run = tmp_path / "run"
    # bf16 autocast (precision auto), channels-last ResNet, Hessian monitors: all on CUDA
    result = train(load_recipe(ROOT / "geohead" / "recipes" / "barlow_shapes_cpu.toml", TINY + [f'out="{run}"', 'device="cuda"']))
    assert next(result.model.parameters()).device.type == "cuda" and result.steps == 2
    ck = load_checkpoint(run)
    assert ck.meta["config"]["device"] == "cuda"
    exported = export_backbone(run, tmp_path / "export").out_dir
    backbone = load_backbone(exported, device="cpu").eval()
    live = {k: v.detach().cpu() for k, v in result.model.backbone.state_dict().items()}
    loaded = backbone.state_dict()
    assert loaded.keys() == live.keys()
    for k, v in loaded.items():  # bit-exact: the trained GPU tensors, the checkpoint and the export agree
        assert v.device.type == "cpu" and v.dtype == live[k].dtype and torch.equal(v, live[k]), k
        assert torch.equal(v, ck.tensors[f"model.backbone.{k}"]), k
    # on the CPU the export computes exactly what the checkpoint's own backbone computes
    x = torch.randn(8, 3, 32, 32, generator=torch.Generator().manual_seed(0)).contiguous(memory_format=torch.channels_last)
    ref = load_trained(run, device="cpu").model.backbone.eval()
    with torch.no_grad():
        assert torch.equal(backbone(x), ref(x))
        # and what the CUDA-trained module computes on the GPU, up to fp32 kernel differences
        gpu = result.model.backbone.eval()(x.cuda()).cpu()
        assert torch.allclose(backbone(x), gpu, rtol=1e-4, atol=1e-4)


def test_search_on_cuda_runs_two_trials(tmp_path) -> None:
    from click.testing import CliRunner

    from geohead.cli import main
    from geohead.search.outputs import read_trials_csv

    out = tmp_path / "search"
    torch.cuda.reset_peak_memory_stats()
    res = CliRunner().invoke(main, ["search", "--objective", "barlow", "--device", "cuda", "--trials", "2", "--n-train", "256",
                                    "--batch-size", "64", "--steps", "3", "--probe-train", "256", "--probe-test", "128",
                                    "--timeout", "0", "--no-progress", "--out", str(out)])
    assert res.exit_code == 0, res.output
    rows = read_trials_csv(out / "trials.csv")
    assert [r["number"] for r in rows] == [0, 1]
    assert all(r["state"] in ("COMPLETE", "PRUNED") for r in rows), rows
    summary = json.loads((out / "search.json").read_text())
    assert summary["trials"]["failed"] == 0 and summary["trials"]["complete"] + summary["trials"]["pruned"] == 2
    for r in rows:
        if r["state"] == "COMPLETE":
            assert 0.0 <= r["knn_backbone"] <= 1.0 and r["score"] == r["score"]
    assert torch.cuda.max_memory_allocated() > 0  # the trials ran on the GPU


@pytest.mark.parametrize("objective", ["barlow", "simclr", "vicreg", "byol"])
def test_effective_hessian_on_cuda_matches_cpu_float64(objective: str) -> None:
    from geohead.geometry import EffectiveHessian, lanczos
    from geohead.heads import GeometricHead
    from geohead.objectives import get_objective

    torch.manual_seed(0)
    head = GeometricHead(12, 10, hidden_dim=16, depth=3, activation="silu", norm="batch").eval()
    obj = get_objective(objective)
    predictor = GeometricHead(10, 10, hidden_dim=16, depth=2, activation="silu").eval() if getattr(obj, "needs_predictor", False) else None
    g = torch.Generator().manual_seed(0)
    z1 = torch.randn(8, 12, generator=g, dtype=torch.float64)
    z2 = z1 + 0.1 * torch.randn(8, 12, generator=g, dtype=torch.float64)
    cpu = EffectiveHessian(head, obj, z1, z2, predictor=predictor)
    gpu = EffectiveHessian(head, obj, z1.cuda(), z2.cuda(), predictor=predictor)
    assert gpu.device.type == "cuda" and gpu.dtype == torch.float64
    assert gpu.loss == pytest.approx(cpu.loss, rel=1e-12)
    assert torch.allclose(gpu.grad_z.cpu(), cpu.grad_z, rtol=1e-10, atol=1e-12 * float(cpu.grad_z.abs().max()))
    v = torch.randn(cpu.dim, generator=g, dtype=torch.float64)
    for name in ("H", "G", "M"):  # the three operators agree to 1e-10 relative in float64
        a, b = getattr(gpu, name)(v.cuda()).cpu(), getattr(cpu, name)(v)
        assert float((a - b).norm()) <= 1e-10 * max(float(b.norm()), 1e-300) + 1e-14, name
    # Lanczos on the CUDA operator: the CPU's extreme eigenvalues (dense float64 reference)
    lam = torch.linalg.eigvalsh(cpu.H.dense())
    res = lanczos(gpu.H, k=2, which="both")
    assert res.converged
    scale = float(lam.abs().max())
    assert abs(res.lambda_min - float(lam[0])) <= 1e-8 * scale and abs(res.lambda_max - float(lam[-1])) <= 1e-8 * scale


@pytest.mark.parametrize("mode", ["pca", "zca"])
def test_whitening_on_cuda_matches_cpu(mode: str) -> None:
    """whiten_ of a head on the GPU sets the same first layer as on the CPU (the first GPU run
    found PCA whitening building its selector on the CPU: every PCA trial of a search failed).

    PCA's rows are eigenvectors, each defined up to its sign, and cuSOLVER and LAPACK pick signs
    differently (seen on the H200): PCA rows (and their biases) match up to one sign per row; ZCA's
    polar factor has no such freedom and matches as is."""
    from geohead.heads import GeometricHead

    torch.manual_seed(0)
    cpu = GeometricHead(12, 10, hidden_dim=16, depth=2, activation="silu", norm="batch")
    gpu = GeometricHead(12, 10, hidden_dim=16, depth=2, activation="silu", norm="batch").cuda()
    gpu.load_state_dict(cpu.state_dict())
    x = torch.randn(64, 12, generator=torch.Generator().manual_seed(1)) @ torch.randn(12, 12, generator=torch.Generator().manual_seed(2))
    cpu.whiten_(x, mode=mode)
    gpu.whiten_(x.cuda(), mode=mode)
    w_gpu, w_cpu = gpu.state_dict()["mlp.fc0.weight"].cpu(), cpu.state_dict()["mlp.fc0.weight"]
    sign = torch.ones(w_cpu.shape[0])
    if mode == "pca":
        sign = torch.sign((w_gpu * w_cpu).sum(1))
        assert bool((sign != 0).all())
    for (name, a), b in zip(gpu.state_dict().items(), cpu.state_dict().values()):
        assert a.device.type == "cuda", name
        if name.startswith("mlp.fc0.") and a.dim() >= 1 and a.shape[0] == sign.numel():
            b = b * sign.view(-1, *([1] * (b.dim() - 1)))
        assert torch.allclose(a.cpu(), b, rtol=1e-5, atol=1e-6), name  # float64 eigh on each device, then float32
