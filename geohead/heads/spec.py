""":class:`HeadSpec`: everything that rebuilds a head, as a frozen, validated, JSON-serialisable record."""
from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import Any, ClassVar, Literal

from geohead.errors import SpecError
from geohead.heads.layers import LAST_NORMS, NORMS, PIECEWISE_LINEAR, activation_name
from geohead.heads.whitening import WHITENING_MODES
from geohead.io import atomic_write_text, parse_json, read_small

WHITEN_MODES: tuple[str | None, ...] = (None, *WHITENING_MODES)
#: Bounds on a spec's sizes: a spec from a file cannot ask for more memory than a machine has.
MAX_DIM = 1 << 20
MAX_DEPTH = 64
MAX_PARAMETERS = 1 << 31


@dataclasses.dataclass(frozen=True)
class HeadSpec:
    """Everything needed to rebuild a :class:`GeometricHead`; the search writes it, recipes read it.

    Attributes:
        in_dim: backbone feature dimension d.
        out_dim: embedding dimension k (for DINO heads: the bottleneck before the prototypes).
        hidden_dim: width of the hidden layers (ignored when ``depth == 1``).
        depth: number of Linear layers; 1 is a linear head (no activation).
        activation: a name in :data:`ACTIVATIONS`, a name registered with :func:`~geohead.heads.register_activation`,
            or an ``nn.Module`` type (stored as ``"module:QualName"``, registered in this process; a spec
            read from a file is looked up, never imported).
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
            top = MAX_DEPTH if field == "depth" else MAX_DIM
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= top:
                raise SpecError(f"HeadSpec.{field} must be an integer from 1 to {top}, got {_short(value)}")
        object.__setattr__(self, "activation", activation_name(self.activation))
        if not isinstance(self.freeze_prototype_norm, bool):
            raise SpecError(f"HeadSpec.freeze_prototype_norm must be true or false, got {_short(self.freeze_prototype_norm)}")
        if self.norm not in NORMS:
            raise SpecError(f"unknown norm {_short(self.norm)}; valid values are {list(NORMS)}")
        if self.last_norm not in LAST_NORMS:
            raise SpecError(
                f"unknown last_norm {_short(self.last_norm)}; valid values are {list(LAST_NORMS)}"
            )
        if self.bias not in ("auto", True, False):
            raise SpecError(f"bias must be 'auto', True or False, got {_short(self.bias)}")
        if self.whiten not in WHITEN_MODES:
            raise SpecError(f"unknown whiten {_short(self.whiten)}; valid values are {list(WHITEN_MODES)}")
        if self.prototypes is not None and (
            isinstance(self.prototypes, bool) or not isinstance(self.prototypes, int) or not 1 <= self.prototypes <= MAX_DIM
        ):
            raise SpecError(f"HeadSpec.prototypes must be None or an integer from 1 to {MAX_DIM}, got {_short(self.prototypes)}")
        n = self.num_weights
        if n > MAX_PARAMETERS:
            raise SpecError(f"HeadSpec asks for {n:,} weights (more than {MAX_PARAMETERS:,}); lower hidden_dim "
                            f"({self.hidden_dim}), depth ({self.depth}) or prototypes ({self.prototypes})")

    @property
    def num_weights(self) -> int:
        """The number of Linear weights the head has (biases and norms left out): a size bound."""
        dims = [self.in_dim] + [self.hidden_dim] * (self.depth - 1) + [self.out_dim]
        return sum(a * b for a, b in zip(dims, dims[1:])) + self.out_dim * (self.prototypes or 0)

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
        """Inverse of :meth:`to_dict`; unknown keys, another format, a newer version are errors
        (:class:`~geohead.errors.SpecError`, a ``ValueError``) that say what is valid."""
        if not isinstance(d, dict):
            raise SpecError(f"a head spec must be a JSON object, got {type(d).__name__}: {_short(d)}")
        d = dict(d)
        check_found_on(d.pop("found_on", None))  # where a search decided on the head: a record, not a field
        fmt = d.pop("format", "geohead.HeadSpec")
        version = d.pop("version", cls.VERSION)
        if fmt != "geohead.HeadSpec":
            raise SpecError(f"not a geohead head spec (format={_short(fmt)}); a spec has format 'geohead.HeadSpec'")
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= cls.VERSION:
            raise SpecError(f"head spec version {_short(version)} is not one this geohead reads (1 to {cls.VERSION}); "
                            "write it with this version of geohead or upgrade geohead")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(str(k) for k in set(d) - names)
        if unknown:
            raise SpecError(f"unknown HeadSpec keys {unknown[:8]}; valid keys are {sorted(names)}")
        missing = [k for k in ("in_dim", "out_dim") if k not in d]
        if missing:
            raise SpecError(f"head spec lacks {missing}; a spec names at least in_dim and out_dim")
        return cls(**d)

    def to_json(self, path: str | Path | None = None, found_on: dict[str, Any] | None = None) -> str:
        """The spec as JSON text; also written atomically to ``path`` when given. ``found_on``: the
        proxy a search decided on the head with (:data:`FOUND_ON_KEYS`), stored beside the fields."""
        d = self.to_dict()
        if found_on is not None:
            d["found_on"] = check_found_on(found_on)
        text = json.dumps(d, indent=2, sort_keys=True) + "\n"
        if path is not None:
            atomic_write_text(path, text)
        return text

    @classmethod
    def from_json(cls, text_or_path: str | Path) -> HeadSpec:
        """Parse JSON text (a ``str`` holding a JSON object), or read a ``.json`` file (a
        :class:`~pathlib.Path`, or a ``str`` that is not JSON). Raises
        :class:`~geohead.errors.SpecError` for anything that is not a spec, FileNotFoundError
        for a missing file."""
        if not isinstance(text_or_path, (str, os.PathLike)):
            raise SpecError(f"a head spec is JSON text or the path of a .json file (str or pathlib.Path), got "
                            f"{type(text_or_path).__name__} {_short(text_or_path)}")
        text = text_or_path if isinstance(text_or_path, str) else None
        where = "head spec"
        if text is None or not text.lstrip().startswith(("{", "[", '"')) and not _is_json_scalar(text):
            text, where = cls.read_text(text_or_path), f"head spec file {str(text_or_path)!r}"
        d = parse_json(text, where, SpecError)
        if not isinstance(d, dict):
            raise SpecError(f"{where} must be a JSON object, got {type(d).__name__}: {_short(d)}")
        return cls.from_dict(d)

    load = from_json

    @staticmethod
    def read_text(path: str | Path) -> str:
        """The UTF-8 text of a spec file, refused (:class:`~geohead.errors.SpecError`) when large
        or binary; FileNotFoundError when missing."""
        path = Path(path)
        if path.is_dir():
            raise SpecError(f"head spec {str(path)!r} is a folder; give the .json file in it (best_head.json, head.json)")
        if not path.is_file():
            raise FileNotFoundError(f"head spec file {str(path)!r} does not exist; give a .json file "
                                    "written by geohead (best_head.json, head.json) or JSON text")
        return _read_spec_file(path)

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

    def rescale(self, in_dim: int) -> HeadSpec:
        """This head moved to a backbone of width ``in_dim``: ``hidden_dim`` and ``out_dim`` stay
        the same multiples of d (``round(width * in_dim / self.in_dim)``, at least 1), so a
        ``linear 128->512`` head becomes ``linear 512->2048``. ``prototypes`` (DINO's K counts
        prototypes, not feature directions) and every other field are kept."""
        if isinstance(in_dim, bool) or not isinstance(in_dim, int) or not 1 <= in_dim <= MAX_DIM:
            raise SpecError(f"rescale: in_dim must be an integer from 1 to {MAX_DIM}, got {_short(in_dim)}")
        if in_dim == self.in_dim:
            return self
        ratio = in_dim / self.in_dim
        return self.replace(in_dim=in_dim, hidden_dim=max(1, round(self.hidden_dim * ratio)),
                            out_dim=max(1, round(self.out_dim * ratio)))


#: What ``found_on`` may record: the search's backbone, its width d, the steps (and epochs) each
#: completed trial trained, its training images, batch, data name and objective, and the epochs
#: of the verdict's runs when they trained a schedule of their own, their backbone and its d when
#: they trained on a backbone of their own.
FOUND_ON_KEYS = ("backbone", "d", "steps", "epochs", "n_train", "batch_size", "data", "objective", "verdict_epochs",
                 "verdict_backbone", "verdict_d")
#: the found_on keys that hold names (the others hold sizes: finite numbers >= 0)
_FOUND_ON_NAMES = ("backbone", "data", "objective", "verdict_backbone")


def check_found_on(found_on: Any) -> dict[str, Any] | None:
    """``found_on`` itself when it is None or a dict of :data:`FOUND_ON_KEYS` to plain values
    (numbers, strings up to 200 characters); else a :class:`SpecError` naming the bad entry."""
    if found_on is None:
        return None
    if not isinstance(found_on, dict):
        raise SpecError(f"head spec found_on must be a JSON object, got {_short(found_on)}")
    for k, v in found_on.items():
        if k not in FOUND_ON_KEYS:
            raise SpecError(f"unknown found_on key {_short(k)}; valid keys are {list(FOUND_ON_KEYS)}")
        if k in _FOUND_ON_NAMES:
            if v is not None and not (isinstance(v, str) and len(v) <= 200):
                raise SpecError(f"head spec found_on.{k} must be a name of at most 200 characters, got {_short(v)}")
        elif v is not None and not (isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < math.inf):
            raise SpecError(f"head spec found_on.{k} must be a finite number >= 0, got {_short(v)}")
    return found_on


def read_found_on(path: str | Path) -> dict[str, Any] | None:
    """The ``found_on`` record of a spec file (None when the head was not written by a search)."""
    d = parse_json(HeadSpec.read_text(path), f"head spec file {str(path)!r}", SpecError)
    return check_found_on(d.get("found_on")) if isinstance(d, dict) else None


def _short(value: Any, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters (a value from a file can be huge)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _is_json_scalar(text: str) -> bool:
    """True when ``text`` parses as a JSON number, true/false or null (not a file name)."""
    try:
        json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        return False
    return True


def _read_spec_file(path: Path) -> str:
    """The UTF-8 text of a spec file; a large or binary file is a :class:`SpecError`."""
    raw = read_small(path, "head spec file", "a spec is a small JSON object: give the best_head.json or head.json "
                     "that geohead wrote", SpecError)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise SpecError(f"head spec file {str(path)!r} is not UTF-8 text (a binary file?); give the .json "
                        "file that geohead wrote") from None


__all__ = ["FOUND_ON_KEYS", "HeadSpec", "MAX_DIM", "WHITEN_MODES", "check_found_on", "read_found_on"]
