""":class:`GeometricHead`: the projection head built from a :class:`~geohead.heads.HeadSpec`.

A head maps backbone representations ``z`` (B, in_dim) to embeddings ``e = h(z)``
(B, out_dim), or to prototype logits (B, prototypes) for DINO-style heads. In the paper's
terms the head is a trainable map whose Jacobian ``J_h`` pulls the objective's geometry back to
the backbone (the pullback metric ``G = J_h^T ∇²_e L J_h``) and whose own curvature ``∇²_z h``
adds the interaction term ``M`` (Chaudhry 2026, Sec. 2); smooth activations give ``M ≠ 0``,
ReLU and linear heads give ``M = 0`` almost everywhere.

Layout (timm ``layers/`` style: parts passed as types, ``Identity`` for absent parts, flat
forward)::

    mlp = [fc0, norm0, act0, fc1, norm1, act1, ..., fc{depth-1}, last_norm]
    forward(z) = prototypes(l2norm(mlp(z)))

``l2norm`` and ``prototypes`` are ``Identity`` unless ``prototypes=K`` (DINO).
"""
from __future__ import annotations

import dataclasses
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Literal

import torch
from torch import Tensor, nn

from geohead.heads.layers import ActivationArg, L2Norm, activation_layer, linear_bias, norm_layer
from geohead.heads.presets import preset_spec
from geohead.heads.spec import HeadSpec
from geohead.heads.whitening import WHITENING_MODES, whitening_rows


class WhiteningRankWarning(UserWarning):
    """:meth:`GeometricHead.whiten_` whitened fewer directions than the head's input has (the
    features' rank or the sample count is smaller): a fact about the data, not an error."""


