"""Symmetric linear operators given by their matrix-vector product, and functional module calls.

The geometry code never forms a Hessian; it hands :class:`Operator` objects (``v ↦ A v`` on a
flattened space R^n) to Lanczos, stochastic Lanczos quadrature and Hutchinson estimators, which
draw their random start and probe vectors with :func:`gaussian_vector` and :func:`rademacher`.
:func:`functional_module` evaluates a head (or predictor, teacher) with its weights detached and
cast to the diagnostic dtype and its BatchNorm in an explicit mode, without touching the module:
its parameters, running statistics and ``training`` flags are the same afterwards.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
from torch import Tensor, nn

BN_MODES: tuple[str, ...] = ("eval", "train")


class Operator:
    """A symmetric linear operator ``A`` on R^n, given by ``matvec(v) = A v``.

    Args:
        matvec: maps a vector of shape (n,) to a vector of shape (n,).
        dim: n.
        dtype, device: of the vectors ``matvec`` takes and returns.
        name: a label for messages and reports.

    ``op(v)`` checks the shape, casts ``v`` to the operator's dtype/device, applies ``matvec``
    and counts the call in ``op.n_matvec`` (the cost unit of every estimator here).
    """

    def __init__(
        self,
        matvec: Callable[[Tensor], Tensor],
        dim: int,
        *,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
        name: str = "A",
    ) -> None:
        if not isinstance(dim, int) or dim < 1:
            raise ValueError(f"operator dimension must be a positive integer, got {dim!r}")
        self._matvec = matvec
        self.dim = dim
        self.dtype = dtype
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.name = name
        self.n_matvec = 0

    def __call__(self, v: Tensor) -> Tensor:
        if v.shape != (self.dim,):
            raise ValueError(
                f"operator {self.name!r} acts on vectors of shape ({self.dim},), got {tuple(v.shape)}; "
                "flatten a (B, d) batch with .reshape(-1)"
            )
        out = self._matvec(v.to(device=self.device, dtype=self.dtype))
        self.n_matvec += 1
        if out.shape != (self.dim,):
            raise ValueError(f"operator {self.name!r} returned shape {tuple(out.shape)}, expected ({self.dim},)")
        return out

    matvec = __call__

    def dense(self, max_dim: int = 4096) -> Tensor:
        """The (n, n) matrix, one ``matvec`` per column: for tests and small problems only."""
        if self.dim > max_dim:
            raise ValueError(f"dense() of a {self.dim}-dimensional operator; raise max_dim (> {max_dim}) if you mean it")
        eye = torch.eye(self.dim, dtype=self.dtype, device=self.device)
        return torch.stack([self(eye[i]) for i in range(self.dim)], dim=1)

    def __repr__(self) -> str:
        return f"Operator(name={self.name!r}, dim={self.dim}, dtype={self.dtype})"


def as_operator(
    op: Operator | Callable[[Tensor], Tensor],
    dim: int | None = None,
    dtype: torch.dtype | None = None,
    device: torch.device | str | None = None,
) -> Operator:
    """``op`` itself if it is an :class:`Operator`, else wrap the callable (``dim`` required)."""
    if isinstance(op, Operator):
        if dim is not None and dim != op.dim:
            raise ValueError(f"dim={dim} does not match the operator's dimension {op.dim}")
        return op
    if not callable(op):
        raise TypeError(f"expected an Operator or a callable matvec, got {type(op).__name__}")
    if dim is None:
        raise ValueError("a plain matvec callable needs dim= (the length of the vectors it acts on)")
    return Operator(op, dim, dtype=dtype or torch.float64, device=device)


# ---------------------------------------------------------------------- probe vectors
def default_generator(generator: torch.Generator | None, seed: int = 0) -> torch.Generator:
    """``generator``, or a fresh CPU generator seeded with ``seed`` (estimators are reproducible by default)."""
    return generator if generator is not None else torch.Generator().manual_seed(seed)


def gaussian_vector(n: int, op: Operator, generator: torch.Generator) -> Tensor:
    """(n,) standard Gaussian vector, drawn in float64 on the CPU, then cast to ``op``'s dtype/device
    (so the draw does not depend on the operator's dtype)."""
    return torch.randn(n, generator=generator, dtype=torch.float64).to(device=op.device, dtype=op.dtype)


def rademacher(shape: tuple[int, ...], op: Operator, generator: torch.Generator) -> Tensor:
    """Tensor of ``shape`` with independent ±1 entries (probability 1/2 each), in ``op``'s dtype/device."""
    r = torch.randint(0, 2, shape, generator=generator).to(torch.float64) * 2 - 1
    return r.to(device=op.device, dtype=op.dtype)


# ---------------------------------------------------------------------- functional modules
@contextlib.contextmanager
def module_mode(module: nn.Module, training: bool) -> Iterator[None]:
    """Set ``module.train(training)`` for the duration, then restore every submodule's flag."""
    saved = [(m, m.training) for m in module.modules()]
    module.train(training)
    try:
        yield
    finally:
        for m, flag in saved:
            m.training = flag


def functional_module(
    module: nn.Module,
    *,
    dtype: torch.dtype,
    device: torch.device | str | None = None,
    bn_mode: str = "eval",
) -> Callable[[Tensor], Tensor]:
    """``x ↦ module(x)`` with detached weights in ``dtype`` and BatchNorm in ``bn_mode``.

    ``bn_mode="eval"`` normalises with the running statistics, so the map acts on each sample
    separately. ``bn_mode="train"`` normalises with the statistics of the batch it is given,
    which couples the samples of the batch (the Hessian then has cross-sample blocks from the
    normalisation) and makes even a ReLU head curved. In train mode the running statistics are
    copied for every call (through :func:`torch.func.functional_call`), so the module's buffers
    are never updated; ``module.training`` flags are restored after each call.
    """
    if bn_mode not in BN_MODES:
        raise ValueError(f"unknown bn_mode {bn_mode!r}; use 'eval' (running statistics) or 'train' (batch statistics)")
    training = bn_mode == "train"
    params = {n: p.detach().to(device=device, dtype=dtype) for n, p in module.named_parameters()}
    buffers = {
        n: (b.detach().to(device=device, dtype=dtype) if b.is_floating_point() else b.detach().to(device=device))
        for n, b in module.named_buffers()
    }

    def forward(x: Tensor) -> Tensor:
        bufs = {n: b.clone() for n, b in buffers.items()} if training else buffers
        with module_mode(module, training):
            return torch.func.functional_call(module, {**params, **bufs}, (x,))

    return forward


__all__ = [
    "BN_MODES", "Operator", "as_operator", "default_generator", "functional_module", "gaussian_vector", "module_mode",
    "rademacher",
]
