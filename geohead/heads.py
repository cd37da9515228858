"""Projection heads: :class:`GeometricHead`, its JSON-serialisable :class:`HeadSpec`, presets.

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
import importlib
import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any, Callable, ClassVar, Literal, Union

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from geohead.io import atomic_write_text

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "mish": nn.Mish,
    "softplus": nn.Softplus,
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "identity": nn.Identity,
}
#: Activations whose second derivative vanishes almost everywhere (so ``M = 0`` a.e.).
PIECEWISE_LINEAR: frozenset[str] = frozenset({"relu", "identity"})
NORMS: tuple[str | None, ...] = ("batch", "layer", None)
LAST_NORMS: tuple[str | None, ...] = (None, "batch", "batch_noaffine", "layer")
WHITEN_MODES: tuple[str | None, ...] = (None, "zca", "pca")

ActivationArg = Union[str, type[nn.Module]]


def _activation_name(act: ActivationArg) -> str:
    """Canonical JSON name of an activation: a registry key or ``module:QualName``."""
    if isinstance(act, str) and ":" in act:
        _activation_type(act)  # validates the import path
        return act
    if isinstance(act, str):
        key = act.lower()
        if key not in ACTIVATIONS:
            raise ValueError(
                f"unknown activation {act!r}; valid names are {sorted(ACTIVATIONS)} "
                "or any nn.Module type (e.g. activation=torch.nn.ELU)"
            )
        return "silu" if key == "swish" else key
    if isinstance(act, type) and issubclass(act, nn.Module):
        for name, cls in ACTIVATIONS.items():
            if cls is act and name != "swish":
                return name
        return f"{act.__module__}:{act.__qualname__}"
    raise TypeError(
        f"activation must be a name in {sorted(ACTIVATIONS)} or an nn.Module type, got {act!r}"
    )


def _activation_type(name: str) -> type[nn.Module]:
    """Inverse of :func:`_activation_name`."""
    if name in ACTIVATIONS:
        return ACTIVATIONS[name]
    if ":" in name:
        module, _, qual = name.partition(":")
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
        if isinstance(obj, type) and issubclass(obj, nn.Module):
            return obj
    raise ValueError(
        f"unknown activation {name!r}; valid names are {sorted(ACTIVATIONS)} or 'module:Class'"
    )


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """Everything needed to rebuild a :class:`GeometricHead`; the search writes it, recipes read it.

    Attributes:
        in_dim: backbone feature dimension d.
        out_dim: embedding dimension k (for DINO heads: the bottleneck before the prototypes).
        hidden_dim: width of the hidden layers (ignored when ``depth == 1``).
        depth: number of Linear layers; 1 is a linear head (no activation).
        activation: a name in :data:`ACTIVATIONS` or ``"module:Class"`` of an ``nn.Module`` type.
        norm: ``"batch"``, ``"layer"`` or ``None`` after each hidden Linear.
        bias: ``"auto"`` (drop the bias of a Linear followed by BatchNorm), ``True`` or ``False``.
        last_norm: ``None``, ``"batch"``, ``"batch_noaffine"`` (SimSiam) or ``"layer"`` after the
            last Linear.
        whiten: ``None``, ``"zca"`` or ``"pca"``: the whitening initialisation requested for the
            first layer (applied by :meth:`GeometricHead.whiten_` on a batch of features).
        prototypes: ``None``, or K for a DINO head: L2-normalise the output, then a
            weight-normalised Linear(out_dim, K, bias=False).
        freeze_prototype_norm: DINO's ``norm_last_layer``: the weight-norm gain is fixed to 1.
    """

    in_dim: int
    out_dim: int
    hidden_dim: int = 2048
    depth: int = 3
    activation: str = "silu"
    norm: str | None = "batch"
    bias: Literal["auto"] | bool = "auto"
    last_norm: str | None = None
    whiten: str | None = None
    prototypes: int | None = None
    freeze_prototype_norm: bool = True

    VERSION: ClassVar[int] = 1

    def __post_init__(self) -> None:
        for field in ("in_dim", "out_dim", "hidden_dim", "depth"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"HeadSpec.{field} must be a positive integer, got {value!r}")
        object.__setattr__(self, "activation", _activation_name(self.activation))
        if self.norm not in NORMS:
            raise ValueError(f"unknown norm {self.norm!r}; valid values are {list(NORMS)}")
        if self.last_norm not in LAST_NORMS:
            raise ValueError(
                f"unknown last_norm {self.last_norm!r}; valid values are {list(LAST_NORMS)}"
            )
        if self.bias not in ("auto", True, False):
            raise ValueError(f"bias must be 'auto', True or False, got {self.bias!r}")
        if self.whiten not in WHITEN_MODES:
            raise ValueError(f"unknown whiten {self.whiten!r}; valid values are {list(WHITEN_MODES)}")
        if self.prototypes is not None and (
            isinstance(self.prototypes, bool) or not isinstance(self.prototypes, int) or self.prototypes < 1
        ):
            raise ValueError(f"prototypes must be None or a positive integer, got {self.prototypes!r}")

    @property
    def output_dim(self) -> int:
        """Dimension of the head's output: ``prototypes`` if set, else ``out_dim``."""
        return self.prototypes if self.prototypes is not None else self.out_dim

    @property
    def smooth(self) -> bool:
        """True when the activation has non-zero curvature (so the head can have ``M ≠ 0``)."""
        return self.depth > 1 and self.activation not in PIECEWISE_LINEAR

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["format"] = "geohead.HeadSpec"
        d["version"] = self.VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "HeadSpec":
        d = dict(d)
        fmt = d.pop("format", "geohead.HeadSpec")
        d.pop("version", None)
        if fmt != "geohead.HeadSpec":
            raise ValueError(f"not a geohead head spec (format={fmt!r})")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names)
        if unknown:
            raise ValueError(f"unknown HeadSpec keys {unknown}; valid keys are {sorted(names)}")
        return cls(**d)

    def to_json(self, path: str | Path | None = None) -> str:
        """The spec as JSON text; also written atomically to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> "HeadSpec":
        """Parse JSON text, or read a ``.json`` file when given a path that exists."""
        text = str(text_or_path)
        if not text.lstrip().startswith("{"):
            path = Path(text)
            if not path.is_file():
                raise FileNotFoundError(f"head spec file {path} does not exist")
            text = path.read_text()
        try:
            d = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValueError(f"head spec is not valid JSON: {exc}") from None
        if not isinstance(d, dict):
            raise ValueError("head spec JSON must be an object")
        return cls.from_dict(d)

    load = from_json

    def describe(self) -> str:
        """One-line summary, e.g. ``depth 3 512->2048->128 silu norm=batch last_norm=none whiten=none``."""
        if self.depth == 1:
            body = f"linear {self.in_dim}->{self.out_dim}"
        else:
            body = (f"depth {self.depth} {self.in_dim}->{self.hidden_dim}->{self.out_dim} {self.activation} "
                    f"norm={self.norm or 'none'}")
        return f"{body} last_norm={self.last_norm or 'none'} whiten={self.whiten or 'none'}"

    def replace(self, **changes: Any) -> "HeadSpec":
        return dataclasses.replace(self, **changes)


class L2Norm(nn.Module):
    """``x / ||x||_2`` along the last dimension (DINO's bottleneck normalisation)."""

    def forward(self, x: Tensor) -> Tensor:
        return F.normalize(x, dim=-1, eps=1e-6 if x.dtype in (torch.float16, torch.bfloat16) else 1e-12)


def _norm_layer(kind: str | None, dim: int) -> nn.Module:
    if kind is None:
        return nn.Identity()
    if kind == "batch":
        return nn.BatchNorm1d(dim)
    if kind == "batch_noaffine":
        return nn.BatchNorm1d(dim, affine=False)
    if kind == "layer":
        return nn.LayerNorm(dim)
    raise ValueError(f"unknown norm {kind!r}")  # unreachable: HeadSpec validates


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

    Shapes: ``forward`` takes ``z`` (B, in_dim) and returns (B, out_dim), or (B, prototypes).
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int,
        hidden_dim: int = 2048,
        depth: int = 3,
        activation: ActivationArg = "silu",
        norm: str | None = "batch",
        bias: Literal["auto"] | bool = "auto",
        last_norm: str | None = None,
        whiten: Tensor | str | None = None,
        prototypes: int | None = None,
        freeze_prototype_norm: bool = True,
    ) -> None:
        super().__init__()
        features = None
        if isinstance(whiten, Tensor):
            features, whiten = whiten, "zca"
        act_name = _activation_name(activation)  # raises with the list of valid names
        spec = HeadSpec(
            in_dim=in_dim,
            out_dim=out_dim,
            hidden_dim=hidden_dim,
            depth=depth,
            activation=act_name,
            norm=norm,
            bias=bias,
            last_norm=last_norm,
            whiten=whiten,
            prototypes=prototypes,
            freeze_prototype_norm=freeze_prototype_norm,
        )
        act_type = _activation_type(spec.activation)
        self._spec = spec

        layers: OrderedDict[str, nn.Module] = OrderedDict()
        dims = [in_dim] + [hidden_dim] * (depth - 1) + [out_dim]
        for i in range(depth):
            last = i == depth - 1
            kind = last_norm if last else norm
            use_bias = bias if isinstance(bias, bool) else kind not in ("batch", "batch_noaffine")
            layers[f"fc{i}"] = nn.Linear(dims[i], dims[i + 1], bias=use_bias)
            if not last:
                layers[f"norm{i}"] = _norm_layer(kind, dims[i + 1])
                layers[f"act{i}"] = act_type()
            else:
                layers["last_norm"] = _norm_layer(kind, dims[i + 1])
        self.mlp = nn.Sequential(layers)
        if prototypes is not None:
            self.l2norm: nn.Module = L2Norm()
            proto = nn.Linear(out_dim, prototypes, bias=False)
            proto = nn.utils.parametrizations.weight_norm(proto)
            with torch.no_grad():
                proto.parametrizations.weight.original0.fill_(1.0)
            if freeze_prototype_norm:
                proto.parametrizations.weight.original0.requires_grad_(False)
            self.prototypes: nn.Module = proto
        else:
            self.l2norm = nn.Identity()
            self.prototypes = nn.Identity()
        self.whitening_info: dict[str, Any] | None = None
        if features is not None:
            self.whiten_(features, mode="zca")

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
    def from_spec(cls, spec: HeadSpec | dict[str, Any] | str | Path) -> "GeometricHead":
        """Build a head from a :class:`HeadSpec`, its dict, JSON text, or a JSON file path."""
        if isinstance(spec, dict):
            spec = HeadSpec.from_dict(spec)
        elif isinstance(spec, (str, Path)):
            spec = HeadSpec.from_json(spec)
        kwargs = {f.name: getattr(spec, f.name) for f in dataclasses.fields(HeadSpec)}
        return cls(**kwargs)

    @classmethod
    def preset(cls, name: str, in_dim: int, smooth: bool = True, **overrides: Any) -> "GeometricHead":
        """The standard head of an SSL method; see :func:`preset_spec` for the shapes."""
        return cls.from_spec(preset_spec(name, in_dim, smooth=smooth, **overrides))

    # ------------------------------------------------------------------ forward
    def forward(self, z: Tensor) -> Tensor:
        if z.dim() != 2 or z.shape[-1] != self._spec.in_dim:
            raise ValueError(
                f"GeometricHead expects input of shape (B, {self._spec.in_dim}), got {tuple(z.shape)}"
            )
        return self.prototypes(self.l2norm(self.mlp(z)))

    # ------------------------------------------------------------------ whitening
    @torch.no_grad()
    def whiten_(self, features: Tensor, mode: str | None = None, eps: float = 1e-8, rtol: float = 1e-6) -> "GeometricHead":
        """Set the first Linear so that its pre-activation of ``features`` is whitened.

        With ``mu``, ``Σ = U Λ Uᵀ`` the mean and covariance of ``features`` (N, in_dim), computed
        in float64, and ``r`` the number of eigenvalues above ``rtol·λ_max`` (at most
        ``min(N-1, in_dim, hidden)``), the first ``m = min(in_dim, width)`` rows of the first
        weight become ``P Λ_r^{-1/2} U_rᵀ`` (eigenvalues regularised as ``λ + eps·mean(λ)``) and
        the bias ``-W mu`` (when the layer has one), so the pre-activation's covariance over
        ``features`` is ``P Pᵀ``: the identity on the r-dimensional subspace it keeps.

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
        if mode not in ("zca", "pca"):
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
        width = fc0.out_features
        mu = x.mean(0)
        xc = x - mu
        cov = xc.T @ xc / (n - 1)
        evals, evecs = torch.linalg.eigh(cov)
        evals, evecs = evals.flip(0), evecs.flip(1)  # descending
        m = min(self.in_dim, width)
        lam_max = float(evals[0]) if evals.numel() else 0.0
        if lam_max <= 0.0:
            raise ValueError("whiten_ got features with zero variance (completely collapsed)")
        r = int((evals > rtol * lam_max).sum())
        r = min(r, m, n - 1)
        u_r, lam_r = evecs[:, :r], evals[:r]
        lam_r = lam_r + eps * float(evals.clamp_min(0).mean())
        scaled = u_r.T / lam_r.sqrt()[:, None]  # (r, in_dim): Λ_r^{-1/2} U_rᵀ
        if mode == "pca":
            p = torch.zeros(m, r, dtype=torch.float64)
            p[:r, :r] = torch.eye(r, dtype=torch.float64)
        else:
            a = u_r[:m]  # (m, r)
            uu, _, vh = torch.linalg.svd(a, full_matrices=False)
            p = uu @ vh  # polar factor: closest matrix with orthonormal columns
        w_block = p @ scaled  # (m, in_dim)
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
                stacklevel=2,
            )
        elif n - 1 < min(m, self.in_dim):
            warnings.warn(
                f"whiten_: {n} samples for {self.in_dim} dimensions; covariance rank is at most "
                f"{n - 1}, so only that many directions are whitened",
                stacklevel=2,
            )
        self._spec = dataclasses.replace(self._spec, whiten=mode)
        self.whitening_info = {"mode": mode, "rank": r, "block": m, "samples": n}
        return self

    def extra_repr(self) -> str:
        s = self._spec
        return f"activation={s.activation}, depth={s.depth}, norm={s.norm}, last_norm={s.last_norm}"


# ---------------------------------------------------------------------- presets
def _simclr(in_dim: int, act: str) -> dict[str, Any]:
    """SimCLR (Chen et al. 2020, Sec. 2.1): "We opt for simplicity and adopt the commonly used
    ResNet ... and a MLP with one hidden layer to obtain z_i = g(h_i) = W(2)σ(W(1)h_i) where σ is
    a ReLU non-linearity"; the projection output is 128-d (Sec. B.9 / Fig. 8), the hidden layer
    as wide as h; BatchNorm on the hidden layer as in the official implementation."""
    return dict(in_dim=in_dim, hidden_dim=in_dim, out_dim=128, depth=2, activation=act, norm="batch")


def _byol(in_dim: int, act: str) -> dict[str, Any]:
    """BYOL (Grill et al. 2020, Sec. 3.3): "the projection g_θ ... is a multi-layer perceptron
    (MLP) consisting in a linear layer with output size 4096 followed by batch normalization,
    rectified linear units (ReLU), and a final linear layer with output dimension 256"."""
    return dict(in_dim=in_dim, hidden_dim=4096, out_dim=256, depth=2, activation=act, norm="batch")


