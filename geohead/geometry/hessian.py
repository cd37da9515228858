"""The effective Hessian of an SSL objective with respect to the backbone representations.

For a head h, an objective L and a batch of backbone representations Z (B, d), geohead studies
the composite (Chaudhry 2026, Sec. 2)

    f(Z) = L( branch(h(Z)), b ),     b = target branch of the other view, held fixed,

where ``branch = predictor ∘ h`` for objectives with a predictor (BYOL, SimSiam) and ``h``
otherwise, and ``b`` = (teacher or same) head applied to the other view's representations
(detached), or a ``target`` given directly. With e = branch(h(Z)) ∈ R^{B×k} and J = ∂e/∂Z, the
paper's decomposition of the effective Hessian is

    H_eff = ∇²_Z f = Jᵀ (∇²_e L) J  +  Σ_i [∇_e L]_i ∇²_Z e_i  =  G + M,

G the pullback metric (Gauss–Newton part), M the interaction term (the head's curvature weighted
by the objective's gradient). For cosine-type (scale-invariant) losses, whose ∇²_e L is indefinite
along each embedding's own direction, the sphere-tangent frame is given beside the ambient one:

    G_tan = Jᵀ P (∇²_e L) P J,      H_tan = G_tan + M,      P = blockdiag_b(I − ê_b ê_bᵀ).

For a loss of degree 0 in each row e_b, ∇²_e L = P ∇²_e L P + C with
C = −blockdiag_b (g_b ê_bᵀ + ê_b g_bᵀ)/‖e_b‖ (g = ∇_e L, which is tangent), so
H_eff = H_tan + Jᵀ C J: the ambient operator adds a rank-2 block of eigenvalues ±‖g_b‖/‖e_b‖ per
sample (one negative per sample where g_b ≠ 0), the curvature of the normalisation e ↦ e/‖e‖
weighted by the gradient, which vanishes at an equilibrium (docs/theory.md, "The effective Hessian").

:class:`EffectiveHessian` exposes H_eff, G, M, G_tan, H_tan and ∇²_e L (and its tangent version) as
:class:`~geohead.geometry.operators.Operator` objects on flattened vectors (R^{B·d}, or R^{B·k}
for the objective's own Hessian), all from one forward graph:

* H v: double backward through the retained graph of ∇_Z f (one backward of the backward per
  product; measured faster than forward-over-reverse on CPU, see ``benchmarks/hessian.py``);
* M v: double backward of φ(Z) = ⟨∇_e L (fixed), e(Z)⟩, so M is computed directly, not as
  H − G (it is exactly zero for linear and ReLU heads in BatchNorm eval mode);
* G v: J v by the double-vjp trick, ∇²_e L by double backward in e-space, Jᵀ by one vjp.

Spectra of these operators: :func:`~geohead.geometry.lanczos.lanczos` (extremes),
:func:`~geohead.geometry.density.slq_density` (density), :mod:`geohead.geometry.trace` (traces
and Frobenius norms); :func:`~geohead.geometry.summary.spectrum_summary` condenses one operator
into the numbers the training loop and the head search log. The theory: docs/theory.md,
"The effective Hessian".
"""
from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor, nn

from geohead.errors import NonFiniteError
from geohead.geometry.operators import BN_MODES, Operator, functional_module


def _check_finite(x: Tensor, name: str) -> None:
    """Raise :class:`~geohead.errors.NonFiniteError` when ``x`` has NaN/inf entries."""
    bad = int((~torch.isfinite(x)).sum())
    if bad:
        raise NonFiniteError(f"{name} contains {bad} non-finite entries (NaN or inf); pass finite representations")