class GeometricHead(nn.Module):
    """A projection head with configurable depth, width, activation, normalisation and init.

    Args:
        in_dim: backbone feature dimension d.
        out_dim: embedding dimension k (DINO heads: bottleneck dimension).
        hidden_dim: width of the hidden layers.
        depth: number of Linear layers (1 = linear head, no activation).
        activation: ``"silu"`` (= ``"swish"``), ``"gelu"``, ``"mish"``, ``"softplus"``, ``"tanh"``,
            ``"relu"``, ``"identity"`` or any ``nn.Module`` type.
        norm: ``"batch"``, ``"layer"`` or ``None`` after each hidden Linear.
        bias: ``"auto"`` drops the bias of a Linear followed by BatchNorm (BatchNorm subtracts the
            batch mean, which removes any bias). A Linear followed by LayerNorm keeps its bias,
            because LayerNorm only removes the mean over features, not a per-feature offset.
        last_norm: output normalisation: ``None``, ``"batch"``, ``"batch_noaffine"`` or ``"layer"``.
        whiten: ``None``; ``"zca"``/``"pca"`` to record a whitening request (apply it with
            :meth:`whiten_`); or a feature batch (N, in_dim) to ZCA-whiten the first layer now.
        prototypes: K for a DINO head (L2-normalise, then weight-normalised Linear to K).
        freeze_prototype_norm: fix the prototype layer's weight-norm gain to 1 (DINO default).

    Only ``in_dim`` and ``out_dim`` are positional: ``GeometricHead(512, 2048, 128)`` (lightly's
    ``(input_dim, hidden_dim, output_dim)`` order) is a ``TypeError`` that shows the keyword form
    ``GeometricHead(512, 128, hidden_dim=2048)``.

    The arguments are the fields of :class:`HeadSpec` (``activation`` may also be a type);
    :meth:`from_spec` builds the same head from a spec, :attr:`spec` gives it back.

    Shapes: ``forward`` takes ``z`` (B, in_dim) and returns (B, out_dim), or (B, prototypes).
    """

    def __init__(
        self,
        in_dim: int | None = None,
        out_dim: int | None = None,
        *extra: object,
        hidden_dim: int = 2048,
        depth: int = 3,
        activation: ActivationArg = "silu",
        norm: str | None = "batch",
        bias: Literal["auto"] | bool = "auto",
        last_norm: str | None = None,
        whiten: Tensor | str | None = None,
        prototypes: int | None = None,
        freeze_prototype_norm: bool = True,
        **unknown: object,
    ) -> None:
        if extra:
            raise TypeError(_keyword_only_message(in_dim, out_dim, extra))
        if unknown:
            raise TypeError(_unknown_keyword_message(unknown))
        if in_dim is None or out_dim is None:
            raise TypeError("GeometricHead needs in_dim and out_dim, e.g. GeometricHead(512, 128, hidden_dim=2048)")
        super().__init__()
        features = None
        if isinstance(whiten, Tensor):
            features, whiten = whiten, "zca"
        self._build(HeadSpec(
            in_dim=in_dim, out_dim=out_dim, hidden_dim=hidden_dim, depth=depth, activation=activation, norm=norm,
            bias=bias, last_norm=last_norm, whiten=whiten, prototypes=prototypes,
            freeze_prototype_norm=freeze_prototype_norm,
        ))
        if features is not None:
            self.whiten_(features, mode="zca")

    def _build(self, spec: HeadSpec) -> None:
        """Create the layers of ``spec`` (in this order, so seeded initialisation is reproducible)."""
        self._spec = spec
        act_layer = activation_layer(spec.activation)
        layers: OrderedDict[str, nn.Module] = OrderedDict()
        dims = [spec.in_dim] + [spec.hidden_dim] * (spec.depth - 1) + [spec.out_dim]
        for i in range(spec.depth):
            last = i == spec.depth - 1
            kind = spec.last_norm if last else spec.norm
            layers[f"fc{i}"] = nn.Linear(dims[i], dims[i + 1], bias=linear_bias(spec.bias, kind))
            if not last:
                layers[f"norm{i}"] = norm_layer(kind)(dims[i + 1])
                layers[f"act{i}"] = act_layer()
            else:
                layers["last_norm"] = norm_layer(kind)(dims[i + 1])
        self.mlp = nn.Sequential(layers)
        if spec.prototypes is not None:
            self.l2norm: nn.Module = L2Norm()
            self.prototypes: nn.Module = _prototype_layer(spec.out_dim, spec.prototypes, spec.freeze_prototype_norm)
        else:
            self.l2norm = nn.Identity()
            self.prototypes = nn.Identity()
        self.whitening_info: dict[str, Any] | None = None

    # ------------------------------------------------------------------ construction helpers
    @property
    def spec(self) -> HeadSpec:
        """The :class:`HeadSpec` that rebuilds this head's architecture."""
        return self._spec

    @property
    def in_dim(self) -> int:
        return self._spec.in_dim

    @property
    def out_dim(self) -> int:
        """Dimension of the head's output (prototypes for DINO heads)."""
        return self._spec.output_dim

    @classmethod
    def from_spec(cls, spec: HeadSpec | dict[str, Any] | str | Path) -> GeometricHead:
        """Build a head from a :class:`HeadSpec`, its dict, JSON text, or a JSON file path."""
        head = cls.__new__(cls)
        nn.Module.__init__(head)
        head._build(HeadSpec.coerce(spec))
        return head

    @classmethod
    def from_lightly(cls, head: nn.Module) -> GeometricHead:
        """The GeometricHead of a lightly projection head (``BarlowTwinsProjectionHead``,
        ``SimCLRProjectionHead``, ``DINOProjectionHead``, any ``ProjectionHead`` whose blocks fit),
        with its weights: the same outputs in eval mode (checked in ``tests/test_pretrained.py``).
        Works on any module with ``.layers`` (an ``nn.Sequential``) and optionally DINO's
        ``.last_layer``. Raises :class:`~geohead.heads.convert.HeadConversionError` for blocks a
        GeometricHead cannot express (unequal hidden widths, mixed norms). Shapes as the original.
        """
        from geohead.heads.convert import HeadConversionError, layout_from_modules

        layers = getattr(head, "layers", None)
        if not isinstance(layers, nn.Sequential):
            raise HeadConversionError(f"{type(head).__name__} has no .layers nn.Sequential (lightly's ProjectionHead layout)")
        return cls.from_layout(layout_from_modules(list(layers), getattr(head, "last_layer", None)))

    @classmethod
    def from_layout(cls, layout: Any, activation: str | None = None) -> GeometricHead:
        """The GeometricHead (eval mode) of a :class:`~geohead.heads.convert.MLPLayout`, with its
        weights; ``activation`` replaces the recorded hidden activation."""
        spec = layout.spec()
        if activation is not None and spec.depth > 1:
            spec = spec.replace(activation=activation)
        head = cls.from_spec(spec)
        head.load_state_dict(layout.state_dict(spec), strict=True)
        return head.eval()

    @classmethod
    def preset(cls, name: str, in_dim: int, smooth: bool = True, **overrides: Any) -> GeometricHead:
        """The standard head of an SSL method; see :func:`~geohead.heads.preset_spec` for the shapes."""
        return cls.from_spec(preset_spec(name, in_dim, smooth=smooth, **overrides))

    # ------------------------------------------------------------------ forward
    def forward(self, z: Tensor) -> Tensor:
        """``z`` (B, in_dim) -> (B, out_dim), or (B, prototypes) for DINO heads."""
        if z.dim() != 2 or z.shape[-1] != self._spec.in_dim:
            raise ValueError(
                f"GeometricHead expects input of shape (B, {self._spec.in_dim}), got {tuple(z.shape)}"
            )
        return self.prototypes(self.l2norm(self.mlp(z)))

    # ------------------------------------------------------------------ whitening
    @torch.no_grad()
    def whiten_(self, features: Tensor, mode: str | None = None, eps: float = 1e-8, rtol: float = 1e-6) -> GeometricHead:
        """Set the first Linear so that its pre-activation of ``features`` is whitened.

        With ``mu``, ``Σ = U Λ Uᵀ`` the mean and covariance of ``features`` (N, in_dim), computed
        in float64, and ``r`` the number of eigenvalues above ``rtol·λ_max`` (at most
        ``min(N-1, in_dim, hidden)``), the first ``m = min(in_dim, width)`` rows of the first
        weight become ``P Λ_r^{-1/2} U_rᵀ`` (eigenvalues regularised as ``λ + eps·mean(λ)``) and
        the bias ``-W mu`` (when the layer has one), so the pre-activation's covariance over
        ``features`` is ``P Pᵀ``: the identity on the r-dimensional subspace it keeps
        (see :func:`~geohead.heads.whitening.whitening_rows`).

        * ``mode="pca"``: ``P = [I_r; 0]``: unit i carries the i-th principal component.
        * ``mode="zca"``: ``P`` is the orthonormal factor closest to ``U_r`` (restricted to the
          first m coordinates): with ``width >= in_dim`` and full rank this is ZCA,
          ``W = Σ^{-1/2}``, the whitening that moves the features least.

        Rank-deficient features (or fewer samples than dimensions, where the rank is at most
        ``N - 1``): directions with (near-)zero variance are dropped, never amplified; the
        pre-activation is white on the r kept directions and the remaining rows of the block
        are zero combinations of them. Rows beyond m (when the first layer is wider than
        ``in_dim``) keep their random initialisation. ``self.whitening_info`` records r, m, N.

        Args:
            features: backbone features (N, in_dim), N >= 2.
            mode: ``"zca"`` or ``"pca"``; defaults to the spec's ``whiten`` or ``"zca"``.
            eps: relative eigenvalue regularisation.
            rtol: eigenvalues below ``rtol·λ_max`` count as zero.
        Returns: ``self``.
        """
        mode = mode or self._spec.whiten or "zca"
        if mode not in WHITENING_MODES:
            raise ValueError(f"unknown whitening mode {mode!r}; valid modes are 'zca' and 'pca'")
        if not isinstance(features, Tensor) or features.dim() != 2 or features.shape[1] != self.in_dim:
            shape = tuple(features.shape) if isinstance(features, Tensor) else type(features).__name__
            raise ValueError(f"whiten_ expects features of shape (N, {self.in_dim}), got {shape}")
        n = features.shape[0]
        if n < 2:
            raise ValueError(f"whiten_ needs at least 2 feature vectors, got {n}")
        x = features.detach().to(torch.float64)
        if not torch.isfinite(x).all():
            raise ValueError("whiten_ got non-finite features (NaN or inf)")
        fc0: nn.Linear = self.mlp.fc0
        w_block, mu, r, m = whitening_rows(x, fc0.out_features, mode, eps=eps, rtol=rtol)
        w = fc0.weight.detach().to(torch.float64).clone()
        w[:m] = w_block
        fc0.weight.copy_(w.to(fc0.weight.dtype))
        if fc0.bias is not None:
            b = fc0.bias.detach().to(torch.float64).clone()
            b[:m] = -(w_block @ mu)
            fc0.bias.copy_(b.to(fc0.bias.dtype))
        if r < min(m, n - 1, self.in_dim):
            warnings.warn(
                f"whiten_: features have numerical rank {r} < {min(m, self.in_dim)}; "
                f"the first layer is white on a {r}-dimensional subspace only",
                WhiteningRankWarning, stacklevel=2,
            )
        elif n - 1 < min(m, self.in_dim):
            warnings.warn(
                f"whiten_: {n} samples for {self.in_dim} dimensions; covariance rank is at most "
                f"{n - 1}, so only that many directions are whitened",
                WhiteningRankWarning, stacklevel=2,
            )
        self._spec = dataclasses.replace(self._spec, whiten=mode)
        self.whitening_info = {"mode": mode, "rank": r, "block": m, "samples": n}
        return self

    def extra_repr(self) -> str:
        s = self._spec
        return f"activation={s.activation}, depth={s.depth}, norm={s.norm}, last_norm={s.last_norm}"


