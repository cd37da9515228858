""":class:`HeadSpec`: everything that rebuilds a head, as a frozen, validated, JSON-serialisable record."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, ClassVar, Literal

from geohead.heads.layers import LAST_NORMS, NORMS, PIECEWISE_LINEAR, activation_name
from geohead.heads.whitening import WHITENING_MODES
from geohead.io import atomic_write_text

WHITEN_MODES: tuple[str | None, ...] = (None, *WHITENING_MODES)


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
        object.__setattr__(self, "activation", activation_name(self.activation))
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
        """True when the activation has non-zero curvature (a hidden layer with SiLU, GELU, …)."""
        return self.depth > 1 and self.activation not in PIECEWISE_LINEAR

    @property
    def curved(self) -> bool:
        """True when the head itself can have curvature, so ``M ≠ 0`` is possible: a smooth
        activation, a LayerNorm (it divides by the feature standard deviation, so even a linear
        or ReLU head with one is curved) or DINO's L2-normalised bottleneck. False means a
        linear/ReLU head without LayerNorm: ``M = 0`` with BatchNorm in eval mode (batch
        statistics in train mode curve every head; docs/theory.md, "The effective Hessian")."""
        layer_norm = (self.depth > 1 and self.norm == "layer") or self.last_norm == "layer"
        return self.smooth or layer_norm or self.prototypes is not None

    # ------------------------------------------------------------------ serialisation
    def to_dict(self) -> dict[str, Any]:
        """The fields, plus ``format`` (``"geohead.HeadSpec"``) and ``version``."""
        d = dataclasses.asdict(self)
        d["format"] = "geohead.HeadSpec"
        d["version"] = self.VERSION
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> HeadSpec:
        """Inverse of :meth:`to_dict`; unknown keys are an error that lists the valid ones."""
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
    def from_json(cls, text_or_path: str | Path) -> HeadSpec:
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

    @classmethod
    def coerce(cls, spec: HeadSpec | dict[str, Any] | str | Path) -> HeadSpec:
        """A :class:`HeadSpec` from itself, its dict, JSON text, or a JSON file path."""
        if isinstance(spec, dict):
            return cls.from_dict(spec)
        if isinstance(spec, (str, Path)):
            return cls.from_json(spec)
        return spec

    # ------------------------------------------------------------------ display, edits
    def describe(self) -> str:
        """One-line summary, e.g. ``depth 3 512->2048->128 silu norm=batch last_norm=none whiten=none``."""
        if self.depth == 1:
            body = f"linear {self.in_dim}->{self.out_dim}"
        else:
            body = (f"depth {self.depth} {self.in_dim}->{self.hidden_dim}->{self.out_dim} {self.activation} "
                    f"norm={self.norm or 'none'}")
        return f"{body} last_norm={self.last_norm or 'none'} whiten={self.whiten or 'none'}"

    def replace(self, **changes: Any) -> HeadSpec:
        """A copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)


__all__ = ["HeadSpec", "WHITEN_MODES"]
