"""The head search space: which :class:`~geohead.heads.HeadSpec` fields Optuna chooses, and how.

Seven dimensions, with widths scaled to the backbone's feature dimension d::

    depth        1, 2, 3, 4                         (number of Linear layers)
    hidden_dim   d/2, d, 2d, 4d                     (only when depth > 1)
    out_dim      d/4, d/2, d, 2d, 4d
    activation   silu gelu mish softplus tanh relu identity   (only when depth > 1)
    norm         batch layer none                   (after each hidden Linear; only when depth > 1)
    last_norm    none batch batch_noaffine layer    (after the last Linear)
    whiten       none pca zca                       (whitening init of the first layer)

A depth-1 head is one Linear layer: it has no hidden width, activation or hidden norm, so those
dimensions are not sampled for it (Optuna's define-by-run space is conditional), and its spec
records ``activation="identity"``, ``norm=None``, ``hidden_dim=out_dim``.

Users fix or narrow dimensions from the command line (:func:`parse_constraints`):

* ``--fix activation=silu``: the dimension is not searched; the value may lie outside the
  default choices (``--fix hidden_dim=384``);
* ``--range depth=2:3``: integer dimensions keep the choices in [lo, hi] (depth: every integer
  in the range, up to :data:`MAX_DEPTH`);
* ``--range activation=silu,gelu``: any dimension keeps the listed values.

Bad keys and values raise :class:`SpaceError` (a ``ValueError``) naming the value and the fix.
"""
from __future__ import annotations

import dataclasses
import difflib
from typing import Any, Iterable, Mapping

from geohead.heads import ACTIVATIONS, HeadSpec
from geohead.io import shorten

MAX_DEPTH = 8
#: The widest hidden or output layer a search tries: 8 layers this wide stay under HeadSpec's 2^31 weights.
MAX_WIDTH = 1 << 14
ACTIVATION_CHOICES: tuple[str, ...] = ("silu", "gelu", "mish", "softplus", "tanh", "relu", "identity")
NORM_CHOICES: tuple[str, ...] = ("batch", "layer", "none")
LAST_NORM_CHOICES: tuple[str, ...] = ("none", "batch", "batch_noaffine", "layer")
WHITEN_CHOICES: tuple[str, ...] = ("none", "pca", "zca")
INT_DIMS: tuple[str, ...] = ("depth", "hidden_dim", "out_dim")
#: Dimensions that exist only for heads with depth > 1.
HIDDEN_ONLY: tuple[str, ...] = ("hidden_dim", "activation", "norm")
DIMENSIONS: tuple[str, ...] = ("depth", "hidden_dim", "out_dim", "activation", "norm", "last_norm", "whiten")


class SpaceError(ValueError):
    """A ``--fix``/``--range`` entry that names an unknown dimension or holds a bad value."""


