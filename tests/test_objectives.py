"""Every loss against an independent reference written here, gradients by gradcheck."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from geohead.objectives import (
    BYOL, DINO, OBJECTIVES, BarlowTwins, SimCLR, SimSiam, VICReg, cosine_momentum, ema_update_,
    get_objective, make_teacher,
)

B, K = 7, 5


def pair(seed: int = 0, b: int = B, k: int = K) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, k, generator=g, dtype=torch.float64),
            torch.randn(b, k, generator=g, dtype=torch.float64))


# ---------------------------------------------------------------- references (numpy, loops)
def ref_ntxent(a: np.ndarray, b: np.ndarray, tau: float) -> float:
    """SimCLR Eq. (1), literally: 2N samples, positives (k, k+N)."""
    z = np.concatenate([a, b])
    z = z / np.linalg.norm(z, axis=1, keepdims=True)
    n2 = len(z)
    n = n2 // 2
    total = 0.0
    for i in range(n2):
        j = (i + n) % n2
        denom = sum(math.exp(z[i] @ z[k] / tau) for k in range(n2) if k != i)
        total += -math.log(math.exp(z[i] @ z[j] / tau) / denom)
    return total / n2


def ref_barlow(a: np.ndarray, b: np.ndarray, lambd: float, eps: float) -> float:
    """Barlow Twins Algorithm 1 with the official code's BatchNorm1d(affine=False) standardisation."""
    def bn(x: np.ndarray) -> np.ndarray:
        return (x - x.mean(0)) / np.sqrt(x.var(0) + eps)  # np.var is the biased variance
    n, d = a.shape
    c = bn(a).T @ bn(b) / n
    c_diff = (c - np.eye(d)) ** 2
    off = ~np.eye(d, dtype=bool)
    c_diff[off] *= lambd
    return float(c_diff.sum())


def ref_vicreg(x: np.ndarray, y: np.ndarray, lam: float = 25, mu: float = 25, nu: float = 1) -> float:
    """VICReg Algorithm 1 (PyTorch-like pseudocode of the paper), in numpy."""
    n, d = x.shape
    sim_loss = ((x - y) ** 2).mean()
    std_x = np.sqrt(x.var(axis=0, ddof=1) + 1e-04)
    std_y = np.sqrt(y.var(axis=0, ddof=1) + 1e-04)
    std_loss = np.maximum(0, 1 - std_x).mean() + np.maximum(0, 1 - std_y).mean()
    x = x - x.mean(axis=0)
    y = y - y.mean(axis=0)
    cov_x = (x.T @ x) / (n - 1)
    cov_y = (y.T @ y) / (n - 1)
    off = ~np.eye(d, dtype=bool)
    cov_loss = (cov_x[off] ** 2).sum() / d + (cov_y[off] ** 2).sum() / d
    # the official code: std_loss = mean(relu(1 - std_x)) / 2 + mean(relu(1 - std_y)) / 2
    return float(lam * sim_loss + mu * std_loss / 2 + nu * cov_loss)


def ref_byol(p: np.ndarray, t: np.ndarray) -> float:
    pn = p / np.linalg.norm(p, axis=1, keepdims=True)
    tn = t / np.linalg.norm(t, axis=1, keepdims=True)
    return float(((pn - tn) ** 2).sum(1).mean())  # ‖p̄ − z̄'‖² (BYOL Eq. 2)


def ref_neg_cos(p: np.ndarray, z: np.ndarray) -> float:
    return float(-np.mean([pi @ zi / (np.linalg.norm(pi) * np.linalg.norm(zi)) for pi, zi in zip(p, z)]))


def ref_dino_pair(s: np.ndarray, t: np.ndarray, center: np.ndarray, ts: float, tt: float) -> float:
    def softmax(x: np.ndarray) -> np.ndarray:
        e = np.exp(x - x.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)
    pt = softmax((t - center) / tt)
    ps = softmax(s / ts)
    return float(np.mean([-(pt[i] * np.log(ps[i])).sum() for i in range(len(s))]))


# ---------------------------------------------------------------- value tests
@pytest.mark.parametrize("tau", [0.5, 0.1])
def test_simclr_matches_eq1(tau: float) -> None:
    a, b = pair(1)
    got = SimCLR(temperature=tau).loss(a, b)
    assert abs(float(got) - ref_ntxent(a.numpy(), b.numpy(), tau)) < 1e-6 * max(1.0, abs(float(got)))


def test_barlow_matches_algorithm1_and_official_batchnorm() -> None:
    a, b = pair(2, b=9, k=6)
    obj = BarlowTwins()
    got = float(obj.loss(a, b))
    assert abs(got - ref_barlow(a.numpy(), b.numpy(), 0.0051, 1e-5)) < 1e-6 * max(1, abs(got))
    bn = nn.BatchNorm1d(6, affine=False).double().train()
    c = bn(a).T @ bn(b) / 9
    assert torch.allclose(obj.cross_correlation(a, b), c, atol=1e-12)