def _byol_predictor(in_dim: int, act: str) -> dict[str, Any]:
    """BYOL predictor q_θ (Grill et al. 2020, Sec. 3.3): "uses the same architecture as g_θ"
    (4096 hidden, BN + ReLU, output of the projection's size)."""
    return dict(in_dim=in_dim, hidden_dim=4096, out_dim=in_dim, depth=2, activation=act, norm="batch")


def _simsiam(in_dim: int, act: str) -> dict[str, Any]:
    """SimSiam (Chen & He 2021, Sec. 4): "The projection MLP (in f) has BN applied to each
    fully-connected (fc) layer, including its output fc. Its output fc has no ReLU. The hidden fc
    is 2048-d. This MLP has 3 layers." The output BN is not affine in the official code."""
    return dict(
        in_dim=in_dim, hidden_dim=2048, out_dim=2048, depth=3, activation=act, norm="batch",
        last_norm="batch_noaffine",
    )


def _simsiam_predictor(in_dim: int, act: str) -> dict[str, Any]:
    """SimSiam predictor h (Chen & He 2021, Sec. 4): "The prediction MLP (h) has BN applied to its
    hidden fc layers. Its output fc does not have BN or ReLU. This MLP has 2 layers. The
    dimension of h's input and output (z and p) is d = 2048, and h's hidden layer's dimension is
    512, making h a bottleneck structure"."""
    return dict(in_dim=in_dim, hidden_dim=max(1, in_dim // 4), out_dim=in_dim, depth=2, activation=act, norm="batch")


def _barlow(in_dim: int, act: str) -> dict[str, Any]:
    """Barlow Twins (Zbontar et al. 2021, Sec. 3): "The projector network has three linear layers,
    each with 8192 output units. The first two layers of the projector are followed by a batch
    normalization layer and rectified linear units"."""
    return dict(in_dim=in_dim, hidden_dim=8192, out_dim=8192, depth=3, activation=act, norm="batch")


def _vicreg(in_dim: int, act: str) -> dict[str, Any]:
    """VICReg (Bardes et al. 2022, Sec. 4.1): "The expander h_φ is composed of two fully-connected
    layers with batch normalization (BN) and ReLU, and a third linear layer. The sizes of all
    3 layers were set to 8192"."""
    return dict(in_dim=in_dim, hidden_dim=8192, out_dim=8192, depth=3, activation=act, norm="batch")


def _dino(in_dim: int, act: str) -> dict[str, Any]:
    """DINO (Caron et al. 2021, Sec. 3.1 and App.): "The projection head consists of a 3-layer
    multi-layer perceptron (MLP) with hidden dimension 2048 followed by ℓ2 normalization and a
    weight normalized fully connected layer with K dimensions"; bottleneck 256, GELU, no BN,
    K = 65536, last-layer weight-norm gain fixed to 1 (``norm_last_layer``)."""
    return dict(
        in_dim=in_dim, hidden_dim=2048, out_dim=256, depth=3, activation=act, norm=None,
        prototypes=65536, freeze_prototype_norm=True,
    )


_PRESETS: dict[str, Callable[[int, str], dict[str, Any]]] = {
    "simclr": _simclr,
    "byol": _byol,
    "byol_predictor": _byol_predictor,
    "simsiam": _simsiam,
    "simsiam_predictor": _simsiam_predictor,
    "barlow": _barlow,
    "vicreg": _vicreg,
    "dino": _dino,
}
PRESETS: tuple[str, ...] = tuple(_PRESETS)


def preset_spec(name: str, in_dim: int, smooth: bool = True, **overrides: Any) -> HeadSpec:
    """The :class:`HeadSpec` of a method's standard head (see each ``_<name>`` docstring).

    ``smooth=True`` replaces the method's ReLU with SiLU (Swish); DINO's head already uses GELU,
    which is smooth, and keeps it either way. ``overrides`` change any spec field, e.g.
    ``preset_spec("barlow", 512, hidden_dim=2048, out_dim=2048)`` for a CPU-sized head.
    """
    key = name.lower()
    if key not in _PRESETS:
        raise ValueError(f"unknown head preset {name!r}; valid presets are {list(PRESETS)}")
    act = "gelu" if key == "dino" else ("silu" if smooth else "relu")
    fields = _PRESETS[key](in_dim, act)
    valid = {f.name for f in dataclasses.fields(HeadSpec)}
    bad = sorted(set(overrides) - valid)
    if bad:
        raise ValueError(f"unknown preset overrides {bad}; valid keys are {sorted(valid)}")
    fields.update(overrides)
    return HeadSpec(**fields)


def num_parameters(module: nn.Module) -> int:
    """Number of trainable parameters."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad)


__all__ = [
    "ACTIVATIONS",
    "GeometricHead",
    "HeadSpec",
    "PRESETS",
    "preset_spec",
    "num_parameters",
]
