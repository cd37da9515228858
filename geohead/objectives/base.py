"""The :class:`Objective` interface shared by the six SSL objectives.

An objective is a thin ``nn.Module`` around one elementary two-branch loss

    ``loss(a, b)``: ``a`` (B, k) are the online embeddings of one view (after the head, and after
    the predictor for BYOL/SimSiam), ``b`` (B, k) the other branch's embeddings of another view
    (the EMA teacher's or stop-gradient target for BYOL/SimSiam/DINO).

and ``forward(online, target)`` which combines ``loss`` over the views exactly as the original
method does (symmetrisation, multi-crop pairs). The geometry code differentiates
``Z ↦ loss(branch(h(Z)), b)`` with ``b`` held fixed: "the other view's branch as the objective
defines it".
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from geohead.heads import HeadSpec


@dataclass(frozen=True)
class CollapsedState:
    """Backbone representations of two views at which an objective is collapsed.

    Attributes:
        z1: view-1 representations (B, d).
        z2: view-2 representations (B, d).
        kind: ``"complete"`` (all representations at one point) or ``"dimensional"`` (an affine
            subspace of dimension ``rank``).
        rank: dimension of the collapsed subspace (0 for complete collapse).
        spread: standard deviation of the perturbation around the collapsed set.
    """

    z1: Tensor
    z2: Tensor
    kind: str
    rank: int
    spread: float


def check_pair(a: Tensor, b: Tensor, name: str, min_batch: int = 1) -> None:
    """Raise a ``ValueError`` naming the problem when ``a``/``b`` are not a valid (B, k) pair."""
    if a.dim() != 2 or b.dim() != 2:
        raise ValueError(f"{name} expects embeddings of shape (B, k); got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.shape != b.shape:
        raise ValueError(f"{name}: the two branches differ in shape: {tuple(a.shape)} vs {tuple(b.shape)}")
    if a.shape[0] < min_batch:
        raise ValueError(f"{name} needs a batch of at least {min_batch} samples, got {a.shape[0]}")


#: the widest head output a k x k loss takes (a 32768² fp32 matrix is 4 GiB; the published heads are 8192 wide)
MAX_SQUARE_DIM = 1 << 15


class Objective(nn.Module):
    """Base class: see the module docstring for the ``loss``/``forward`` contract.

    Class attributes describe what the method needs around the loss:
        name: registry name.
        head_preset: name of the method's standard head in :mod:`geohead.heads`.
        predictor_preset: the predictor's preset (BYOL, SimSiam), else ``None``.
        uses_teacher: an EMA teacher produces the target branch (BYOL, DINO).
        stop_gradient: the target branch carries no gradient (BYOL, SimSiam, DINO).
        cosine: the loss sees embeddings only through their direction, so its Hessian in
            ambient coordinates is indefinite along ``e``; geometry also reports the
            sphere-tangent version.
        concat_views: views of one resolution go through the backbone as one batch (DINO's
            multi-crop wrapper); otherwise each view is its own batch (its own BN statistics).
        target_views: how many views the EMA teacher sees (DINO: the 2 global crops; None: all).
        square_dim: the loss forms a k × k matrix of the head's output width k (Barlow Twins'
            cross-correlation, VICReg's covariance), so k is bounded by :data:`MAX_SQUARE_DIM`.
    """

    name: ClassVar[str] = ""
    head_preset: ClassVar[str] = ""
    predictor_preset: ClassVar[str | None] = None
    uses_teacher: ClassVar[bool] = False
    stop_gradient: ClassVar[bool] = False
    cosine: ClassVar[bool] = False
    concat_views: ClassVar[bool] = False
    target_views: ClassVar[int | None] = None
    square_dim: ClassVar[bool] = False

    @property
    def needs_predictor(self) -> bool:
        return self.predictor_preset is not None

    @classmethod
    def args_for_head(cls, args: dict[str, Any], head_out_dim: int) -> dict[str, Any]:
        """The constructor's keyword arguments ``args`` completed for a head of output width
        ``head_out_dim`` (DINO: the number of prototypes); ``ValueError`` where they disagree."""
        return dict(args)

    @classmethod
    def check_out_dim(cls, head_out_dim: int) -> None:
        """``ValueError`` when the loss forms a k × k matrix (:attr:`square_dim`) of a head output
        width k over :data:`MAX_SQUARE_DIM`, before any of it is allocated."""
        if cls.square_dim and head_out_dim > MAX_SQUARE_DIM:
            gib = 4 * head_out_dim ** 2 / 2 ** 30
            raise ValueError(f"{cls.name}'s loss forms a k x k matrix of the head's output width: out_dim "
                             f"{head_out_dim:,} needs {gib:,.0f} GiB for each; give an out_dim of at most {MAX_SQUARE_DIM:,}")

    def batch_loss(self, embs: Sequence[Tensor], preds: Sequence[Tensor], target: Sequence[Tensor] | None) -> Tensor:
        """The method's loss on one batch: the student's embeddings ``embs`` and predictions
        ``preds`` (one (B, k) tensor per view; ``preds`` is ``embs`` without a predictor) and the
        teacher's embeddings ``target`` of its views (None without a teacher)."""
        if self.needs_predictor:  # BYOL, SimSiam: predictions against the teacher or stop-gradient branch
            return self(preds, target if target is not None else embs)
        if target is not None:
            return self(embs, target)
        return self(embs)

    def loss(self, a: Tensor, b: Tensor) -> Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, online: Sequence[Tensor], target: Sequence[Tensor] | None = None) -> Tensor:
        """Symmetric two-view loss ``loss(e1, e2)`` (SimCLR, Barlow Twins, VICReg).

        Args:
            online: ``[e1, e2]``, each (B, k).
            target: unused by symmetric objectives (must be ``None``).
        """
        if len(online) != 2:
            raise ValueError(f"{self.name} takes exactly 2 views, got {len(online)}")
        return self.loss(online[0], online[1])

    @classmethod
    def predictor_spec(cls, dim: int, smooth: bool = False, **overrides: Any) -> "HeadSpec | None":
        """The :class:`~geohead.heads.HeadSpec` of the method's predictor on embeddings of width
        ``dim`` (BYOL, SimSiam), with ``overrides`` of its fields; None for the others. The
        published predictor (ReLU) by default; ``smooth=True`` swaps in SiLU."""
        from geohead.heads import preset_spec

        if cls.predictor_preset is None:
            return None
        return preset_spec(cls.predictor_preset, dim, smooth=smooth, **overrides)

    def make_predictor(self, dim: int, smooth: bool = False, **overrides: Any) -> nn.Module:
        """The method's predictor head built from :meth:`predictor_spec`; ``ValueError`` for
        objectives without one."""
        from geohead.heads import GeometricHead

        spec = self.predictor_spec(dim, smooth=smooth, **overrides)
        if spec is None:
            raise ValueError(f"objective {self.name!r} uses no predictor")
        return GeometricHead.from_spec(spec)

    def collapsed_state(
        self,
        batch_size: int,
        dim: int,
        kind: str = "complete",
        rank: int = 1,
        spread: float = 1e-2,
        generator: torch.Generator | None = None,
        dtype: torch.dtype = torch.float64,
        device: torch.device | str | None = None,
        center: Tensor | None = None,
        scale: Tensor | None = None,
    ) -> CollapsedState:
        """Backbone representations (two views) at which this objective is collapsed.

        Collapse lives in representation space, so the construction is shared by every
        objective: a centre ``c`` (d,) with unit-scale entries; for ``kind="complete"`` every
        representation of both views equals ``c`` up to i.i.d. noise of std ``spread``; for
        ``kind="dimensional"`` the representations fill a random ``rank``-dimensional affine
        subspace through ``c`` (unit-variance coordinates in it) and carry ``spread`` noise
        off it. ``spread=0`` gives the exact collapsed state (where Barlow Twins' and VICReg's
        batch standardisation is degenerate and SimCLR's loss is flat).

        ``center`` (dim,) replaces the random centre (e.g. the mean of real backbone features: the
        search's collapsed state) and ``scale`` (dim,) multiplies the noise per dimension (e.g.
        the features' per-dimension std, so ``spread`` is relative to it); neither draws from
        ``generator``.

        Returns: :class:`CollapsedState` with ``z1``, ``z2`` of shape (batch_size, dim).
        """
        if kind not in ("complete", "dimensional"):
            raise ValueError(f"unknown collapse kind {kind!r}; use 'complete' or 'dimensional'")
        if batch_size < 2 or dim < 1:
            raise ValueError(f"collapsed_state needs batch_size >= 2 and dim >= 1, got {batch_size}, {dim}")
        if kind == "dimensional" and not 1 <= rank < dim:
            raise ValueError(f"dimensional collapse needs 1 <= rank < dim={dim}, got rank={rank}")
        if spread < 0:
            raise ValueError(f"spread must be >= 0, got {spread}")
        g = generator if generator is not None else torch.Generator().manual_seed(0)

        def randn(*shape: int) -> Tensor:
            return torch.randn(*shape, generator=g, dtype=dtype)

        c = randn(dim) if center is None else center.to(dtype)
        noise = spread if scale is None else spread * scale.to(dtype)
        if kind == "complete":
            z1 = c + noise * randn(batch_size, dim)
            z2 = c + noise * randn(batch_size, dim)
            r = 0
        else:
            basis, _ = torch.linalg.qr(randn(dim, rank))
            coords = randn(batch_size, rank)
            z1 = c + coords @ basis.T + noise * randn(batch_size, dim)
            z2 = c + coords @ basis.T + noise * randn(batch_size, dim)
            r = rank
        return CollapsedState(z1.to(device), z2.to(device), kind, r, spread)

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.hparams().items())

    def hparams(self) -> dict[str, float | int | str]:
        """The objective's hyper-parameters (for logs and checkpoints)."""
        return {}