def test_vicreg_matches_algorithm1() -> None:
    a, b = pair(3, b=10, k=6)
    got = float(VICReg().loss(a, b))
    assert abs(got - ref_vicreg(a.numpy(), b.numpy())) < 1e-6 * max(1, abs(got))
    got = float(VICReg(sim_coeff=2.0, std_coeff=3.0, cov_coeff=0.5).loss(a, b))
    assert abs(got - ref_vicreg(a.numpy(), b.numpy(), 2.0, 3.0, 0.5)) < 1e-6 * max(1, abs(got))


def test_byol_symmetrised_matches_eq2() -> None:
    p1, p2 = pair(4)
    t1, t2 = pair(5)
    obj = BYOL()
    got = float(obj([p1, p2], [t1, t2]))
    want = ref_byol(p1.numpy(), t2.numpy()) + ref_byol(p2.numpy(), t1.numpy())
    assert abs(got - want) < 1e-6
    mse = float(BYOL(distance="mse").loss(p1, t2))
    assert abs(mse - float(((p1 - t2) ** 2).sum(1).mean())) < 1e-12


def test_simsiam_matches_eq4_and_stops_gradient() -> None:
    p1, p2 = pair(6)
    z1, z2 = pair(7)
    z1.requires_grad_(True)
    z2.requires_grad_(True)
    obj = SimSiam()
    loss = obj([p1, p2], [z1, z2])
    want = 0.5 * ref_neg_cos(p1.numpy(), z2.detach().numpy()) + 0.5 * ref_neg_cos(p2.numpy(), z1.detach().numpy())
    assert abs(float(loss) - want) < 1e-6
    assert not loss.requires_grad  # only the (non-grad) predictions could carry gradient here


def test_dino_matches_eq3_multicrop_and_updates_centre() -> None:
    g = torch.Generator().manual_seed(8)
    k = 6
    students = [torch.randn(B, k, generator=g, dtype=torch.float64) for _ in range(4)]
    teachers = [torch.randn(B, k, generator=g, dtype=torch.float64) for _ in range(2)]
    obj = DINO(out_dim=k, warmup_teacher_temp_epochs=0)
    obj.center.copy_(torch.randn(1, k, generator=g))
    c0 = obj.center.clone().double().numpy()
    obj.train()
    got = float(obj(students, teachers))
    terms = [ref_dino_pair(s.numpy(), t.numpy(), c0, 0.1, 0.07)
             for iq, t in enumerate(teachers) for v, s in enumerate(students) if v != iq]
    assert len(terms) == 2 * 4 - 2
    assert abs(got - np.mean(terms)) < 1e-6
    new_c = 0.9 * c0 + 0.1 * torch.cat(teachers).mean(0, keepdim=True).numpy()
    assert np.allclose(obj.center.double().numpy(), new_c, atol=1e-6)
    obj.eval()
    before = obj.center.clone()
    obj(students, teachers)
    assert torch.equal(obj.center, before)  # eval mode leaves the centre alone


def test_dino_teacher_temperature_warmup() -> None:
    obj = DINO(out_dim=4)
    obj.set_epoch(0)
    assert obj.teacher_temp == pytest.approx(0.04)
    obj.set_epoch(15)
    assert obj.teacher_temp == pytest.approx(0.055)
    obj.set_epoch(30)
    assert obj.teacher_temp == pytest.approx(0.07)


# ---------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", sorted(OBJECTIVES))
def test_gradcheck(name: str) -> None:
    kwargs = {"out_dim": K} if name == "dino" else {}
    obj = get_objective(name, **kwargs)
    a, b = pair(9, b=5)
    a.requires_grad_(True)
    if obj.stop_gradient:
        assert torch.autograd.gradcheck(lambda x: obj.loss(x, b), (a,))
    else:
        b.requires_grad_(True)
        assert torch.autograd.gradcheck(obj.loss, (a, b))


