"""EffectiveHessian operators against dense torch.func Hessians of the composite, every objective."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from geohead.errors import NonFiniteError
from geohead.geometry.hessian import EffectiveHessian
from geohead.geometry.summary import spectrum_summary
from geohead.heads import GeometricHead
from geohead.objectives import get_objective

B, D, K, HID = 5, 4, 3, 6
F64 = torch.float64

# (registry name, kwargs): the six objectives plus the PSD "MSE to target" variants
CASES = [
    ("barlow", {}),
    ("vicreg", {}),
    ("simclr", {}),
    ("byol", {}),
    ("byol", {"distance": "mse"}),
    ("simsiam", {}),
    ("simsiam", {"distance": "mse"}),
    ("dino", {"out_dim": K}),
]


pytestmark = pytest.mark.usefixtures("one_thread")


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def make_problem(name: str, kw: dict, act: str = "silu", seed: int = 0, **head_kw):
    torch.manual_seed(seed)
    obj = get_objective(name, **kw)
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation=act, **head_kw)
    # non-trivial BatchNorm statistics, so eval mode is a real affine map
    for m in head.modules():
        if isinstance(m, nn.BatchNorm1d):
            m.running_mean.uniform_(-0.3, 0.3)
            m.running_var.uniform_(0.5, 2.0)
            if m.affine:
                m.weight.data.uniform_(0.5, 1.5)
                m.bias.data.uniform_(-0.2, 0.2)
    pred = GeometricHead(K, K, hidden_dim=HID, depth=2, activation=act) if obj.needs_predictor else None
    g = _gen(seed)
    z1 = torch.randn(B, D, generator=g, dtype=F64)
    z2 = z1 + 0.3 * torch.randn(B, D, generator=g, dtype=F64)
    return obj, head, pred, z1, z2


def dense_reference(obj, head, pred, z1, z2, train: bool = False):
    """H, G, M, P∇²LP-based G_tan and ∇²_e L, densely, with plain module calls on float64 copies."""
    h = copy.deepcopy(head).double().train(train)
    p = copy.deepcopy(pred).double().train(train) if pred is not None else None
    with torch.no_grad():
        target = copy.deepcopy(head).double().train(train)(z2)

    def branch(z: torch.Tensor) -> torch.Tensor:
        e = h(z)
        return p(e) if p is not None else e

    def f(z: torch.Tensor) -> torch.Tensor:
        return obj.loss(branch(z), target)

    # torch.func transforms refuse BatchNorm's in-place running-stat updates (train mode), so
    # train mode uses torch.autograd.functional on the (throw-away) float64 copies instead
    if train:
        hess, jac = torch.autograd.functional.hessian, torch.autograd.functional.jacobian
    else:
        hess = lambda fn, x: torch.func.hessian(fn)(x)  # noqa: E731
        jac = lambda fn, x: torch.func.jacrev(fn)(x)  # noqa: E731
    n = B * D
    H = hess(f, z1).reshape(n, n).detach()
    e = branch(z1).detach()
    kk = e.shape[1]
    J = jac(branch, z1).reshape(B * kk, n).detach()
    He = torch.func.hessian(lambda a: obj.loss(a, target))(e).reshape(B * kk, B * kk).detach()
    ge = torch.func.grad(lambda a: obj.loss(a, target))(e).detach()
    M = hess(lambda z: (ge * branch(z)).sum(), z1).reshape(n, n).detach()
    eh_ = e / e.norm(dim=1, keepdim=True)
    P = torch.block_diag(*[torch.eye(kk, dtype=F64) - torch.outer(r, r) for r in eh_])
    grad_z = (jac(f, z1) if train else torch.func.grad(f)(z1)).detach()
    return {"grad_z": grad_z, "grad_e": ge, "H": H, "G": J.T @ He @ J, "M": M, "G_tangent": J.T @ P @ He @ P @ J,
            "H_tangent": J.T @ P @ He @ P @ J + M, "objective": He,
            "objective_tangent": P @ He @ P}


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).norm() / max(float(b.norm()), 1e-300))


@pytest.mark.parametrize("name,kw", CASES, ids=[n + ("-" + kw["distance"] if "distance" in kw else "") for n, kw in CASES])
def test_operators_equal_dense_hessians(name: str, kw: dict) -> None:
    obj, head, pred, z1, z2 = make_problem(name, kw)
    eh = EffectiveHessian(head, obj, z1, z2, predictor=pred)
    ref = dense_reference(obj, head, pred, z1, z2)
    scale = float(ref["H"].norm())
    assert scale > 0
    for key in ("H", "G", "M", "G_tangent", "H_tangent"):
        got = eh.operator(key).dense()
        assert float((got - ref[key]).norm()) <= 1e-8 * scale, key
    for key in ("objective", "objective_tangent"):
        assert rel(eh.operator(key).dense(), ref[key]) <= 1e-8, key
    assert rel(eh.grad_z, ref["grad_z"]) <= 1e-10 and rel(eh.grad_e, ref["grad_e"]) <= 1e-10
    assert eh.grad_norm == pytest.approx(float(ref["grad_e"].norm()), rel=1e-10)
    # the split is exact: H = G + M, with M computed on its own
    assert float((eh.G.dense() + eh.M.dense() - ref["H"]).norm()) <= 1e-8 * scale
    # gradient and loss agree with the composite
    with torch.no_grad():
        branch = nn.Sequential(copy.deepcopy(head), copy.deepcopy(pred) if pred is not None else nn.Identity())
        direct = float(obj.loss(branch.double().eval()(z1), eh.target))
    assert abs(eh.loss - direct) <= 1e-12 * max(1.0, abs(eh.loss))


def test_dino_prototype_head_weight_norm_and_l2norm() -> None:
    """A DINO head (L2-normalised bottleneck + weight-normalised prototypes) through functional_call."""
    torch.manual_seed(1)
    obj = get_objective("dino", out_dim=7)
    head = GeometricHead(D, K, hidden_dim=HID, depth=3, activation="gelu", norm=None, prototypes=7)
    g = _gen(1)
    z1, z2 = torch.randn(B, D, generator=g, dtype=F64), torch.randn(B, D, generator=g, dtype=F64)
    eh = EffectiveHessian(head, obj, z1, z2)
    ref = dense_reference(obj, head, None, z1, z2)
    scale = float(ref["H"].norm())
    for key in ("H", "G", "M"):
        assert float((eh.operator(key).dense() - ref[key]).norm()) <= 1e-8 * scale, key


def test_train_mode_batchnorm_couples_samples_and_leaves_module_untouched() -> None:
    obj, head, pred, z1, z2 = make_problem("barlow", {}, act="relu")
    head.eval()
    before = {k: v.clone() for k, v in head.state_dict().items()}
    eh = EffectiveHessian(head, obj, z1, z2, bn_mode="train")
    ref = dense_reference(obj, head, None, z1, z2, train=True)
    scale = float(ref["H"].norm())
    for key in ("H", "G", "M"):
        assert float((eh.operator(key).dense() - ref[key]).norm()) <= 1e-8 * scale, key
    # batch statistics make even a ReLU head curved: M != 0 in train mode
    assert float(ref["M"].norm()) > 1e-6 * scale
    # nothing mutated: parameters, running statistics, num_batches_tracked, training flags
    for k, v in head.state_dict().items():
        assert torch.equal(v, before[k]), k
    assert not any(m.training for m in head.modules())


def test_eval_mode_relu_and_linear_heads_have_exactly_zero_m() -> None:
    for act in ("relu", "identity"):
        obj, head, pred, z1, z2 = make_problem("barlow", {}, act=act)
        eh = EffectiveHessian(head, obj, z1, z2)
        v = torch.randn(eh.dim, dtype=F64, generator=_gen(3))
        assert torch.count_nonzero(eh.M(v)) == 0
        assert float(eh.H(v).norm()) > 0


def test_float32_mode_matches_float64() -> None:
    obj, head, pred, z1, z2 = make_problem("vicreg", {})
    h64 = EffectiveHessian(head, obj, z1, z2).H.dense()
    e32 = EffectiveHessian(head, obj, z1.float(), z2.float(), dtype=torch.float32)
    h32 = e32.H.dense()
    assert h32.dtype == torch.float32
    assert rel(h32.double(), h64) < 1e-4


def test_target_given_directly_and_default_other_view() -> None:
    obj, head, pred, z1, z2 = make_problem("byol", {"distance": "mse"})
    eh = EffectiveHessian(head, obj, z1, z2, predictor=pred)
    same = EffectiveHessian(head, obj, z1, target=eh.target, predictor=pred)
    v = torch.randn(eh.dim, dtype=F64, generator=_gen(2))
    assert torch.allclose(eh.H(v), same.H(v), rtol=0, atol=1e-14)
    single = EffectiveHessian(head, obj, z1, predictor=pred)  # other branch = same batch
    with torch.no_grad():
        assert torch.allclose(single.target, copy.deepcopy(head).double().eval()(z1), atol=1e-12)


def test_teacher_builds_the_target() -> None:
    obj, head, pred, z1, z2 = make_problem("dino", {"out_dim": K})
    teacher = copy.deepcopy(head)
    with torch.no_grad():
        for p in teacher.parameters():
            p.mul_(0.5)
    eh = EffectiveHessian(head, obj, z1, z2, teacher=teacher)
    with torch.no_grad():
        assert torch.allclose(eh.target, copy.deepcopy(teacher).double().eval()(z2), atol=1e-12)


def test_spectrum_summary_on_effective_hessian() -> None:
    obj, head, pred, z1, z2 = make_problem("barlow", {})
    eh = EffectiveHessian(head, obj, z1, z2)
    H = eh.H.dense()
    lam = torch.linalg.eigvalsh(H)
    s = spectrum_summary(eh, k=3)
    scale = float(lam.abs().max())
    assert abs(s.lambda_min - float(lam[0])) <= 1e-8 * scale
    assert abs(s.lambda_max - float(lam[-1])) <= 1e-8 * scale
    true_neg = int((lam < -1e-6 * scale).sum())
    assert min(3, true_neg) <= s.num_negative <= true_neg  # interlacing: a lower bound
    M = eh.M.dense()
    assert s.m_over_h == pytest.approx(float(M.norm() / H.norm()), rel=1e-10)  # exact: dim <= probes
    assert s.m_over_h_stderr == 0.0
    d = s.to_dict()
    assert d["lambda_min"] == s.lambda_min and d["dtype"] == "float64"


def test_within_rank_condition_of_psd_operator() -> None:
    """A PSD operator with a null space: the condition number is taken on its range."""
    g = _gen(5)
    q, _ = torch.linalg.qr(torch.randn(30, 30, generator=g, dtype=F64))
    lam = torch.cat([torch.zeros(18, dtype=F64), torch.linspace(0.5, 4.0, 12, dtype=F64)])
    A = q @ torch.diag(lam) @ q.T
    s = spectrum_summary(lambda v: A @ v, 30, k=15)  # exact run (2k >= n)
    assert s.exact
    assert s.condition_within_rank == pytest.approx(8.0, rel=1e-8)
    assert s.num_negative == 0


# ---------------------------------------------------------------------- bad input
def test_errors_name_the_problem() -> None:
    obj, head, pred, z1, z2 = make_problem("barlow", {})
    with pytest.raises(ValueError, match="in_dim"):
        EffectiveHessian(head, obj, torch.randn(B, D + 1, dtype=F64))
    with pytest.raises(ValueError, match=r"\(B, d\)"):
        EffectiveHessian(head, obj, torch.randn(B * D, dtype=F64))
    with pytest.raises(ValueError, match="z_other"):
        EffectiveHessian(head, obj, z1, z2[:-1])
    bad = z1.clone()
    bad[1, 2] = float("nan")
    with pytest.raises(NonFiniteError, match="non-finite"):
        EffectiveHessian(head, obj, bad, z2)
    bad[1, 2] = float("inf")
    with pytest.raises(NonFiniteError, match="non-finite"):
        EffectiveHessian(head, obj, z1, bad)
    with pytest.raises(ValueError, match="bn_mode"):
        EffectiveHessian(head, obj, z1, z2, bn_mode="frozen")
    with pytest.raises(ValueError, match="target"):
        EffectiveHessian(head, obj, z1, target=torch.zeros(B, K + 1, dtype=F64))
    eh = EffectiveHessian(head, obj, z1, z2)
    with pytest.raises(ValueError, match="shape"):
        eh.H(torch.zeros(eh.dim + 1, dtype=F64))
    with pytest.raises(ValueError, match="unknown operator"):
        eh.operator("Hessian")


@pytest.mark.parametrize("name", ["byol", "simsiam"])
def test_missing_predictor_is_a_clear_error(name: str) -> None:
    obj = get_objective(name)
    head = GeometricHead(D, K, hidden_dim=HID, depth=2)
    with pytest.raises(ValueError, match="needs a predictor"):
        EffectiveHessian(head, obj, torch.randn(B, D, dtype=F64), torch.randn(B, D, dtype=F64))