#: The keyword arguments in the order they were once positional (for the error message).
_KEYWORDS: tuple[str, ...] = (
    "hidden_dim", "depth", "activation", "norm", "bias", "last_norm", "whiten", "prototypes", "freeze_prototype_norm",
)


def _keyword_only_message(in_dim: object, out_dim: object, extra: tuple[object, ...]) -> str:
    """The error for positional arguments after ``out_dim``, with the call written by keyword."""
    given = ", ".join(repr(a) for a in (in_dim, out_dim, *extra))
    msg = (f"GeometricHead({given}): only in_dim and out_dim are positional, every other argument is "
           "keyword-only. ")
    if len(extra) == 1:
        return msg + (f"For (input_dim, hidden_dim, output_dim) as in lightly's heads, write "
                      f"GeometricHead({in_dim!r}, {extra[0]!r}, hidden_dim={out_dim!r})")
    named = ", ".join(f"{k}={v!r}" for k, v in zip(_KEYWORDS, extra))
    return msg + f"Write GeometricHead({in_dim!r}, {out_dim!r}, {named})"


#: lightly's keyword names and geohead's.
_LIGHTLY_KEYWORDS = {"input_dim": "in_dim", "output_dim": "out_dim", "num_layers": "depth", "batch_norm": "norm='batch'",
                     "bottleneck_dim": "out_dim (DINO: prototypes=output_dim)", "use_bias": "bias"}