# ---------------------------------------------------------------- registry, errors, extras
def test_registry_and_errors() -> None:
    assert sorted(OBJECTIVES) == ["barlow", "byol", "dino", "simclr", "simsiam", "vicreg"]
    with pytest.raises(ValueError, match=r"unknown objective 'moco'.*'barlow'.*'vicreg'"):
        get_objective("moco")
    with pytest.raises(ValueError, match=r"no hyper-parameter\(s\) \['temp'\].*'temperature'"):
        get_objective("simclr", temp=0.1)
    with pytest.raises(ValueError, match="temperature must be > 0"):
        SimCLR(temperature=0)
    with pytest.raises(ValueError, match="differ in shape"):
        BarlowTwins().loss(torch.randn(4, 3), torch.randn(4, 2))
    with pytest.raises(ValueError, match="at least 2 samples"):
        VICReg().loss(torch.randn(1, 3), torch.randn(1, 3))
    with pytest.raises(ValueError, match="shape \\(B, k\\)"):
        SimCLR().loss(torch.randn(4), torch.randn(4))
    with pytest.raises(ValueError, match="out_dim=4 but got logits of width 3"):
        DINO(out_dim=4).loss(torch.randn(2, 3), torch.randn(2, 3))
    with pytest.raises(ValueError, match="target=\\[t1, t2\\]"):
        BYOL()([torch.randn(2, 3), torch.randn(2, 3)])
    with pytest.raises(ValueError, match="uses no predictor"):
        BarlowTwins().make_predictor(8)

    # a k x k loss bounds the head's output width k; the others do not form that matrix
    from geohead.objectives.base import MAX_SQUARE_DIM

    for name in ("barlow", "vicreg"):
        OBJECTIVES[name].check_out_dim(MAX_SQUARE_DIM)
        with pytest.raises(ValueError, match="out_dim 32,769 needs 4 GiB for each; give an out_dim of at most 32,768"):
            OBJECTIVES[name].check_out_dim(MAX_SQUARE_DIM + 1)
    OBJECTIVES["simclr"].check_out_dim(1 << 20)
    assert [n for n, o in OBJECTIVES.items() if o.square_dim] == ["barlow", "vicreg"]


def test_predictors_have_paper_shapes() -> None:
    pred = BYOL().make_predictor(256)
    assert [pred.mlp.fc0.in_features, pred.mlp.fc0.out_features, pred.mlp.fc1.out_features] == [256, 4096, 256]
    pred = SimSiam().make_predictor(2048)
    assert [pred.mlp.fc0.in_features, pred.mlp.fc0.out_features, pred.mlp.fc1.out_features] == [2048, 512, 2048]
    assert isinstance(pred.mlp.last_norm, nn.Identity)


@pytest.mark.parametrize("kind", ["complete", "dimensional"])
def test_collapsed_state(kind: str) -> None:
    obj = BarlowTwins()
    st = obj.collapsed_state(32, 10, kind=kind, rank=3, spread=0.0)
    assert st.z1.shape == st.z2.shape == (32, 10) and st.z1.dtype == torch.float64
    centred = st.z1 - st.z1.mean(0)
    rank = torch.linalg.matrix_rank(centred, atol=1e-9)
    assert int(rank) == (0 if kind == "complete" else 3)
    noisy = obj.collapsed_state(32, 10, kind=kind, rank=3, spread=1e-2)
    sv = torch.linalg.svdvals(noisy.z1 - noisy.z1.mean(0))
    k = 0 if kind == "complete" else 3
    assert sv[k:].max() < 0.1  # everything beyond the collapsed subspace is perturbation-sized
    with pytest.raises(ValueError, match="rank < dim"):
        obj.collapsed_state(8, 4, kind="dimensional", rank=4)
    with pytest.raises(ValueError, match="unknown collapse kind"):
        obj.collapsed_state(8, 4, kind="partial")


def test_ema_teacher_and_momentum_schedule() -> None:
    assert cosine_momentum(0, 100, 0.996) == pytest.approx(0.996)
    assert cosine_momentum(50, 100, 0.996) == pytest.approx(0.998)
    assert cosine_momentum(100, 100, 0.996) == pytest.approx(1.0)
    student = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    teacher = make_teacher(student)
    assert all(not p.requires_grad for p in teacher.parameters())
    with torch.no_grad():
        for p in student.parameters():
            p.add_(1.0)
    student(torch.randn(4, 3))  # moves the BN running stats
    old = [p.clone() for p in teacher.parameters()]
    ema_update_(teacher, student, 0.9)
    for t, o, s in zip(teacher.parameters(), old, student.parameters()):
        assert torch.allclose(t, 0.9 * o + 0.1 * s)
    assert torch.equal(teacher[1].running_mean, student[1].running_mean)


def test_collapsed_state_around_a_given_centre_with_relative_noise() -> None:
    """The search's collapsed state (real feature mean, noise relative to the per-dimension std)
    is the objectives' construction with ``center``/``scale``: bit for bit the formula, and the
    generator is not spent on a centre."""
    from geohead.objectives import get_objective

    mu, sd = torch.randn(6, dtype=torch.float64), torch.rand(6, dtype=torch.float64) + 0.5
    st = get_objective("barlow").collapsed_state(4, 6, spread=1e-2, generator=torch.Generator().manual_seed(3),
                                                center=mu, scale=sd)
    g = torch.Generator().manual_seed(3)
    n1, n2 = (torch.randn(4, 6, generator=g, dtype=torch.float64) for _ in range(2))
    assert torch.equal(st.z1, mu + 1e-2 * sd * n1) and torch.equal(st.z2, mu + 1e-2 * sd * n2)
    plain = get_objective("barlow").collapsed_state(4, 6, spread=1e-2, generator=torch.Generator().manual_seed(3))
    assert not torch.equal(plain.z1[0], st.z1[0])  # a random centre is drawn first without one