def _widths(d: int, factors: Iterable[float]) -> tuple[int, ...]:
    return tuple(sorted({max(8, int(round(f * d))) for f in factors}))


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """Candidate values per dimension (ordered) and the fixed ones.

    Attributes:
        in_dim: backbone feature dimension d (the widths' scale).
        choices: dimension -> tuple of candidate values (ints for :data:`INT_DIMS`, names
            with ``"none"`` for absent norms/whitening otherwise).
        fixed: dimension -> the single value a ``--fix`` set (not sampled, not an Optuna param).
    """

    in_dim: int
    choices: Mapping[str, tuple[Any, ...]]
    fixed: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    @classmethod
    def default(cls, in_dim: int) -> "SearchSpace":
        """The default space for backbone features of dimension ``in_dim``."""
        if isinstance(in_dim, bool) or not isinstance(in_dim, int) or in_dim < 1:
            raise SpaceError(f"in_dim must be a positive integer, got {in_dim!r}")
        return cls(in_dim, {
            "depth": (1, 2, 3, 4),
            "hidden_dim": _widths(in_dim, (0.5, 1, 2, 4)),
            "out_dim": _widths(in_dim, (0.25, 0.5, 1, 2, 4)),
            "activation": ACTIVATION_CHOICES,
            "norm": NORM_CHOICES,
            "last_norm": LAST_NORM_CHOICES,
            "whiten": WHITEN_CHOICES,
        })

    # ------------------------------------------------------------------ constraints
    def constrain(self, fix: Mapping[str, Any] | None = None, ranges: Mapping[str, tuple] | None = None) -> "SearchSpace":
        """A narrower space: ``fix`` maps dimensions to one value, ``ranges`` to allowed values
        (as parsed by :func:`parse_constraints`: ``("range", lo, hi)`` or ``("list", values)``)."""
        choices = dict(self.choices)
        fixed = dict(self.fixed)
        for name, value in (fix or {}).items():
            fixed[name] = value
            choices[name] = (value,)
        for name, rule in (ranges or {}).items():
            if name in fixed:
                raise SpaceError(f"{name} is both fixed (--fix) and ranged (--range); keep one of them")
            if rule[0] == "range":
                lo, hi = rule[1], rule[2]
                if name == "depth":
                    kept = tuple(range(lo, hi + 1))
                else:
                    kept = tuple(v for v in self.choices[name] if lo <= v <= hi)
                    if not kept:
                        raise SpaceError(
                            f"--range {name}={lo}:{hi} keeps none of the candidates {list(self.choices[name])} "
                            f"(scaled to the backbone's d={self.in_dim}); widen the range, list values "
                            f"(--range {name}=a,b) or fix one (--fix {name}=N)"
                        )
            else:
                kept = tuple(dict.fromkeys(rule[1]))
            choices[name] = kept
        return SearchSpace(self.in_dim, choices, fixed)

    # ------------------------------------------------------------------ sampling
    def suggest(self, trial: Any, base: HeadSpec) -> HeadSpec:
        """The candidate of an Optuna ``trial`` (define-by-run, conditional on depth).

        ``base`` supplies the fields the search does not choose (``in_dim``, ``bias``,
        ``prototypes`` ...). Dimensions with a single candidate are not Optuna parameters.
        """
        def pick(name: str) -> Any:
            c = self.choices[name]
            if len(c) == 1:
                return c[0]
            if name == "depth" and c == tuple(range(c[0], c[-1] + 1)):
                return trial.suggest_int(name, c[0], c[-1])
            return trial.suggest_categorical(name, list(c))

        depth = int(pick("depth"))
        out_dim = int(pick("out_dim"))
        if depth > 1:
            hidden_dim, activation, norm = int(pick("hidden_dim")), pick("activation"), pick("norm")
        else:
            hidden_dim, activation, norm = out_dim, "identity", "none"
        return self.spec(base, depth=depth, hidden_dim=hidden_dim, out_dim=out_dim, activation=activation,
                         norm=norm, last_norm=pick("last_norm"), whiten=pick("whiten"))

    @staticmethod
    def values_of(spec: HeadSpec) -> dict[str, Any]:
        """``spec``'s value of every dimension it has (the hidden ones only when depth > 1)."""
        values: dict[str, Any] = {"depth": spec.depth, "out_dim": spec.out_dim, "last_norm": spec.last_norm or "none",
                                  "whiten": spec.whiten or "none"}
        if spec.depth > 1:
            values.update(hidden_dim=spec.hidden_dim, activation=spec.activation, norm=spec.norm or "none")
        return values

    def contains(self, spec: HeadSpec) -> bool:
        """Whether the sampler could draw ``spec``: each dimension's value is one of its candidates."""
        return all(v in self.choices[k] for k, v in self.values_of(spec).items())

    def params_of(self, spec: HeadSpec) -> dict[str, Any]:
        """The Optuna parameters that make :meth:`suggest` return ``spec`` (dimensions with one
        candidate, and the hidden ones of a depth-1 head, are not parameters)."""
        return {k: v for k, v in self.values_of(spec).items() if len(self.choices[k]) > 1}

    def spec_of(self, params: Mapping[str, Any], base: HeadSpec) -> HeadSpec:
        """The head of Optuna parameters ``params`` (as :meth:`params_of` gives them)."""
        return self.suggest(_Fixed(params), base)

    def neighbours(self, params: Mapping[str, Any], rng: Any) -> list[dict[str, Any]]:
        """Parameters that differ from ``params`` in one dimension (a depth-1 head that becomes
        deeper draws its hidden dimensions with ``rng``, a ``random.Random``)."""
        out = []
        depth = int(params.get("depth", self.choices["depth"][0]))
        for name in DIMENSIONS:
            if len(self.choices[name]) < 2 or (name in HIDDEN_ONLY and depth == 1):
                continue
            for value in self.choices[name]:
                if value == params.get(name):
                    continue
                new = {**params, name: value}
                if name == "depth" and int(value) == 1:
                    new = {k: v for k, v in new.items() if k not in HIDDEN_ONLY}
                elif name == "depth" and depth == 1:
                    new.update({h: rng.choice(self.choices[h]) for h in HIDDEN_ONLY if len(self.choices[h]) > 1})
                out.append(new)
        return out

    def random_params(self, rng: Any) -> dict[str, Any]:
        """Parameters of a head drawn uniformly per dimension with ``rng`` (a ``random.Random``)."""
        params = {name: rng.choice(self.choices[name]) for name in DIMENSIONS if len(self.choices[name]) > 1}
        if int(params.get("depth", self.choices["depth"][0])) == 1:
            params = {k: v for k, v in params.items() if k not in HIDDEN_ONLY}
        return params

    @staticmethod
    def spec(base: HeadSpec, **values: Any) -> HeadSpec:
        """``base`` with search values applied (``"none"`` becomes ``None``)."""
        fields = {k: (None if v == "none" else v) for k, v in values.items()}
        return base.replace(**fields)

    def size(self) -> int:
        """Number of distinct heads in the space (depth-1 heads counted once per shared choice)."""
        c = self.choices
        shared = len(c["out_dim"]) * len(c["last_norm"]) * len(c["whiten"])
        hidden = len(c["hidden_dim"]) * len(c["activation"]) * len(c["norm"])
        return sum(shared * (1 if d == 1 else hidden) for d in c["depth"])

    def describe(self) -> str:
        """One line per dimension: candidates, or the fixed value."""
        lines = []
        for name in DIMENSIONS:
            vals = self.choices[name]
            tag = "fixed" if name in self.fixed else ("only" if len(vals) == 1 else "")
            lines.append(f"  {name:<10} {tag + ' ' if tag else ''}{', '.join(map(str, vals))}")
        return "\n".join(lines)