def _grad(outputs: Tensor, inputs: Tensor, grad_outputs: Tensor, create_graph: bool = False) -> Tensor:
    """∂⟨outputs, grad_outputs⟩/∂inputs; zeros where ``outputs`` does not depend on ``inputs``."""
    if not outputs.requires_grad:
        return torch.zeros_like(inputs)
    (g,) = torch.autograd.grad(
        outputs, inputs, grad_outputs, retain_graph=True, create_graph=create_graph, allow_unused=True,
        materialize_grads=True,
    )
    return g


class EffectiveHessian:
    """H_eff = G + M of Z ↦ L(branch(h(Z)), b) as operators on R^{B·d} (see the module docstring).

    Args:
        head: the projection head h, any ``nn.Module`` mapping (B, d) → (B, k); weights are held
            fixed (detached, cast to ``dtype``); the module is not modified.
        objective: a :class:`~geohead.objectives.base.Objective`; its ``loss(a, b)`` is used.
        z: backbone representations of the online view, (B, d).
        z_other: representations of the other view, (B, d); the fixed branch is
            ``b = teacher(z_other)`` (``teacher`` defaults to ``head``). Default: ``z`` itself.
        target: the fixed branch output b, (B, k), given directly (overrides ``z_other``).
        predictor: the predictor (B, k) → (B, k) for objectives with ``needs_predictor``
            (BYOL, SimSiam); required for them, optional for the others.
        teacher: the head that makes the target branch (an EMA teacher); default ``head``.
        bn_mode: ``"eval"`` (default: running statistics, samples independent) or ``"train"``
            (batch statistics: couples the samples and makes even ReLU heads curved).
        dtype: float64 (default, diagnostics) or float32 (cheap screening).

    Attributes (after construction):
        batch_size, in_dim (d), out_dim (k of the loss input), dim (= B·d), embed_dim (= B·k),
        loss (float), grad_e ((B, k) ∇_e L), grad_z ((B, d) ∇_Z f, computed on first access),
        dtype, bn_mode. Graphs for second derivatives are built by the first product that
        needs them (the first ``H`` product costs about two later ones).

    Operators (all symmetric; ``op(v)`` takes a flat vector, ``op.dense()`` builds the matrix):
        ``H`` (H_eff), ``G``, ``M``, ``G_tangent``, ``H_tangent`` (= G_tangent + M) (on R^{B·d});
        ``objective_hessian`` (∇²_e L)
        and ``objective_hessian_tangent`` (P ∇²_e L P) on R^{B·k}.
        ``jvp(v)`` = J v (B·d → B·k) and ``vjp(u)`` = Jᵀ u are available for custom products.
    """

    def __init__(
        self,
        head: nn.Module,
        objective: nn.Module,
        z: Tensor,
        z_other: Tensor | None = None,
        *,
        target: Tensor | None = None,
        predictor: nn.Module | None = None,
        teacher: nn.Module | None = None,
        bn_mode: str = "eval",
        dtype: torch.dtype = torch.float64,
    ) -> None:
        name = _check_inputs(head, objective, z, z_other, predictor, bn_mode, dtype)
        self.objective = objective
        self.objective_name = name
        self.bn_mode = bn_mode
        self.dtype = dtype
        self.device = z.device
        self.cosine = bool(getattr(objective, "cosine", False))
        self.batch_size, self.in_dim = int(z.shape[0]), int(z.shape[1])

        h = functional_module(head, dtype=dtype, device=z.device, bn_mode=bn_mode)
        p = functional_module(predictor, dtype=dtype, device=z.device, bn_mode=bn_mode) if predictor is not None else None
        t = functional_module(teacher, dtype=dtype, device=z.device, bn_mode=bn_mode) if teacher is not None else h
        self._branch: Callable[[Tensor], Tensor] = (lambda x: p(h(x))) if p is not None else h

        b = self.target = _target_branch(t, z, z_other, target, dtype)

        self._z = z.detach().to(dtype).clone().requires_grad_(True)
        e = self._branch(self._z)
        if e.dim() != 2 or e.shape[0] != self.batch_size:
            raise ValueError(f"the online branch returned shape {tuple(e.shape)}; expected (B={self.batch_size}, k)")
        if b.shape != e.shape:
            raise ValueError(
                f"target branch output has shape {tuple(b.shape)} but the online branch gives {tuple(e.shape)}; "
                "the target must match the online branch (after the predictor, if any)"
            )
        _check_finite(e, "online branch output")
        self._e = e
        self.out_dim = int(e.shape[1])
        self.dim = self.batch_size * self.in_dim
        self.embed_dim = self.batch_size * self.out_dim

        # loss and ∇_e L (e as an independent leaf); graphs for second derivatives are built
        # lazily, by the first product that needs them
        self._e_leaf = e.detach().requires_grad_(True)
        loss_e = objective.loss(self._e_leaf, b)
        if loss_e.dim() != 0:
            raise ValueError(f"objective.loss must return a scalar, got shape {tuple(loss_e.shape)}")
        (ge,) = torch.autograd.grad(loss_e, self._e_leaf)
        self.loss = float(loss_e.detach())
        self.grad_e = ge.detach()
        self._ge: Tensor | None = None  # ∇_e L with graph (for ∇²_e L)
        self._grad_z: Tensor | None = None
        e_hat = e.detach() / e.detach().norm(dim=1, keepdim=True).clamp_min(torch.finfo(dtype).tiny)
        self._e_hat = e_hat
        self._full_grad: Tensor | None = None  # ∇_Z f with graph (for H)
        self._phi_grad: Tensor | None = None  # ∇_Z ⟨g_e, e⟩ with graph (for M)
        self._u0: Tensor | None = None
        self._jt_u0: Tensor | None = None  # Jᵀ u0 with graph in u0 (for J v)

        self.H = Operator(self.hvp, self.dim, dtype=dtype, device=self.device, name="H_eff")
        self.G = Operator(self.gvp, self.dim, dtype=dtype, device=self.device, name="G")
        self.M = Operator(self.mvp, self.dim, dtype=dtype, device=self.device, name="M")
        self.G_tangent = Operator(self.gvp_tangent, self.dim, dtype=dtype, device=self.device, name="G_tangent")
        self.H_tangent = Operator(self.hvp_tangent, self.dim, dtype=dtype, device=self.device, name="H_tangent")
        self.objective_hessian = Operator(self.objective_hvp, self.embed_dim, dtype=dtype, device=self.device, name="hess_e L")
        self.objective_hessian_tangent = Operator(
            self.objective_hvp_tangent, self.embed_dim, dtype=dtype, device=self.device, name="P hess_e L P"
        )

    # ------------------------------------------------------------------ helpers
    @property
    def z(self) -> Tensor:
        """The representations the operators are evaluated at, (B, d), in ``dtype``."""
        return self._z.detach()

    @property
    def embeddings(self) -> Tensor:
        """The online branch output e (B, k) (after the predictor, if any)."""
        return self._e.detach()

    @property
    def grad_z(self) -> Tensor:
        """∇_Z f (B, d): the gradient the backbone receives from this view."""
        if self._grad_z is None:
            self._grad_z = _grad(self._e, self._z, self.grad_e).detach()
        return self._grad_z

    @property
    def grad_norm(self) -> float:
        """‖∇_e L‖ (Frobenius over the batch): M vanishes when it does (Thm 4.1 needs it ≠ 0)."""
        return float(self.grad_e.norm())

    def branch(self, z: Tensor) -> Tensor:
        """e(Z') = branch(h(Z')) (B, k) at other representations Z' (B, d), with a graph to Z'
        (the online branch the operators differentiate; torch.func transforms apply to it)."""
        return self._branch(z.to(device=self.device, dtype=self.dtype))

    def composite(self, z: Tensor) -> Tensor:
        """f(Z') = L(branch(h(Z')), b) at other representations Z' (B, d) with the same fixed
        target b: a scalar with a graph to Z' (what :func:`~geohead.geometry.equilibrium.refine_collapsed`
        moves)."""
        return self.objective.loss(self.branch(z), self.target)

    def _as_z(self, v: Tensor) -> Tensor:
        v = v.to(device=self.device, dtype=self.dtype)
        if v.shape == (self.dim,):
            return v.view(self.batch_size, self.in_dim)
        if v.shape == (self.batch_size, self.in_dim):
            return v
        raise ValueError(f"expected a vector of shape ({self.dim},) or ({self.batch_size}, {self.in_dim}), got {tuple(v.shape)}")

    def _as_e(self, u: Tensor) -> Tensor:
        u = u.to(device=self.device, dtype=self.dtype)
        if u.shape == (self.embed_dim,):
            return u.view(self.batch_size, self.out_dim)
        if u.shape == (self.batch_size, self.out_dim):
            return u
        raise ValueError(f"expected a vector of shape ({self.embed_dim},) or ({self.batch_size}, {self.out_dim}), got {tuple(u.shape)}")

    def _project(self, u: Tensor) -> Tensor:
        """P u: remove each row's component along its embedding direction ê_b."""
        return u - self._e_hat * (self._e_hat * u).sum(1, keepdim=True)

    # ------------------------------------------------------------------ products
    def jvp(self, v: Tensor) -> Tensor:
        """J v: (B·d,) or (B, d) → (B·k,), by the double-vjp trick on the retained graph."""
        if self._jt_u0 is None:
            self._u0 = torch.zeros_like(self._e, requires_grad=True)
            self._jt_u0 = _grad(self._e, self._z, self._u0, create_graph=True)
        assert self._u0 is not None
        return _grad(self._jt_u0, self._u0, self._as_z(v)).reshape(-1)

    def vjp(self, u: Tensor) -> Tensor:
        """Jᵀ u: (B·k,) or (B, k) → (B·d,)."""
        return _grad(self._e, self._z, self._as_e(u)).reshape(-1)

    def _objective_grad_graph(self) -> Tensor:
        if self._ge is None:
            loss = self.objective.loss(self._e_leaf, self.target)
            (self._ge,) = torch.autograd.grad(loss, self._e_leaf, create_graph=True)
        return self._ge

    def objective_hvp(self, u: Tensor) -> Tensor:
        """∇²_e L u on R^{B·k}."""
        return _grad(self._objective_grad_graph(), self._e_leaf, self._as_e(u)).reshape(-1)

    def objective_hvp_tangent(self, u: Tensor) -> Tensor:
        """P ∇²_e L P u on R^{B·k} (sphere-tangent objective Hessian)."""
        pu = self._project(self._as_e(u))
        return self._project(_grad(self._objective_grad_graph(), self._e_leaf, pu)).reshape(-1)

    def hvp(self, v: Tensor) -> Tensor:
        """H_eff v on R^{B·d} (double backward through ∇_Z f)."""
        if self._full_grad is None:
            loss = self.objective.loss(self._e, self.target)
            self._full_grad = _grad(loss, self._z, torch.ones_like(loss), create_graph=True)
        return _grad(self._full_grad, self._z, self._as_z(v)).reshape(-1)

    def mvp(self, v: Tensor) -> Tensor:
        """M v = Σ_i [∇_e L]_i ∇²_Z e_i v (double backward of ⟨∇_e L, e(Z)⟩ with ∇_e L fixed)."""
        if self._phi_grad is None:
            self._phi_grad = _grad(self._e, self._z, self.grad_e, create_graph=True)
        return _grad(self._phi_grad, self._z, self._as_z(v)).reshape(-1)

    def gvp(self, v: Tensor) -> Tensor:
        """G v = Jᵀ (∇²_e L) J v."""
        return self.vjp(self.objective_hvp(self.jvp(v)))

    def gvp_tangent(self, v: Tensor) -> Tensor:
        """G_tan v = Jᵀ P (∇²_e L) P J v (meaningful for cosine-type objectives)."""
        return self.vjp(self.objective_hvp_tangent(self.jvp(v)))

    def hvp_tangent(self, v: Tensor) -> Tensor:
        """H_tan v = G_tan v + M v: H_eff with the objective's Hessian taken on the sphere (the
        frame of scale-invariant losses; H_eff − H_tan = Jᵀ C J, see the module docstring)."""
        return self.gvp_tangent(v) + self.mvp(v)

    def operator(self, name: str) -> Operator:
        """One of ``"H"``, ``"G"``, ``"M"``, ``"G_tangent"``, ``"H_tangent"``, ``"objective"``,
        ``"objective_tangent"``."""
        table = {
            "H": self.H, "G": self.G, "M": self.M, "G_tangent": self.G_tangent, "H_tangent": self.H_tangent,
            "objective": self.objective_hessian, "objective_tangent": self.objective_hessian_tangent,
        }
        if name not in table:
            raise ValueError(f"unknown operator {name!r}; valid names are {sorted(table)}")
        return table[name]

    def __repr__(self) -> str:
        return (
            f"EffectiveHessian(objective={self.objective_name!r}, B={self.batch_size}, d={self.in_dim}, "
            f"k={self.out_dim}, dim={self.dim}, bn_mode={self.bn_mode!r}, dtype={self.dtype})"
        )