def _unknown_keyword_message(unknown: dict[str, object]) -> str:
    """The error for keywords GeometricHead does not take, with geohead's names for lightly's."""
    hints = [f"{k} -> {_LIGHTLY_KEYWORDS[k]}" for k in unknown if k in _LIGHTLY_KEYWORDS]
    msg = f"GeometricHead got unexpected keyword argument(s) {sorted(unknown)}"
    if hints:
        msg += "; these are lightly's names, geohead's are: " + ", ".join(hints)
        msg += " (a lightly head with its weights: GeometricHead.from_lightly(head))"
    return msg


def _prototype_layer(dim: int, prototypes: int, freeze_norm: bool) -> nn.Module:
    """DINO's last layer: weight-normalised Linear(dim, prototypes, bias=False), gain 1 (frozen
    with ``freeze_norm``). Shapes: (B, dim) -> (B, prototypes)."""
    proto = nn.Linear(dim, prototypes, bias=False)
    proto = nn.utils.parametrizations.weight_norm(proto)
    with torch.no_grad():
        proto.parametrizations.weight.original0.fill_(1.0)
    if freeze_norm:
        proto.parametrizations.weight.original0.requires_grad_(False)
    return proto


def num_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = ["GeometricHead", "WhiteningRankWarning", "num_parameters"]