class _Fixed:
    """A stand-in Optuna trial whose suggestions are given values (for :meth:`SearchSpace.spec_of`)."""

    def __init__(self, params: Mapping[str, Any]) -> None:
        self.params = params

    def suggest_int(self, name: str, low: int, high: int) -> int:
        return int(self.params[name])

    def suggest_categorical(self, name: str, choices: list[Any]) -> Any:
        return self.params[name]


# ---------------------------------------------------------------------- parsing
def _entry(option: str, text: str) -> str:
    """The option and its entry as an error names them, the entry shortened if long."""
    return f"{option} {shorten(text)!r}"


def _key(text: str, option: str) -> tuple[str, str]:
    if "=" not in text:
        raise SpaceError(f"{_entry(option, text)} must look like KEY=VALUE (e.g. {option} depth=2{':3' if option == '--range' else ''})")
    key, _, raw = text.partition("=")
    key, raw = key.strip(), raw.strip()
    if key not in DIMENSIONS:
        close = difflib.get_close_matches(key, DIMENSIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise SpaceError(f"{_entry(option, text)}: unknown dimension {key!r}{hint}; valid dimensions are {list(DIMENSIONS)}")
    if not raw:
        raise SpaceError(f"{_entry(option, text)}: the value is empty; e.g. {option} {key}=...")
    return key, raw


def _int(key: str, raw: str, option: str, text: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SpaceError(f"{_entry(option, text)}: {key} must be a positive integer, got {shorten(raw)!r}") from None
    if value < 1:
        raise SpaceError(f"{_entry(option, text)}: {key} must be a positive integer, got {shorten(str(value))}")
    if key == "depth" and value > MAX_DEPTH:
        raise SpaceError(f"{_entry(option, text)}: depth must be between 1 and {MAX_DEPTH}, got {shorten(str(value))}")
    if key != "depth" and value > MAX_WIDTH:
        raise SpaceError(f"{_entry(option, text)}: {key} must be between 1 and {MAX_WIDTH} (the widest head a search "
                         f"trains), got {shorten(str(value))}; give a width up to {MAX_WIDTH}")
    return value


def _name(key: str, raw: str, option: str, text: str) -> str:
    allowed = {"activation": ACTIVATION_CHOICES, "norm": NORM_CHOICES, "last_norm": LAST_NORM_CHOICES,
               "whiten": WHITEN_CHOICES}[key]
    value = raw.lower()
    if key == "activation" and value == "swish":
        value = "silu"
    if value not in allowed:
        extra = f" ({sorted(ACTIVATIONS)} are the registered names)" if key == "activation" else ""
        raise SpaceError(f"{_entry(option, text)}: unknown {key} {shorten(raw)!r}; choose from {list(allowed)}{extra}")
    return value


def _value(key: str, raw: str, option: str, text: str) -> Any:
    return _int(key, raw, option, text) if key in INT_DIMS else _name(key, raw, option, text)


def parse_constraints(fix: Iterable[str] = (), ranges: Iterable[str] = ()) -> tuple[dict[str, Any], dict[str, tuple]]:
    """Parse ``--fix KEY=VALUE`` and ``--range KEY=LO:HI`` / ``KEY=a,b,...`` entries.

    Returns ``(fixed, ranged)``: ``fixed`` maps dimensions to one value; ``ranged`` maps them to
    ``("range", lo, hi)`` (integer dimensions) or ``("list", values)``. Raises :class:`SpaceError`
    for unknown dimensions, malformed entries, bad values, ``lo > hi`` and repeated keys.
    """
    fixed: dict[str, Any] = {}
    ranged: dict[str, tuple] = {}
    for text in fix:
        key, raw = _key(text, "--fix")
        if key in fixed:
            raise SpaceError(f"{_entry('--fix', text)}: {key} is fixed twice; give it once")
        fixed[key] = _value(key, raw, "--fix", text)
    for text in ranges:
        key, raw = _key(text, "--range")
        if key in ranged:
            raise SpaceError(f"{_entry('--range', text)}: {key} is ranged twice; give it once")
        if key in fixed:
            raise SpaceError(f"{key} is both fixed (--fix) and ranged (--range); keep one of them")
        if ":" in raw:
            if key not in INT_DIMS:
                raise SpaceError(f"{_entry('--range', text)}: {key} is not numeric; list its values instead, e.g. --range {key}=a,b")
            lo_s, _, hi_s = raw.partition(":")
            lo, hi = _int(key, lo_s.strip(), "--range", text), _int(key, hi_s.strip(), "--range", text)
            if lo > hi:
                raise SpaceError(f"{_entry('--range', text)}: the low end {lo} is above the high end {hi}; write {key}={hi}:{lo}")
            ranged[key] = ("range", lo, hi)
        else:
            parts = [p.strip() for p in raw.split(",")]
            if any(not p for p in parts):
                raise SpaceError(f"{_entry('--range', text)}: empty value in the list; write {key}=a,b or {key}=LO:HI")
            ranged[key] = ("list", tuple(_value(key, p, "--range", text) for p in parts))
    return fixed, ranged


__all__ = ["DIMENSIONS", "SearchSpace", "SpaceError", "parse_constraints"]