def _check_inputs(head: nn.Module, objective: nn.Module, z: Tensor, z_other: Tensor | None, predictor: nn.Module | None,
                  bn_mode: str, dtype: torch.dtype) -> str:
    """Raise ``ValueError`` naming the first bad argument of :class:`EffectiveHessian`; return
    the objective's name."""
    if bn_mode not in BN_MODES:
        raise ValueError(f"unknown bn_mode {bn_mode!r}; use 'eval' (running statistics) or 'train' (batch statistics)")
    if dtype not in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        raise ValueError(f"dtype must be a floating dtype (float64 for diagnostics, float32 for screening), got {dtype}")
    if not isinstance(z, Tensor) or z.dim() != 2:
        raise ValueError(f"z must be a (B, d) tensor of backbone representations, got shape {tuple(getattr(z, 'shape', ()))}")
    in_dim = getattr(head, "in_dim", None)
    if isinstance(in_dim, int) and z.shape[1] != in_dim:
        raise ValueError(f"z has feature dimension {z.shape[1]} but the head expects in_dim={in_dim}")
    _check_finite(z, "z")
    needs_pred = bool(getattr(objective, "needs_predictor", False))
    name = getattr(objective, "name", type(objective).__name__)
    if needs_pred and predictor is None:
        raise ValueError(
            f"objective {name!r} needs a predictor (its loss compares predictor(head(z1)) with the "
            f"other branch); pass predictor=objective.make_predictor(k) or your trained predictor"
        )
    if z_other is not None:
        if not isinstance(z_other, Tensor) or z_other.shape != z.shape:
            raise ValueError(
                f"z_other must have the shape of z {tuple(z.shape)}, got {tuple(getattr(z_other, 'shape', ()))}"
            )
        _check_finite(z_other, "z_other")
    return name


def _target_branch(t: Callable[[Tensor], Tensor], z: Tensor, z_other: Tensor | None, target: Tensor | None,
                   dtype: torch.dtype) -> Tensor:
    """The target branch's output b (B, k), held fixed: ``target``, or the teacher ``t`` at
    ``z_other`` (or at ``z``)."""
    with torch.no_grad():
        if target is not None:
            if not isinstance(target, Tensor):
                raise ValueError(f"target must be a tensor, got {type(target).__name__}")
            b = target.detach().to(device=z.device, dtype=dtype)
        else:
            src = z_other if z_other is not None else z
            b = t(src.detach().to(dtype))
    _check_finite(b, "target branch output")
    return b


__all__ = ["EffectiveHessian"]
